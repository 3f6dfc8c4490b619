#include "cli/simulate.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/option_choice.h"
#include "cli/simulate_progress.h"
#include "daemon/ops/json_text.h"
#include "sim/psp_sim.h"
#include "sim/svg_plot.h"

namespace meshtrain::cli {
namespace {

using nlohmann::json;

constexpr const char* kDescription =
    "Run the discrete-event PSP simulator: N nodes train in virtual time, each one the daemon's\n"
    "node core (node/: barrier, parameter rounds, plans; with --membership its own SWIM).\n"
    "Compute model: node i's mean step time is STEP_TIME x g_i (g_i ~ Gamma, mean 1, CV\n"
    "--node-cv, drawn once: persistent speed differences) x FACTOR for the --stragglers; each\n"
    "step's time is drawn around that mean: gamma with CV --step-cv (default), exp\n"
    "(exponential, CV 1) or const. Network: latency + uniform jitter per message; parameter\n"
    "transfers queue on per-node up/downlinks; queries/replies are lossy datagrams, parameter\n"
    "transfers are streams (a loss costs a retransmission timeout). pbsp/pssp query beta\n"
    "sampled peers, bsp/ssp query every live peer; steps also ride on parameter transfers\n"
    "and their acks. Several --barrier/--sample/--staleness values run\n"
    "one simulation each (same seed: same node speeds). Output is deterministic for a seed;\n"
    "only wall time varies (omit it with --no-wall).\n"
    "Task: --task synthetic (linear regression) or the agents' own models on the real\n"
    "Fashion-MNIST (fmnist-mlp, ...). Hosts: --nodes-per-host/--host-cores share cores between\n"
    "nodes, with the loop's (--step-overhead) and evaluator's (--eval-cost) CPU per step;\n"
    "bench/sim_policies.py runs its heterogeneous preset beside real agents.";

// --progress: auto (when stderr is a terminal), always or never.
enum class Progress : uint8_t { kAuto, kAlways, kNever };
constexpr std::array<std::pair<std::string_view, Progress>, 3> kProgressNames = {{
    {"auto", Progress::kAuto},
    {"always", Progress::kAlways},
    {"never", Progress::kNever},
}};

// --dist: the names are the simulator's own (sim::StepDistName).
const std::array<std::pair<std::string_view, sim::StepDist>, 3>& StepDistNames() {
  static const std::array<std::pair<std::string_view, sim::StepDist>, 3> names = {{
      {sim::StepDistName(sim::StepDist::kGamma), sim::StepDist::kGamma},
      {sim::StepDistName(sim::StepDist::kExponential), sim::StepDist::kExponential},
      {sim::StepDistName(sim::StepDist::kConstant), sim::StepDist::kConstant},
  }};
  return names;
}

struct SimulateArgs {
  sim::PspSimOptions base;
  std::string barriers = "pssp";  // names of sync::kPolicyNames, comma-separated (checked)
  std::string samples = "4";
  std::string staleness = "4";
  std::string stragglers;
  std::string slowdowns;
  std::vector<std::string> crashes;
  double probe_timeout_ms = 500;
  OutputFormat format = OutputFormat::kTable;
  std::string csv;
  std::string plot;
  bool no_wall = false;
  Progress progress = Progress::kAuto;
};

SimulateArgs& Args() {
  static SimulateArgs args;
  return args;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18) {
    return false;
  }
  *out = std::stoull(s);
  return true;
}

bool ParseDouble(const std::string& s, double* out) {
  try {
    size_t used = 0;
    *out = std::stod(s, &used);
    return used == s.size() && std::isfinite(*out);
  } catch (const std::exception&) {
    return false;
  }
}

double Round(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

json OptionalNumber(const std::optional<double>& v, int digits) {
  return v ? json(Round(*v, digits)) : json(nullptr);
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Sci(const std::optional<double>& v) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", *v);
  return buf;
}

// Aligned columns, the header upper-cased (as `members`).
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string c = cells[i];
      if (i + 1 < cells.size()) c.resize(width[i] + 2, ' ');
      out += c;
    }
    std::printf("%s\n", out.c_str());
  };
  line(header);
  for (const auto& r : rows) line(r);
}

