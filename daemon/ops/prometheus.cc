#include "daemon/ops/prometheus.h"

#include <cmath>
#include <cstdio>

namespace meshtrain::daemon {

using nlohmann::json;

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

double Num(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it != j.end() && it->is_boolean()) return it->get<bool>() ? 1 : 0;
  if (it == j.end() || !it->is_number()) return std::nan("");
  return it->get<double>();
}

}  // namespace

void PromWriter::Family(const std::string& name, const char* type, const std::string& help) {
  out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void PromWriter::Sample(const std::string& name, double value, const Labels& labels) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ' + FormatValue(value) + '\n';
}

namespace {

template <size_t N>
void Histogram(PromWriter* w, const char* name, const char* help,
               const std::array<double, N>& bounds, const std::array<uint64_t, N>& counts,
               uint64_t count, double sum) {
  w->Family(name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < N; ++i) {
    cumulative += counts[i];
    char le[32];
    std::snprintf(le, sizeof(le), "%g", bounds[i]);
    w->Sample(bucket, static_cast<double>(cumulative), {{"le", le}});
  }
  w->Sample(bucket, static_cast<double>(count), {{"le", "+Inf"}});
  w->Sample(std::string(name) + "_sum", sum);
  w->Sample(std::string(name) + "_count", static_cast<double>(count));
}

// Relays: what this agent forwarded for members behind symmetric NAT, and what it refused, by
// reason (status -> nat).
void RelayFamilies(PromWriter* w, const json& nat) {
  if (!nat.is_object()) return;
  w->Family("meshtrain_relayed_frames_total", "counter",
            "Relay frames this agent forwarded for members behind symmetric NAT.");
  w->Sample("meshtrain_relayed_frames_total", Num(nat, "relayed_frames"));
  w->Family("meshtrain_relayed_bytes_total", "counter", "Bytes of the relay frames it forwarded.");
  w->Sample("meshtrain_relayed_bytes_total", Num(nat, "relayed_bytes"));
  w->Family("meshtrain_relay_refused_total", "counter",
            "Relay frames and registrations this agent refused, by reason.");
  const json refused = nat.value("relay_refused_by_reason", json::object());
  for (const auto& [reason, n] : refused.items()) {
    if (n.is_number())
      w->Sample("meshtrain_relay_refused_total", n.get<double>(), {{"reason", reason}});
  }
}

// Robust mixing (status -> robust): each judged sender's clipped and refused models (or
// chunks), and whether it is flagged now.
void RobustFamilies(PromWriter* w, const json& robust) {
  if (!robust.is_object() || !robust.value("on", false)) return;
  const json peers = robust.value("peers", json::object());
  const std::pair<const char*, const char*> counters[] = {
      {"clipped", "Peer models (or chunks) robust mixing clipped toward this node's own."},
      {"refused", "Peer models (or chunks) robust mixing refused (too far, or quarantined)."}};
  for (const auto& [key, help] : counters) {
    const std::string name = std::string("meshtrain_robust_") + key + "_total";
    w->Family(name, "counter", help);
    for (const auto& [peer, p] : peers.items()) w->Sample(name, Num(p, key), {{"peer", peer}});
  }
  w->Family("meshtrain_robust_flagged", "gauge",
            "1 while robust mixing flags (and quarantines) the peer: clipped or refused again "
            "and again.");
  for (const auto& [peer, p] : peers.items()) {
    w->Sample("meshtrain_robust_flagged", Num(p, "flagged"), {{"peer", peer}});
  }
}

}  // namespace

