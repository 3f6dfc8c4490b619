// The leader's end-of-training reduce (docs/design.md "One model at the end", "Robust mixing"):
// what is taken from the loop (the final models, whom they are of, the trainer's judgments of
// those senders) and the reduce itself, run off the loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "learn/robust_mix.h"
#include "node/io.h"

namespace meshtrain::daemon {

struct ReduceTask {
  std::vector<std::shared_ptr<const std::vector<float>>> models;
  std::vector<std::string> names;
  bool robust = false;
  learn::ReduceJudgment judged;
};

// On the loop: the task for `red`, with `report` (the trainer's robust judgments) marking the
// senders it quarantines and giving the radius floor.
ReduceTask PrepareReduce(node::ConsensusReduce red, bool robust, const learn::RobustReport& report);

// Off the loop: learn::ReduceModels over the task; says in the log which models were dropped or
// clipped.
std::vector<float> RunReduce(const ReduceTask& t);

}  // namespace meshtrain::daemon