struct RunSpec {
  sync::Policy policy;
  size_t sample;
  uint64_t staleness;
  bool operator<(const RunSpec& o) const {
    return std::tie(policy, sample, staleness) < std::tie(o.policy, o.sample, o.staleness);
  }
};

// The cartesian product of the lists, keeping only combinations that differ in effect
// (β matters for pbsp/pssp only, s for ssp/pssp/dssp), in the order given.
std::optional<std::vector<RunSpec>> Expand(const SimulateArgs& a, std::string* error) {
  std::vector<sync::Policy> policies;
  for (const std::string& p : Split(a.barriers, ',')) {
    auto policy = sync::ParsePolicy(p);
    if (!policy) {
      *error = "invalid --barrier '" + p + "': expected " + daemon::ChoiceList(sync::kPolicyNames);
      return std::nullopt;
    }
    policies.push_back(*policy);
  }
  std::vector<uint64_t> samples, stales;
  for (const std::string& s : Split(a.samples, ',')) {
    uint64_t v;
    if (!ParseU64(s, &v)) {
      *error = "--sample takes non-negative integers: '" + s + "'";
      return std::nullopt;
    }
    samples.push_back(v);
  }
  for (const std::string& s : Split(a.staleness, ',')) {
    uint64_t v;
    if (!ParseU64(s, &v)) {
      *error = "--staleness takes non-negative integers: '" + s + "'";
      return std::nullopt;
    }
    stales.push_back(v);
  }
  if (policies.empty() || samples.empty() || stales.empty()) {
    *error = "--barrier, --sample and --staleness need at least one value";
    return std::nullopt;
  }
  std::vector<RunSpec> out;
  std::set<RunSpec> seen;
  for (sync::Policy p : policies) {
    for (uint64_t b : samples) {
      for (uint64_t s : stales) {
        RunSpec r{p, sync::IsProbabilistic(p) ? static_cast<size_t>(b) : 0,
                  (p == sync::Policy::kSsp || p == sync::Policy::kPssp || p == sync::Policy::kDssp)
                      ? s
                      : 0};
        if (seen.insert(r).second) out.push_back(r);
      }
    }
  }
  return out;
}

std::string Describe(const sim::PspSimOptions& o) {
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "%zu nodes, %g s virtual, seed %llu; step %g ms %s (step cv %g, node cv %g)%s; "
      "latency %g+%g ms, %g MB/s, loss %g; select %s fanout %zu; task %s%s",
      o.nodes, o.duration_s, static_cast<unsigned long long>(o.seed), o.compute.step_ms,
      sim::StepDistName(o.compute.dist), o.compute.step_cv, o.compute.node_cv,
      o.compute.straggler_fraction > 0 ? (", stragglers " + Fixed(o.compute.straggler_fraction, 3) +
                                          "x" + Fixed(o.compute.straggler_factor, 2))
                                             .c_str()
                                       : "",
      o.net.latency_ms, o.net.jitter_ms, o.net.bandwidth_mbps, o.net.loss,
      sync::SelectPolicyName(o.select), o.fanout, o.task.c_str(),
      o.membership ? (", membership " +
                      std::string(daemon::NameOf(membership::kTimingProfileNames, o.profile)))
                         .c_str()
                   : "");
  return buf;
}

}  // namespace

