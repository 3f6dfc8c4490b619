// What the live dashboard (dashboard.h) polls at /api/state: this agent's status, the members,
// the accuracy and loss curves per node, the current receiver-selection plan and the traffic
// curve. The curves are bounded: at most kMaxCurves nodes, kMaxCurvePoints points each (halved,
// every other point kept, beyond that), so a long-running agent's page stays small.
// Thread-safety: not thread-safe; the agent's loop thread owns it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/offload.h"
#include "membership/swim.h"
#include "sync/selection.h"

namespace meshtrain::daemon {

class DashboardCurves {
 public:
  static constexpr size_t kMaxCurvePoints = 300;  // per series
  static constexpr size_t kMaxCurves = 64;

  // One sample at `t` seconds, taken every `interval_s`: each member's newest evaluation (a new
  // point when its step moved) and this agent's traffic rates from its byte counters.
  void Sample(double t, double interval_s, const std::vector<membership::Member>& members,
              uint64_t bytes_sent, uint64_t bytes_received);

  // The /api/state body.
  nlohmann::json State(const nlohmann::json& self, const nlohmann::json& members,
                       sync::SelectPolicy select, const PlanView& plan) const;

 private:
  std::map<std::string, std::vector<std::array<double, 4>>> history_;  // t, eval step, acc, loss
  std::vector<std::array<double, 3>> traffic_;                         // t, sent B/s, received B/s
  uint64_t last_sent_ = 0, last_received_ = 0;
  bool sampled_ = false;
};

}  // namespace meshtrain::daemon