std::string RenderPrometheus(const PromInputs& in) {
  const json& s = in.status;
  PromWriter w;
  auto gauge = [&w, &s](const char* name, const char* key, const char* help) {
    w.Family(name, "gauge", help);
    w.Sample(name, Num(s, key));
  };
  auto counter = [&w, &s](const char* name, const char* key, const char* help) {
    w.Family(name, "counter", help);
    w.Sample(name, Num(s, key));
  };

  w.Family("meshtrain_build_info", "gauge", "Build and configuration of this agent (always 1).");
  w.Sample("meshtrain_build_info", 1,
           {{"version", in.version},
            {"node", s.value("name", "")},
            {"barrier", s.value("barrier", "")},
            {"select", s.value("select", "")},
            {"compress", s.value("compress", "")}});

  std::map<std::string, int> by_status = {{"alive", 0}, {"suspect", 0}, {"failed", 0}, {"left", 0}};
  for (const auto& m : in.members) by_status[membership::StatusName(m.status)]++;
  w.Family("meshtrain_members", "gauge", "Members this agent knows, by status (itself included).");
  for (const auto& [status, n] : by_status) w.Sample("meshtrain_members", n, {{"status", status}});

  gauge("meshtrain_step", "step", "Local SGD steps completed.");
  gauge("meshtrain_training", "training", "1 while this node still takes training steps.");
  gauge("meshtrain_loss", "loss", "Test loss at the last evaluation (NaN before the first).");
  gauge("meshtrain_accuracy", "accuracy",
        "Test accuracy (ratio) at the last evaluation (NaN before the first).");
  gauge("meshtrain_train_loss", "train_loss", "Moving average of minibatch training losses.");

  Histogram(&w, "meshtrain_barrier_wait_seconds",
            "Time the trainer waited for the barrier before each step.", WaitHistogram::kBounds,
            in.wait.counts, in.wait.count, in.wait.sum);
  Histogram(&w, "meshtrain_loop_lag_seconds",
            "How late the event loop's 20 ms tick fired: the longest the loop was busy.",
            LagHistogram::kBounds, in.loop_lag.counts, in.loop_lag.count, in.loop_lag.sum);

  counter("meshtrain_sent_bytes_total", "bytes_sent", "Bytes sent (UDP and TCP, all traffic).");
  counter("meshtrain_received_bytes_total", "bytes_received",
          "Bytes received (UDP and TCP, all traffic).");
  counter("meshtrain_params_sent_bytes_total", "params_bytes_sent",
          "Parameter bytes sent on the wire (after compression).");
  counter("meshtrain_params_received_total", "params_received",
          "Parameter vectors received from peers.");
  counter("meshtrain_rounds_total", "rounds", "Parameter multicast rounds completed.");
  gauge("meshtrain_fanout", "mean_fanout", "Mean receivers per multicast round.");
  gauge("meshtrain_peers_alive", "peers_alive", "Live peers (itself excluded).");
  gauge("meshtrain_health_score", "health_score",
        "Lifeguard local health multiplier (0 = healthy).");
  gauge("meshtrain_uptime_seconds", "uptime_s", "Seconds since the agent started.");

  w.Family("meshtrain_rejected_total", "counter", "Inbound inputs dropped, by reason.");
  const json rejected = s.value("rejected_by_reason", json::object());
  bool any = false;
  for (const auto& [reason, n] : rejected.items()) {
    if (n.is_number()) {
      w.Sample("meshtrain_rejected_total", n.get<double>(), {{"reason", reason}});
      any = true;
    }
  }
  if (!any) w.Sample("meshtrain_rejected_total", 0, {{"reason", "none"}});

  RelayFamilies(&w, s.value("nat", json::object()));
  RobustFamilies(&w, s.value("robust", json::object()));

  w.Family("meshtrain_peer_step", "gauge", "Each known live member's step, as gossiped.");
  for (const auto& m : in.members) {
    if (m.status == membership::Status::kAlive) {
      w.Sample("meshtrain_peer_step", static_cast<double>(m.step), {{"peer", m.name}});
    }
  }
  w.Family("meshtrain_peer_accuracy", "gauge",
           "Each live member's last published test accuracy (ratio).");
  for (const auto& m : in.members) {
    if (m.status == membership::Status::kAlive && m.eval.valid()) {
      w.Sample("meshtrain_peer_accuracy", m.eval.accuracy, {{"peer", m.name}});
    }
  }
  w.Family("meshtrain_http_responses_total", "counter",
           "HTTP responses of this endpoint, by status code.");
  for (const auto& [code, n] : in.http_responses) {
    w.Sample("meshtrain_http_responses_total", static_cast<double>(n),
             {{"code", std::to_string(code)}});
  }
  return w.text();
}

}  // namespace meshtrain::daemon
