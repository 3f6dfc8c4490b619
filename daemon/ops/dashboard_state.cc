#include "daemon/ops/dashboard_state.h"

#include <utility>

namespace meshtrain::daemon {
namespace {

template <typename Point>
void AppendBounded(std::vector<Point>* v, Point p) {
  v->push_back(p);
  if (v->size() <= DashboardCurves::kMaxCurvePoints) return;
  std::vector<Point> thin;  // keep the whole time range at half the density
  for (size_t i = 0; i < v->size(); i += 2) thin.push_back((*v)[i]);
  if (thin.back() != v->back()) thin.push_back(v->back());
  *v = std::move(thin);
}

}  // namespace

void DashboardCurves::Sample(double t, double interval_s,
                             const std::vector<membership::Member>& members, uint64_t bytes_sent,
                             uint64_t bytes_received) {
  for (const auto& m : members) {
    if (!m.eval.valid()) continue;
    auto it = history_.find(m.name);
    if (it == history_.end()) {
      if (history_.size() >= kMaxCurves) continue;
      it = history_.emplace(m.name, std::vector<std::array<double, 4>>{}).first;
    }
    if (!it->second.empty() && it->second.back()[1] == static_cast<double>(m.eval.step)) continue;
    AppendBounded(&it->second, {t, static_cast<double>(m.eval.step), m.eval.accuracy, m.eval.loss});
  }
  if (sampled_) {
    AppendBounded(&traffic_, {t, static_cast<double>(bytes_sent - last_sent_) / interval_s,
                              static_cast<double>(bytes_received - last_received_) / interval_s});
  }
  sampled_ = true;
  last_sent_ = bytes_sent;
  last_received_ = bytes_received;
}

nlohmann::json DashboardCurves::State(const nlohmann::json& self, const nlohmann::json& members,
                                      sync::SelectPolicy select, const PlanView& plan) const {
  using nlohmann::json;
  json hist = json::object();
  for (const auto& [name, points] : history_) hist[name] = points;
  json edges = json::array();
  for (const PlanEdge& e : plan.edges) {
    edges.push_back({{"from", e.from}, {"to", e.to}, {"mbps", e.mbps}});
  }
  return {{"self", self},
          {"members", members},
          {"history", hist},
          {"plan",
           {{"policy", sync::SelectPolicyName(select)},
            {"rate_mbps", plan.rate_mbps},
            {"edges", edges}}},
          {"traffic", traffic_}};
}

}  // namespace meshtrain::daemon