// size: option table
CLI::App* AddSimulateCommand(CLI::App& app) {
  SimulateArgs& a = Args();
  sim::PspSimOptions& o = a.base;
  CLI::App* s = app.add_subcommand("simulate", "Run the discrete-event simulator");
  s->description(kDescription);
  s->add_option("--nodes", o.nodes, "Number of simulated nodes")->capture_default_str();
  s->add_option("--duration", o.duration_s, "Virtual seconds to simulate")->capture_default_str();
  s->add_option("--barrier", a.barriers, "Barrier policies, comma-separated (a run each)")
      ->check(ChoiceListCheck(sync::kPolicyNames))
      ->capture_default_str();
  s->add_option("--sample", a.samples, "PSP sample size beta (comma list for a sweep)")
      ->capture_default_str();
  s->add_option("--staleness", a.staleness, "SSP/PSP staleness bound s (comma list allowed)")
      ->capture_default_str();
  s->add_option("--r-max", o.barrier.r_max, "dssp: extra steps for the fastest node")
      ->capture_default_str();
  s->add_option("--probe-timeout", a.probe_timeout_ms,
                "pbsp/pssp: ms to wait for query answers before resampling")
      ->capture_default_str();
  s->add_option("--step-time", o.compute.step_ms, "Mean compute time of one step (ms)")
      ->capture_default_str();
  AddChoice(s, "--dist", o.compute.dist, StepDistNames(), "Per-step time distribution");
  s->add_option("--step-cv", o.compute.step_cv, "gamma: CV of one step around the node's mean")
      ->capture_default_str();
  s->add_option("--node-cv", o.compute.node_cv, "CV of the per-node mean speeds (drawn once)")
      ->capture_default_str();
  s->add_option("--stragglers", a.stragglers,
                "FRACTION:FACTOR - this share of nodes is FACTOR times slower (e.g. 0.05:4)");
  s->add_option("--slowdowns", a.slowdowns,
                "LIST: node i is LIST[i mod len] times slower, e.g. 1,1,1,2,3,4 (the agents' "
                "--slowdown in bench/policies.py)");
  s->add_flag("--batch-auto", o.batch_auto,
              "Every node runs --batch auto (batch scaled to the mesh's median pace, lr with it)");
  s->add_option("--latency", o.net.latency_ms, "One-way network latency (ms)")
      ->capture_default_str();
  s->add_option("--jitter", o.net.jitter_ms, "Extra uniform latency in [0, jitter] (ms)")
      ->capture_default_str();
  s->add_option("--bandwidth", o.net.bandwidth_mbps, "Per-node uplink and downlink (MB/s)")
      ->capture_default_str();
  s->add_option("--loss", o.net.loss, "Datagram loss rate in [0, 1)")->capture_default_str();
  s->add_option("--param-bytes", o.param_bytes,
                "Bytes per parameter transfer (0: 4 x params + 64 with a task, else 100000)")
      ->capture_default_str();
  AddChoice(s, "--select", o.select, sync::kSelectPolicyNames, "Receiver selection");
  s->add_option("--fanout", o.fanout, "Parameter receivers per step")->capture_default_str();
  s->add_option("--view", o.view,
                "pbsp/pssp/asp: peers each node knows (0: all up to 2000 nodes, else 500; "
                "with --membership, SWIM's bounded view)")
      ->capture_default_str();
  s->add_flag("--membership", o.membership,
              "Run SWIM membership for failure detection (else an oracle removes crashed nodes)");
  AddChoice(s, "--profile", o.profile, membership::kTimingProfileNames,
            "Membership timing profile");
  s->add_option("--crash", a.crashes, "COUNT@SECONDS: crash COUNT random nodes then (repeatable)");
  s->add_option("--task", o.task,
                "none, synthetic (linear regression; error = test MSE), or a Fashion-MNIST model: "
                "fmnist-mlp, fmnist-softmax, fmnist-cnn or a layer spec, trained on the real data "
                "(error = 1 - test accuracy)")
      ->capture_default_str();
  s->add_option("--dim", o.task_dim, "synthetic: input dimension")->capture_default_str();
  s->add_option("--dataset-dir", o.dataset_dir, "Fashion-MNIST: directory of the IDX files")
      ->capture_default_str();
  s->add_option("--shards", o.shards,
                "Fashion-MNIST: node i trains on shard i mod N of the training set (0: one "
                "shard per node)")
      ->capture_default_str();
  s->add_option("--eval-samples", o.eval_samples,
                "Fashion-MNIST: evaluate every node on the first N test images (0: all 10000)")
      ->capture_default_str();
  s->add_option("--eval-average", o.eval_average,
                "Evaluate each node's moving average of its parameters with this decay (as the "
                "agents' --eval-average; 0: the parameters)")
      ->capture_default_str();
  s->add_option("--lr", o.lr, "Learning rate (SGD with momentum 0.9)")->capture_default_str();
  s->add_option("--batch", o.batch, "Mini-batch size")->capture_default_str();
  s->add_option("--eval-every", o.eval_every_s, "Evaluate the model error every S virtual s")
      ->capture_default_str();
  s->add_option("--target-error", o.target_error,
                "Report when the mean node error first reaches this (t_target_s), and when "
                "every node's does (t_all_s); 0.15 = accuracy 0.85 for Fashion-MNIST")
      ->capture_default_str();
  s->add_option("--eval-steps", o.eval_steps,
                "Also evaluate each node at every N-th step it completes, as the agents' "
                "--eval-every, and time t_all_s by those evaluations (how bench/policies.py times "
                "real agents; 0: by the samples every --eval-every seconds)")
      ->capture_default_str();
  s->add_flag("--stop-at-target", o.stop_at_target,
              "End each run once every node is at --target-error (shares over the time run)");
  s->add_option("--nodes-per-host", o.nodes_per_host,
                "Nodes iK..iK+K-1 share one host's --host-cores (0: a host each). A step's "
                "compute (its time / the node's --slowdowns factor) is shared with the host's "
                "other computing nodes; the rest is a sleep, as the agents' --slowdown")
      ->capture_default_str();
  s->add_option("--host-cores", o.host_cores, "Cores per host (with --nodes-per-host)")
      ->capture_default_str();
  s->add_option("--step-overhead", o.step_overhead_ms,
                "With --nodes-per-host: CPU ms of the agent's loop per step (sending and "
                "receiving parameters, evaluations), shared with the host's cores; the node learns "
                "of a step once its loop is done with it (bench/policies.py measures it)")
      ->capture_default_str();
  s->add_option("--eval-cost", o.eval_cost_ms,
                "With --nodes-per-host and --eval-steps: CPU ms of each evaluation, shared with "
                "the host's cores; nobody waits for it")
      ->capture_default_str();
  s->add_option("--seed", o.seed, "Random seed (same seed, same output)")->capture_default_str();
  s->add_option("--threads", o.threads,
                "1, or 2: node cores stepped ahead on a second thread (same output); 0 = 2 from " +
                    std::to_string(sim::kAheadMinNodes) + " nodes on")
      ->check(CLI::Range(0, 2))
      ->capture_default_str();
  s->add_option("--csv", a.csv, "Write barrier,t,node,step rows (one per node per second)");
  s->add_option("--plot", a.plot, "Write an SVG of progress (and error) over time");
  AddChoice(s, "--format", a.format, kOutputFormatNames, "Output format");
  s->add_flag("--no-wall", a.no_wall, "Omit the wall-clock time (byte-identical output)");
  AddChoice(s, "--progress", a.progress, kProgressNames,
            "Show progress on stderr (setup, virtual time, median step, time left): auto = "
            "when stderr is a terminal, always, never");
  return s;
}

