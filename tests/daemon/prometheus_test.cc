// GET /metrics rendering: exposition syntax, escaping, histogram buckets, and that
// every family the issue lists is there with its type.
#include "daemon/ops/prometheus.h"

#include <catch2/catch.hpp>
#include <map>
#include <sstream>
#include <string>

using namespace meshtrain::daemon;
using nlohmann::json;

namespace {
std::map<std::string, std::string> Types(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream l(line.substr(7));
      std::string name, type;
      l >> name >> type;
      out[name] = type;
    }
  }
  return out;
}
bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}
}  // namespace

TEST_CASE("label values are escaped; special values are spelled as Prometheus wants",
          "[daemon][prometheus]") {
  CHECK(EscapeLabelValue("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  PromWriter w;
  w.Family("x_total", "counter", "help");
  w.Sample("x_total", 3, {{"k", "v\"q"}});
  w.Sample("x_total", std::nan(""));
  w.Sample("x_total", std::numeric_limits<double>::infinity());
  CHECK(w.text() ==
        "# HELP x_total help\n# TYPE x_total counter\nx_total{k=\"v\\\"q\"} 3\nx_total NaN\n"
        "x_total +Inf\n");
}

TEST_CASE("the agent's exposition has every listed family, typed, with cumulative buckets",
          "[daemon][prometheus]") {
  PromInputs in;
  in.status = {{"name", "n1"},
               {"step", 42},
               {"loss", 0.5},
               {"accuracy", nullptr},
               {"training", true},
               {"train_loss", 0.4},
               {"bytes_sent", 1000},
               {"bytes_received", 900},
               {"rounds", 7},
               {"mean_fanout", 2.0},
               {"peers_alive", 2},
               {"health_score", 0},
               {"uptime_s", 12.5},
               {"barrier", "pssp"},
               {"select", "selmcast"},
               {"compress", "none"},
               {"rejected_by_reason", {{"verify", 3}, {"rpc", 1}}},
               {"nat",
                {{"relayed_frames", 12},
                 {"relayed_bytes", 3400},
                 {"relay_refused_by_reason", {{"not_member", 2}, {"loop", 0}}}}}};
  meshtrain::membership::Member a, b;
  a.name = "n1";
  a.step = 42;
  a.eval = {40, 0.8f, 0.5f};
  b.name = "n\"2";
  b.status = meshtrain::membership::Status::kSuspect;
  in.members = {a, b};
  in.wait.Observe(0.0005);
  in.wait.Observe(0.02);
  in.wait.Observe(30);
  in.http_responses = {{200, 5}, {405, 1}};
  in.version = "1.2.3";
  const std::string text = "\n" + RenderPrometheus(in);
  const auto types = Types(text);
  for (const auto& [name, type] :
       std::map<std::string, std::string>{{"meshtrain_members", "gauge"},
                                          {"meshtrain_step", "gauge"},
                                          {"meshtrain_loss", "gauge"},
                                          {"meshtrain_accuracy", "gauge"},
                                          {"meshtrain_barrier_wait_seconds", "histogram"},
                                          {"meshtrain_sent_bytes_total", "counter"},
                                          {"meshtrain_received_bytes_total", "counter"},
                                          {"meshtrain_rounds_total", "counter"},
                                          {"meshtrain_fanout", "gauge"},
                                          {"meshtrain_rejected_total", "counter"},
                                          {"meshtrain_health_score", "gauge"},
                                          {"meshtrain_build_info", "gauge"}}) {
    INFO(name);
    CHECK(types.count(name) == 1);
    if (types.count(name)) CHECK(types.at(name) == type);
  }
  CHECK(Has(text, "meshtrain_members{status=\"alive\"} 1"));
  CHECK(Has(text, "meshtrain_members{status=\"suspect\"} 1"));
  CHECK(Has(text, "meshtrain_step 42"));
  CHECK(Has(text, "meshtrain_accuracy NaN"));  // not evaluated yet
  CHECK(Has(text, "meshtrain_training 1"));
  CHECK(Has(text, "meshtrain_barrier_wait_seconds_bucket{le=\"0.001\"} 1"));
  CHECK(Has(text, "meshtrain_barrier_wait_seconds_bucket{le=\"0.025\"} 2"));
  CHECK(Has(text, "meshtrain_barrier_wait_seconds_bucket{le=\"10\"} 2"));
  CHECK(Has(text, "meshtrain_barrier_wait_seconds_bucket{le=\"+Inf\"} 3"));
  CHECK(Has(text, "meshtrain_barrier_wait_seconds_count 3"));
  CHECK(Has(text, "meshtrain_rejected_total{reason=\"verify\"} 3"));
  CHECK(Has(text, "meshtrain_relayed_frames_total 12"));
  CHECK(Has(text, "meshtrain_relayed_bytes_total 3400"));
  CHECK(Has(text, "meshtrain_relay_refused_total{reason=\"not_member\"} 2"));
  CHECK(Has(text, "meshtrain_http_responses_total{code=\"405\"} 1"));
  CHECK(Has(text, "meshtrain_peer_accuracy{peer=\"n1\"} 0.80000001192092896"));
  CHECK(text.find("peer=\"n\\\"2\"") == std::string::npos);  // suspect: not in peer_step
  CHECK(text.find("version=\"1.2.3\"") != std::string::npos);
}
