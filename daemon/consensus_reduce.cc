#include "daemon/consensus_reduce.h"

#include <spdlog/spdlog.h>

namespace meshtrain::daemon {

ReduceTask PrepareReduce(node::ConsensusReduce red, bool robust,
                         const learn::RobustReport& report) {
  ReduceTask t;
  t.robust = robust;
  t.judged.min_radius = report.radius;
  for (const std::string& name : red.names) {
    auto it = report.peers.find(name);
    t.judged.quarantined.push_back(it != report.peers.end() && it->second.flagged);
  }
  t.models = std::move(red.models);
  t.names = std::move(red.names);
  return t;
}

namespace {

std::string NamesAt(const std::vector<std::string>& names, const std::vector<size_t>& at) {
  std::string out;
  for (size_t i : at) out += " " + (i < names.size() ? names[i] : "#" + std::to_string(i));
  return out.empty() ? " none" : out;
}

}  // namespace

std::vector<float> RunReduce(const ReduceTask& t) {
  std::vector<const std::vector<float>*> in;
  for (const auto& m : t.models) in.push_back(m.get());
  std::vector<size_t> dropped, clipped;
  std::vector<float> out = learn::ReduceModels(in, t.robust, &dropped, &clipped, t.judged);
  if (!dropped.empty() || !clipped.empty()) {
    spdlog::warn("robust consensus: of {} final models, dropped{}, clipped{}", in.size(),
                 NamesAt(t.names, dropped), NamesAt(t.names, clipped));
  }
  return out;
}

}  // namespace meshtrain::daemon