namespace {

// The options into the simulator's, bar the barrier sweep (Expand): a usage error or
// kExitOk.
int BaseOptions(const SimulateArgs& a, sim::PspSimOptions* base) {
  *base = a.base;
  base->replay_alone = !a.no_wall;  // a measurement: only where measured figures are printed
  if (!(a.probe_timeout_ms >= 1)) return UsageError("--probe-timeout must be >= 1 ms");
  base->barrier.probe_timeout = static_cast<sync::TimeMs>(std::llround(a.probe_timeout_ms));
  if (!a.stragglers.empty()) {
    const auto parts = Split(a.stragglers, ':');
    double f, k;
    if (parts.size() != 2 || !ParseDouble(parts[0], &f) || !ParseDouble(parts[1], &k)) {
      return UsageError("--stragglers takes FRACTION:FACTOR, e.g. 0.05:4");
    }
    base->compute.straggler_fraction = f;
    base->compute.straggler_factor = k;
  }
  if (!a.slowdowns.empty()) {
    for (const std::string& part : Split(a.slowdowns, ',')) {
      double f;
      if (!ParseDouble(part, &f) || !(f >= 1 && f <= 1000)) {
        return UsageError("--slowdowns takes factors in [1, 1000], e.g. 1,1,1,2,3,4");
      }
      base->compute.slowdowns.push_back(f);
    }
  }
  for (const std::string& c : a.crashes) {
    const auto parts = Split(c, '@');
    uint64_t count;
    double at;
    if (parts.size() != 2 || !ParseU64(parts[0], &count) || !ParseDouble(parts[1], &at)) {
      return UsageError("--crash takes COUNT@SECONDS, e.g. 1@30");
    }
    base->crashes.push_back(sim::CrashSpec{static_cast<size_t>(count), at});
  }
  base->record_nodes = !a.csv.empty();
  return kExitOk;
}

// One run's per-node steps as --csv rows (then dropped from `res`). The barrier column names
// the policy; runs of one policy (a sweep) get the full label.
void WriteCsvRows(const std::vector<RunSpec>& specs, const RunSpec& spec, sim::PspSimResult* res,
                  std::ofstream* csv) {
  const size_t same = static_cast<size_t>(std::count_if(
      specs.begin(), specs.end(), [&](const RunSpec& s) { return s.policy == spec.policy; }));
  const std::string label = same > 1 ? sim::PolicyLabel(spec.policy, spec.sample, spec.staleness)
                                     : sync::PolicyName(spec.policy);
  for (size_t t = 0; t < res->node_steps.size(); ++t) {
    const std::vector<uint64_t>& row = res->node_steps[t];
    for (size_t node = 0; node < row.size(); ++node) {
      *csv << label << ',' << t << ",n" << node << ',' << row[node] << '\n';
    }
  }
  res->node_steps.clear();
  res->node_steps.shrink_to_fit();
}

// Runs every configuration in turn (progress on stderr, rows into --csv): kExitOk with
// `results` filled, or an error's exit status.
int RunAll(const SimulateArgs& a, const sim::PspSimOptions& base, const std::vector<RunSpec>& specs,
           std::vector<sim::PspSimResult>* results) {
  std::ofstream csv;
  if (!a.csv.empty()) {
    csv.open(a.csv, std::ios::out | std::ios::trunc);
    if (!csv) return RuntimeError("cannot write --csv file " + a.csv);
    csv << "barrier,t,node,step\n";
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  const bool show_progress =
      a.progress == Progress::kAlways || (a.progress == Progress::kAuto && tty);
  ProgressLine progress(tty, specs.size());
  for (const RunSpec& spec : specs) {
    sim::PspSimOptions o = base;
    o.barrier.policy = spec.policy;
    o.barrier.sample = spec.sample;
    o.barrier.staleness = spec.staleness;
    if (show_progress) {
      progress.StartRun(results->size(),
                        sim::PolicyLabel(spec.policy, spec.sample, spec.staleness));
      o.progress = [&progress](const sim::SimProgress& p) { progress(p); };
    }
    auto r = sim::RunPspSim(o);
    if (show_progress) progress.EndRun();
    if (!r.ok()) {
      // The simulator refuses options it cannot run (InvalidArgument): a usage error.
      return r.status().code() == Status::Code::kInvalidArgument
                 ? UsageError(r.status().message())
                 : RuntimeError(r.status().message());
    }
    sim::PspSimResult res = std::move(r).value();
    if (csv.is_open()) WriteCsvRows(specs, spec, &res, &csv);
    results->push_back(std::move(res));
  }
  if (csv.is_open()) {
    csv.close();
    if (!csv) return RuntimeError("error writing --csv file " + a.csv);
  }
  return kExitOk;
}

int WritePlot(const std::string& path, const sim::PspSimOptions& base,
              const std::vector<sim::PspSimResult>& results) {
  std::vector<sim::PlotRun> runs;
  for (const sim::PspSimResult& r : results) {
    runs.push_back(sim::PlotRun{sim::PolicyLabel(r.policy, r.sample, r.staleness), r.series});
  }
  const std::string title = std::to_string(base.nodes) + " nodes, " + Fixed(base.duration_s, 0) +
                            " virtual s, seed " + std::to_string(base.seed);
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  out << sim::RenderProgressSvg(runs, title);
  out.close();
  if (!out) return RuntimeError("cannot write --plot file " + path);
  return kExitOk;
}

// One run's object of --format json.
json RunJson(const sim::PspSimResult& r, bool wall) {
  json p = {
      {"barrier", sync::PolicyName(r.policy)},
      {"sample", r.sample},
      {"staleness", r.staleness},
      {"steps_min", r.steps_min},
      {"steps_median", r.steps_median},
      {"steps_max", r.steps_max},
      {"spread", r.spread()},
      {"steps_p10", r.steps_p10},
      {"steps_p90", r.steps_p90},
      {"wait_share", Round(r.wait_share, 4)},
      {"compute_share", Round(r.compute_share, 4)},
      {"local_steps", r.local_steps},
      {"messages_per_node", Round(r.messages_per_node, 1)},
      {"bytes_per_node", Round(r.bytes_per_node, 0)},
      {"error", OptionalNumber(r.error, 6)},
      {"error_avg_model", OptionalNumber(r.error_avg_model, 6)},
      {"time_to_target_s", OptionalNumber(r.time_to_target_s, 3)},
      {"time_to_target_all_s", OptionalNumber(r.time_to_target_all_s, 3)},
      {"view", r.view},
      {"live_nodes", r.live_nodes},
      {"work", r.work},
      {"peer_visits", r.peer_visits},
      {"sample_visits", r.sample_visits},
      {"view_entries", r.view_entries},
      {"work_per_node",
       Round(static_cast<double>(r.work) / static_cast<double>(std::max<size_t>(1, r.nodes)), 1)}};
  // Per trainer step of the mesh (all nodes' steps): the barrier's samples and progress
  // queries, and below the node cores' time.
  uint64_t steps = 0;
  for (uint64_t s : r.final_steps) steps += s;
  const double per_step = 1.0 / static_cast<double>(std::max<uint64_t>(1, steps));
  p["samples_per_step"] = Round(static_cast<double>(r.rounds) * per_step, 3);
  p["queries_per_step"] = Round(static_cast<double>(r.queries) * per_step, 3);
  if (wall) {
    // Measured (not reproducible bit for bit): resident memory per node and the node
    // cores' time per trainer step.
    p["mem_bytes_per_node"] = Round(r.mem_bytes_per_node, 0);
    p["threads"] = r.threads;
    p["node_us_per_step"] = Round(r.node_core_s * 1e6 * per_step, 2);
    // The same for a few nodes' inputs replayed alone, as in an agent (null: not measured).
    p["node_us_per_step_alone"] =
        r.alone_steps > 0
            ? json(Round(r.alone_core_s * 1e6 / static_cast<double>(r.alone_steps), 2))
            : json(nullptr);
  }
  if (!r.crashes.empty()) {
    json crashes = json::array();
    for (const sim::CrashReport& c : r.crashes) {
      crashes.push_back({{"node", c.node},
                         {"crash_at_s", c.crash_at_s},
                         {"first_detect_s", OptionalNumber(c.first_detect_s, 3)},
                         {"all_detect_s", OptionalNumber(c.all_detect_s, 3)},
                         {"observers", c.observers},
                         {"detected", c.detected},
                         {"dropped", c.dropped},
                         {"unaware", c.unaware}});
    }
    p["crashes"] = crashes;
    p["false_failures"] = r.false_failures;
  }
  return p;
}

void PrintJson(const sim::PspSimOptions& base, const std::vector<sim::PspSimResult>& results,
               bool wall, double wall_s) {
  json policies = json::array();
  for (const sim::PspSimResult& r : results) policies.push_back(RunJson(r, wall));
  json out = {{"nodes", base.nodes}, {"duration_s", base.duration_s}, {"policies", policies}};
  if (wall) out["wall_s"] = Round(wall_s, 2);
  std::printf("%s\n", meshtrain::daemon::JsonText(out).c_str());
}

// The summary table: a row per run.
void PrintRunTable(const sim::PspSimOptions& base, const std::vector<sim::PspSimResult>& results) {
  const bool task = base.task != "none";
  std::vector<std::string> header = {"barrier",    "sample",  "staleness", "steps_min", "p10",
                                     "median",     "p90",     "steps_max", "spread",    "p90-p10",
                                     "wait_share", "compute", "msgs/node", "bytes/node"};
  if (task) {
    header.push_back("error");
    header.push_back("error_avg");
    header.push_back("t_target_s");
    header.push_back("t_all_s");
  }
  std::vector<std::vector<std::string>> rows;
  for (const sim::PspSimResult& r : results) {
    const bool prob = sync::IsProbabilistic(r.policy);
    const bool bounded = r.policy == sync::Policy::kSsp || r.policy == sync::Policy::kPssp ||
                         r.policy == sync::Policy::kDssp;  // wbsp: bsp on the global step
    std::vector<std::string> row = {sync::PolicyName(r.policy),
                                    prob ? std::to_string(r.sample) : "-",
                                    bounded ? std::to_string(r.staleness) : "-",
                                    std::to_string(r.steps_min),
                                    std::to_string(r.steps_p10),
                                    std::to_string(r.steps_median),
                                    std::to_string(r.steps_p90),
                                    std::to_string(r.steps_max),
                                    std::to_string(r.spread()),
                                    std::to_string(r.spread_p10_p90()),
                                    Fixed(r.wait_share, 3),
                                    Fixed(r.compute_share, 3),
                                    Fixed(r.messages_per_node, 0),
                                    Fixed(r.bytes_per_node, 0)};
    if (task) {
      row.push_back(Sci(r.error));
      row.push_back(Sci(r.error_avg_model));
      const int digits = base.eval_steps > 0 ? 1 : 0;  // as fine as the evaluations
      row.push_back(r.time_to_target_s ? Fixed(*r.time_to_target_s, digits) : "-");
      row.push_back(r.time_to_target_all_s ? Fixed(*r.time_to_target_all_s, digits) : "-");
    }
    rows.push_back(std::move(row));
  }
  PrintTable(header, rows);
}

// The failure-detection table, when runs crashed nodes.
void PrintCrashTable(const sim::PspSimOptions& base,
                     const std::vector<sim::PspSimResult>& results) {
  bool any_crash = false;
  for (const sim::PspSimResult& r : results) any_crash = any_crash || !r.crashes.empty();
  if (!any_crash) return;
  std::printf("\nfailure detection (%s):\n",
              base.membership ? "SWIM membership" : "oracle, --membership off");
  std::vector<std::vector<std::string>> crows;
  for (const sim::PspSimResult& r : results) {
    for (const sim::CrashReport& c : r.crashes) {
      crows.push_back({sim::PolicyLabel(r.policy, r.sample, r.staleness), c.node,
                       Fixed(c.crash_at_s, 1), c.first_detect_s ? Fixed(*c.first_detect_s, 2) : "-",
                       c.all_detect_s ? Fixed(*c.all_detect_s, 2) : "-",
                       std::to_string(c.detected) + "/" + std::to_string(c.observers),
                       std::to_string(c.dropped), std::to_string(c.unaware),
                       std::to_string(r.false_failures)});
    }
  }
  PrintTable({"run", "node", "crash_at_s", "first_detect_s", "all_detect_s", "detected", "dropped",
              "unaware", "false_failures"},
             crows);
}

// The measured figures (not with --no-wall).
void PrintWall(const std::vector<sim::PspSimResult>& results, double wall_s) {
  std::printf("\n");
  for (const sim::PspSimResult& r : results) {
    uint64_t steps = 0;
    for (uint64_t s : r.final_steps) steps += s;
    std::printf(
        "%s: %.0f bytes of memory per node, %.2f us of node core per step (%.2f alone), %.1f "
        "work units per node\n",
        sim::PolicyLabel(r.policy, r.sample, r.staleness).c_str(), r.mem_bytes_per_node,
        r.node_core_s * 1e6 / static_cast<double>(std::max<uint64_t>(1, steps)),
        r.alone_core_s * 1e6 / static_cast<double>(std::max<uint64_t>(1, r.alone_steps)),
        static_cast<double>(r.work) / static_cast<double>(std::max<size_t>(1, r.nodes)));
  }
  std::printf("wall time %.2f s\n", wall_s);
}

}  // namespace

int RunSimulateCommand() {
  const SimulateArgs& a = Args();
  sim::PspSimOptions base;
  if (int rc = BaseOptions(a, &base); rc != kExitOk) return rc;
  std::string error;
  const auto specs = Expand(a, &error);
  if (!specs) return UsageError(error);

  const auto wall_start = std::chrono::steady_clock::now();
  std::vector<sim::PspSimResult> results;
  if (int rc = RunAll(a, base, *specs, &results); rc != kExitOk) return rc;
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (!a.plot.empty()) {
    if (int rc = WritePlot(a.plot, base, results); rc != kExitOk) return rc;
  }
  if (a.format == OutputFormat::kJson) {
    PrintJson(base, results, !a.no_wall, wall_s);
    return kExitOk;
  }
  std::printf("%s\n\n", Describe(base).c_str());
  PrintRunTable(base, results);
  PrintCrashTable(base, results);
  if (!a.no_wall) PrintWall(results, wall_s);
  return kExitOk;
}

}  // namespace meshtrain::cli
