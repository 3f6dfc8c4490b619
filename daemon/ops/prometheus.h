// GET /metrics: the agent's state in the Prometheus text exposition format 0.0.4.
// Names follow Prometheus conventions: `meshtrain_` prefix, base units (seconds, bytes),
// counters end in `_total`. Rendered on the loop thread from the same figures `status` shows.
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/ops/loop_monitor.h"
#include "daemon/trainer/trainer.h"
#include "membership/swim.h"

namespace meshtrain::daemon {

// Builds one exposition: families in the order given, HELP and TYPE lines first.
class PromWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  // type: counter | gauge | histogram
  void Family(const std::string& name, const char* type, const std::string& help);
  void Sample(const std::string& name, double value, const Labels& labels = {});
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

std::string EscapeLabelValue(const std::string& v);

struct PromInputs {
  nlohmann::json status;  // StatusJson(...)
  std::vector<membership::Member> members;
  WaitHistogram wait;
  LagHistogram loop_lag;
  std::map<int, uint64_t> http_responses;  // status code -> count
  std::string version;
};

std::string RenderPrometheus(const PromInputs& in);

}  // namespace meshtrain::daemon
