// The `meshtrain` executable: Serf-style subcommands (SPEC §3). `agent` runs the daemon in the
// foreground; the other subcommands talk to a running agent over its RPC endpoint.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli/local_model.h"
#include "cli/rpc_client.h"
#include "cli/simulate.h"
#include "daemon/agent.h"
#include "daemon/config.h"
#include "daemon/config_file.h"
#include "daemon/ops/json_text.h"
#include "daemon/ops/log_format.h"
#include "learn/model_file.h"
#include "learn/network.h"
#include "wire/crypto.h"
#include "wire/messages.h"

namespace {

using nlohmann::json;
namespace cli = meshtrain::cli;

constexpr const char* kDefaultRpc = "127.0.0.1:7951";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}

// Calls the agent and returns the reply, or prints a one-line error and returns nullopt.
std::string g_token;  // --rpc-token / MESHTRAIN_RPC_TOKEN, sent with every request

std::optional<json> Call(const std::string& rpc, json req) {
  if (!g_token.empty()) req["token"] = g_token;
  auto r = cli::CallAgent(rpc, req);
  if (!r.ok) {
    Fail(r.error);
    return std::nullopt;
  }
  if (!r.reply.value("ok", false)) {
    Fail(r.reply.value("error", std::string("the agent refused the request")));
    return std::nullopt;
  }
  r.reply.erase("ok");
  return r.reply;
}

std::string Cell(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f", v.get<double>());
    return buf;
  }
  return meshtrain::daemon::JsonText(v);
}

void PrintTable(const std::vector<std::string>& cols, const std::vector<json>& rows) {
  std::vector<size_t> width(cols.size());
  for (size_t i = 0; i < cols.size(); ++i) width[i] = cols[i].size();
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < cols.size(); ++i) {
      line.push_back(Cell(r.contains(cols[i]) ? r[cols[i]] : json()));
      width[i] = std::max(width[i], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    std::string out;
    for (size_t i = 0; i < line.size(); ++i) {
      std::string cell = line[i];
      if (i + 1 < line.size()) cell.resize(width[i] + 2, ' ');
      out += cell;
    }
    std::printf("%s\n", out.c_str());
  };
  std::vector<std::string> header;
  for (const auto& c : cols) {
    std::string h = c;
    std::transform(h.begin(), h.end(), h.begin(), ::toupper);
    header.push_back(h);
  }
  print_line(header);
  for (const auto& line : cells) print_line(line);
}

void AddAgentOptions(CLI::App* a, meshtrain::daemon::AgentConfig& c) {
  a->add_option("--name", c.name, "Unique node name (default: hostname-port)");
  a->add_option("--bind", c.bind, "UDP+TCP address for membership and parameters")
      ->capture_default_str();
  a->add_option("--advertise", c.advertise,
                "HOST:PORT given to peers (default: the bind address; with a wildcard bind, this "
                "host's address on the route to the first --join peer, else its first "
                "non-loopback address)");
  a->add_option("--nat", c.nat,
                "NAT traversal: auto (peers tell this node where they see it; it answers packets "
                "where they came from, publishes whether it is reachable from outside and, "
                "without --advertise, moves to the address its peers agree on) or off")
      ->capture_default_str();
  a->add_option("--relay", c.relay,
                "With --nat auto, behind a symmetric NAT (peers see this node at a different "
                "address each): auto (register with any public member that serves relays, and "
                "be reached through it), NAME (that member only) or off")
      ->capture_default_str();
  a->add_option("--serve-relay", c.serve_relay,
                "on: relay membership datagrams for members behind symmetric NAT that register "
                "here (they stay sealed end to end); off: refuse")
      ->capture_default_str();
  a->add_option("--relay-rate", c.relay_rate_mbit,
                "Cap on what this node relays, in Mbit/s (token bucket; frames over it are "
                "dropped and counted); 0 = no cap")
      ->capture_default_str();
  a->add_option("--rpc", c.rpc, "Control endpoint for the CLI")
      ->envname("MESHTRAIN_RPC_ADDR")
      ->capture_default_str();
  a->add_option("--rpc-token", c.rpc_token, "Require this token from RPC clients")
      ->envname("MESHTRAIN_RPC_TOKEN");
  a->add_option("--join", c.join,
                "Peer to contact at start: HOST:PORT, IP:PORT or [IPv6]:PORT (repeatable; names "
                "are resolved at start and on every retry)");
  a->add_flag("--retry-join", c.retry_join,
              "Keep retrying --join every --retry-interval until one succeeds");
  a->add_option("--retry-interval", c.retry_interval,
                "Time between join retries: 30s, 500ms, 2m (with --retry-join)")
      ->capture_default_str();
  a->add_option("--retry-max", c.retry_max,
                "Join attempts before the agent gives up and exits (0 = unlimited)")
      ->capture_default_str();
  // Tests only (hidden from --help; documented in docs/guide.md "Several hosts"): shifts the wall
  // clock that stamps this agent's messages.
  a->add_option("--test-clock-offset", c.test_clock_offset_s,
                "TEST ONLY: shift this agent's wall clock by SECONDS")
      ->group("");
  a->add_option("--profile", c.profile, "Membership timing: lan, wan or local")
      ->capture_default_str();
  a->add_option("--probe-interval", c.probe_interval_ms, "Override the probe interval (ms)");
  a->add_option("--probe-timeout", c.probe_timeout_ms, "Override the probe timeout (ms)");
  a->add_option("--suspicion-mult", c.suspicion_mult, "Override SuspicionMult");
  a->add_option("--gossip-interval", c.gossip_interval_ms, "Override the gossip interval (ms)");
  a->add_option("--push-pull-interval", c.push_pull_interval_s,
                "Override the push-pull interval (s, 0 = off)");
  a->add_option("--cluster", c.cluster, "Cluster label; other labels are dropped")
      ->capture_default_str();
  a->add_option("--encrypt", c.encrypt, "Base64 key from `meshtrain keygen`")
      ->envname("MESHTRAIN_ENCRYPT_KEY");
  a->add_option("--data-dir", c.data_dir, "Checkpoints and peer snapshot directory");
  a->add_option("--checkpoint-every", c.checkpoint_every, "Steps between checkpoints")
      ->capture_default_str();
  a->add_option("--task", c.task, "none, synthetic, fmnist-softmax, fmnist-mlp or fmnist-cnn")
      ->capture_default_str();
  a->add_option("--model", c.model,
                "A preset (fmnist-mlp, fmnist-softmax, fmnist-cnn, synthetic) or a layer spec, "
                "e.g. \"conv(16,5),relu,maxpool(2),flatten,dense(10)\"; replaces --task. "
                "Layers: " +
                    meshtrain::learn::LayerUsage());
  a->add_option("--train-data", c.train_data,
                "Train on this file instead of Fashion-MNIST: IDX (images[,labels], .gz ok), CSV, "
                "X.npy,Y.npy or .npz (arrays x and y)");
  a->add_option("--test-data", c.test_data,
                "Evaluate on this file (same formats; default: a seeded 10% of --train-data held "
                "out)");
  a->add_option("--label-column", c.label_column,
                "CSV: the label column's name or 0-based index (default: the last column)");
  a->add_option("--input-shape", c.input_shape,
                "C,H,W of one sample where the file does not say (e.g. CSV pixels for a CNN)");
  a->add_option("--threads", c.threads,
                "Threads that share each minibatch's gradient (use the host's cores when the "
                "agent is alone on it)")
      ->capture_default_str();
  a->add_option("--dataset-dir", c.dataset_dir, "Fashion-MNIST IDX files")->capture_default_str();
  a->add_option("--shard", c.shard, "Train on the I-th of N disjoint shards (I/N)");
  a->add_option("--shard-mode", c.shard_mode,
                "How shards split the training set: iid (contiguous ranges) or label-skew:ALPHA "
                "(seeded Dirichlet label skew; small ALPHA = few classes per shard)")
      ->capture_default_str();
  a->add_option("--batch", c.batch_spec,
                "Mini-batch size (default 64), or auto: start at 64 and scale this node's "
                "batch down (to 8 at least) so its steps keep the mesh's median pace, the "
                "learning rate scaled linearly with it");
  a->add_option("--lr", c.lr, "Learning rate")->capture_default_str();
  a->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  a->add_option("--seed", c.seed, "Data-order seed (default: hash of name)");
  a->add_option("--steps", c.steps, "Stop training after N steps (0 = unbounded)");
  a->add_option("--min-peers", c.min_peers,
                "Start training once this many training peers are alive (fresh start only: a "
                "node resuming from its checkpoint does not wait)");
  a->add_option("--max-peers", c.max_peers,
                "Wait in barriers for at most N training peers (0 = all): peers learned beyond "
                "N are observers that train and sync but are not waited for; when a peer "
                "leaves, the earliest observer takes its place");
  a->add_option("--target-accuracy", c.target_accuracy, "Stop training at this test accuracy");
  a->add_option("--eval-every", c.eval_every, "Evaluate every K steps")->capture_default_str();
  a->add_option("--eval-average", c.eval_average,
                "Evaluate the moving average of the parameters (decay D per step, e.g. 0.98): "
                "steadier evaluations; it is also the model that meets --target-accuracy, is "
                "offered to peers when finished and written to model.npz. 0 = off")
      ->capture_default_str();
  a->add_option("--barrier", c.barrier,
                "bsp, ssp, asp, pbsp, pssp, dssp (dynamic staleness in [s, s + "
                "--staleness-max]) or wbsp (bsp on the global step; a node that would wait "
                "keeps taking local steps)")
      ->capture_default_str();
  a->add_option("--staleness", c.staleness, "SSP/PSP staleness bound (dssp: its lower bound)")
      ->capture_default_str();
  a->add_option("--staleness-max", c.staleness_max,
                "dssp: at most this many extra steps beyond --staleness (r_max)")
      ->capture_default_str();
  a->add_option("--overlap", c.overlap,
                "on: the barrier queries for the next step go out while this step computes, "
                "and its permit comes as soon as the known progress allows (OSP); off: only "
                "once the step is done")
      ->capture_default_str();
  a->add_option("--sample", c.sample,
                "PSP sample size (beta); with dssp or wbsp: sample this many peers instead "
                "of all (pdssp, pwbsp)")
      ->capture_default_str();
  a->add_option("--select", c.select, "Receiver selection: all, random or selmcast")
      ->capture_default_str();
  a->add_option("--fanout", c.fanout, "Receivers per round (P)")->capture_default_str();
  a->add_option("--sync-every", c.sync_every_spec,
                "Local steps between parameter multicasts, or auto (hide a round's transfer "
                "under computation: H = ceil(round time / step time), 1..64)")
      ->default_str("1");
  a->add_option("--outer", c.outer,
                "Outer optimizer at each sync (DiLoCo): avg (the mix is the model), sgd or "
                "nesterov (a step from the last sync's parameters along theta0 - mixed)")
      ->capture_default_str();
  a->add_option("--fragments", c.fragments,
                "Streaming fragments: the model in F parts, one sent (and outer-stepped) every "
                "H/F steps in turn, so each sync moves 1/F of it (F must divide --sync-every)")
      ->capture_default_str();
  a->add_option("--outer-lr", c.outer_lr, "Outer learning rate (default: nesterov 0.7, sgd 1.0)");
  a->add_option("--outer-momentum", c.outer_momentum,
                "Outer Nesterov momentum (default 0.9; only with --outer nesterov)");
  a->add_option("--join-state", c.join_state,
                "on: a fresh node joining a running mesh first takes over the most advanced "
                "peer's model and the slowest peer's step; off: it starts from its own "
                "initialisation at step 0")
      ->capture_default_str();
  a->add_option("--compress", c.compress,
                "Parameter transfers: none, fp16, int8 (blocks of 256, one scale each) or "
                "topk:F (the largest F of the change since the receiver's last "
                "acknowledged model, with error feedback)")
      ->capture_default_str();
  a->add_option("--uplink-limit", c.uplink_limit, "Uplink cap for parameter traffic (MB/s)");
  a->add_option("--downlink-limit", c.downlink_limit, "Downlink cap (MB/s)");
  a->add_option("--capacity-probe-interval", c.capacity_probe_s,
                "Seconds between link-capacity probes: a train of UDP datagrams to one peer's "
                "membership port measures the path (the first ten go 2 s apart); 0 = off, "
                "bandwidth is then measured from parameter transfers only")
      ->capture_default_str();
  a->add_option("--trainer", c.trainer,
                "builtin: train --task/--model inside the agent; external: serve one local "
                "trainer process (e.g. the Python client, python/meshtrain) over "
                "--trainer-socket, parameters in shared memory")
      ->capture_default_str();
  a->add_option("--trainer-socket", c.trainer_socket,
                "Unix socket for --trainer external (mode 0600, same user only; default "
                "DATA_DIR/trainer.sock, or /run/meshtrain/NAME.sock without --data-dir)");
  a->add_option("--trainer-timeout", c.trainer_timeout_s,
                "Seconds an attached external trainer may stay silent (outside barrier waits) "
                "before it is detached and the agent stops counting as training")
      ->capture_default_str();
  a->add_option("--slowdown", c.slowdown,
                "Make each step F times slower (straggler emulation): a step lasts F times the "
                "CPU time it used (its wall time with --threads > 1), so agents sharing cores "
                "emulate F-times slower hosts");
  a->add_option("--metrics-file", c.metrics_file, "JSON-lines metrics log");
  a->add_option("--log-level", c.log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  a->add_option("--tag", c.tag_args,
                "KEY=VALUE operator tag, repeatable; gossiped to every member and shown by "
                "`members` (at most 8; keys [A-Za-z0-9_.-]{1,32}; values up to 64 bytes)");
  a->add_option("--http", c.http,
                "IP:PORT to serve GET /metrics (Prometheus) and GET / (live dashboard) on; off "
                "when not given. Not authenticated: keep it on loopback or a trusted network");
  a->add_option("--log-format", c.log_format,
                "text, or json: one JSON object per line (ts, level, node, msg)")
      ->capture_default_str();
}

// A configuration error (bad option value, unreadable or malformed config file): one line on
// stderr, exit status 2.
int ConfigError(const std::string& msg) {
  Fail(msg);
  return 2;
}

// `meshtrain export`: the agent's newest snapshot, written as a model file.
int RunExport(const std::string& rpc, const std::string& out) {
  auto r = Call(rpc, {{"cmd", "export"}});
  if (!r) return 1;
  meshtrain::learn::ModelFile m;
  m.spec = r->value("spec", std::string());
  m.step = r->value("step", int64_t{0});
  const json shape = r->value("input_shape", json::array());
  const json transform = r->value("input_transform", json::array({0.0, 1.0}));
  auto bytes = meshtrain::wire::Base64ToBytes(r->value("params", std::string()));
  if (!shape.is_array() || shape.size() != 3 || !transform.is_array() || transform.size() != 2 ||
      !bytes || bytes->size() % sizeof(float) != 0) {
    return Fail("the agent's export reply is malformed");
  }
  for (int i = 0; i < 3; ++i) m.input_shape[static_cast<size_t>(i)] = shape[i].get<int>();
  m.input_shift = transform[0].get<float>();
  m.input_scale = transform[1].get<float>();
  m.params.resize(bytes->size() / sizeof(float));
  if (!m.params.empty()) std::memcpy(m.params.data(), bytes->data(), bytes->size());
  if (auto st = meshtrain::learn::WriteModelFile(out, m); !st.ok()) return Fail(st.message());
  // Read back: the file must load as a model (the spec builds and fits the parameters).
  if (auto back = meshtrain::learn::ReadModelFile(out); !back.ok()) {
    return Fail(back.status().message());
  }
  std::printf("exported %s: %zu parameters at step %lld\n", out.c_str(), m.params.size(),
              static_cast<long long>(m.step));
  return 0;
}

int RunAgent(meshtrain::daemon::AgentConfig config) {
  if (auto st = config.Finalize(); !st.ok()) return ConfigError(st.message());
  auto logger = spdlog::stderr_color_mt("meshtrain");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  meshtrain::daemon::SetLogFormat(*logger, config.log_format, config.name);
  std::signal(SIGPIPE, SIG_IGN);
#if defined(__GLIBC__)
  // Parameter snapshots, transfer buffers and decoded chunks are ~1 MB each and come and go
  // every step: served from mmap and trimmed back on free, each one is page-faulted and zeroed
  // anew (perf: ~15 % of an agent's CPU on fmnist-mlp). Keep them in the heap and keep freed
  // memory for reuse; the working set stays a few snapshots.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  meshtrain::daemon::Agent agent(std::move(config));
  return agent.Run();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meshtrain: a peer-to-peer, serverless learning daemon"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");

  std::string rpc = kDefaultRpc;
  std::string token;
  auto add_rpc = [&rpc, &token](CLI::App* sub) {
    sub->add_option("--rpc", rpc, "Agent RPC address")
        ->envname("MESHTRAIN_RPC_ADDR")
        ->capture_default_str();
    sub->add_option("--rpc-token", token, "RPC token, when the agent requires one")
        ->envname("MESHTRAIN_RPC_TOKEN");
  };

  meshtrain::daemon::AgentConfig agent_config;
  auto* agent = app.add_subcommand("agent", "Run an agent in the foreground");
  std::string config_unused;
  agent->add_option("--config", config_unused,
                    "Read options from a file (key = value lines; command-line flags win)");
  AddAgentOptions(agent, agent_config);

  std::vector<std::string> join_addrs;
  auto* join = app.add_subcommand("join", "Ask the local agent to join peers");
  join->add_option("ADDR", join_addrs, "Peer addresses (HOST:PORT, IP:PORT or [IPv6]:PORT)")
      ->required();
  add_rpc(join);

  auto* leave = app.add_subcommand("leave", "Graceful leave; the agent then exits");
  add_rpc(leave);

  std::string force_name;
  auto* force = app.add_subcommand("force-leave", "Mark a failed member as left");
  force->add_option("NAME", force_name, "Member name")->required();
  add_rpc(force);

  std::string format = "table";
  std::string status_re;
  auto* members = app.add_subcommand("members", "List the members this agent knows");
  members->add_option("--format", format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  members->add_option("--status", status_re, "Only members whose status matches this regex");
  std::vector<std::string> tag_filters;
  members->add_option("--tag", tag_filters,
                      "KEY=REGEX: only members with tag KEY whose value matches REGEX (whole "
                      "value; repeatable, all must match)");
  add_rpc(members);

  auto* status = app.add_subcommand("status", "This agent: step, loss, accuracy, peers, traffic");
  status->add_option("--format", format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  add_rpc(status);

  auto* keygen = app.add_subcommand("keygen", "Print a new base64 32-byte cluster key");

  std::string key_install, key_use, key_remove;
  bool key_list = false;
  auto* keys = app.add_subcommand("keys", "Rotate the cluster key across the mesh");
  auto* ki = keys->add_option("--install", key_install, "Install a new key on every member");
  auto* ku = keys->add_option("--use", key_use, "Make an installed key the primary everywhere");
  auto* kr = keys->add_option("--remove", key_remove, "Remove a (non-primary) key everywhere");
  auto* kl =
      keys->add_flag("--list", key_list, "List key fingerprints and how many nodes hold them");
  ki->excludes(ku)->excludes(kr)->excludes(kl);
  ku->excludes(kr)->excludes(kl);
  kr->excludes(kl);
  add_rpc(keys);
  std::string monitor_level = "info";
  auto* monitor = app.add_subcommand(
      "monitor",
      "Stream the agent's log lines at a level (even below its own --log-level), "
      "until Ctrl-C");
  monitor->add_option("--log-level", monitor_level, "trace, debug, info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  add_rpc(monitor);
  auto* version = app.add_subcommand("version", "Print the version");
  auto* simulate = meshtrain::cli::AddSimulateCommand(app);
  auto* train = meshtrain::cli::AddTrainCommand(app);
  auto* evaluate = meshtrain::cli::AddEvaluateCommand(app);
  std::string export_out;
  auto* exporter = app.add_subcommand(
      "export", "Write the agent's current model (parameters + layer spec) to an .npz file");
  exporter->add_option("--out", export_out, "Output file (.npz)")->required();
  add_rpc(exporter);

  // --config is expanded into arguments before parsing, so one parser validates both.
  std::vector<std::string> args(argv, argv + argc), expanded;
  std::string config_error;
  if (!meshtrain::daemon::ExpandAgentConfig(args, &expanded, &config_error)) {
    return ConfigError(config_error);
  }
  std::vector<std::string> reversed(expanded.rbegin(), expanded.rend() - 1);
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (agent->parsed()) {
    agent_config.sample_given = agent->get_option("--sample")->count() > 0;
    return RunAgent(agent_config);
  }
  g_token = token;
  // Replies come from the network: a field of an unexpected type must end in a one-line error,
  // not in an uncaught json exception.
  try {
    if (simulate->parsed()) return meshtrain::cli::RunSimulateCommand();
    if (train->parsed()) return meshtrain::cli::RunTrainCommand();
    if (evaluate->parsed()) return meshtrain::cli::RunEvaluateCommand();
    if (exporter->parsed()) return RunExport(rpc, export_out);
    if (version->parsed()) {
      std::printf("meshtrain %s (protocol 1)\n", MESHTRAIN_VERSION);
      return 0;
    }
    if (monitor->parsed()) {
      json req = {{"cmd", "monitor"}, {"level", monitor_level}};
      if (!g_token.empty()) req["token"] = g_token;
      bool first = true;
      std::string refused;
      const std::string error =
          meshtrain::cli::StreamAgent(rpc, req, 30000, [&first, &refused](json frame) {
            if (first) {
              first = false;
              if (!frame.value("ok", false)) {
                refused = frame.value("error", std::string("the agent refused the request"));
                return false;
              }
              return true;
            }
            if (frame.contains("log") && frame["log"].is_string()) {
              std::printf("%s\n", frame["log"].get<std::string>().c_str());
              std::fflush(stdout);
            }
            return true;
          });
      if (!refused.empty()) return Fail(refused);
      if (!error.empty()) return Fail(error);
      std::fprintf(stderr, "the agent closed the stream (it left or stopped)\n");
      return 0;
    }
    if (keygen->parsed()) {
      std::printf("%s\n", meshtrain::wire::GenerateKeyBase64().c_str());
      return 0;
    }
    if (join->parsed()) {
      for (const auto& a : join_addrs) {
        if (!meshtrain::wire::ValidUtf8(a)) return Fail("join: an address is not valid UTF-8");
      }
      auto r = Call(rpc, {{"cmd", "join"}, {"addrs", join_addrs}});
      if (!r) return 1;
      std::printf("Successfully joined cluster by contacting %d nodes.\n", r->value("joined", 0));
      return 0;
    }
    if (leave->parsed()) {
      if (!Call(rpc, {{"cmd", "leave"}})) return 1;
      std::printf("Graceful leave started; the agent exits once the news has spread.\n");
      return 0;
    }
    if (force->parsed()) {
      if (!meshtrain::wire::ValidUtf8(force_name)) {
        return Fail("force-leave: the member name is not valid UTF-8");
      }
      if (!Call(rpc, {{"cmd", "force-leave"}, {"name", force_name}})) return 1;
      std::printf("Member %s marked as left.\n", force_name.c_str());
      return 0;
    }
    if (keys->parsed()) {
      if (key_install.empty() && key_use.empty() && key_remove.empty() && !key_list) {
        return Fail("keys: give one of --install KEY, --use KEY, --remove KEY or --list");
      }
      json req = {{"cmd", "keys"}};
      if (!key_install.empty()) req.update({{"op", "install"}, {"key", key_install}});
      if (!key_use.empty()) req.update({{"op", "use"}, {"key", key_use}});
      if (!key_remove.empty()) req.update({{"op", "remove"}, {"key", key_remove}});
      if (key_list) req["op"] = "list";
      auto r = Call(rpc, req);
      if (!r) return 1;
      std::printf("%d nodes answered.\n", r->value("nodes", 0));
      for (auto& [fp, n] : (*r)["keys"].items()) {
        const int primary = (*r)["primary"].value(fp, 0);
        std::printf("  %s  installed on %s nodes%s\n", fp.c_str(),
                    meshtrain::daemon::JsonText(n).c_str(),
                    primary ? (", primary on " + std::to_string(primary)).c_str() : "");
      }
      return 0;
    }
    if (members->parsed()) {
      std::optional<std::regex> re;
      if (!status_re.empty()) {
        try {
          re.emplace(status_re);
        } catch (const std::regex_error& e) {
          return Fail("invalid --status regex '" + status_re + "': " + e.what());
        }
      }
      std::vector<std::pair<std::string, std::regex>> tag_res;
      for (const std::string& f : tag_filters) {
        const size_t eq = f.find('=');
        if (eq == std::string::npos || eq == 0) {
          return ConfigError("invalid --tag filter '" + f + "': expected KEY=REGEX");
        }
        try {
          tag_res.emplace_back(f.substr(0, eq), std::regex(f.substr(eq + 1)));
        } catch (const std::regex_error& e) {
          return ConfigError("invalid --tag regex '" + f.substr(eq + 1) + "': " + e.what());
        }
      }
      auto r = Call(rpc, {{"cmd", "members"}});
      if (!r) return 1;
      json list = json::array();
      for (const auto& m : (*r)["members"]) {
        if (re && !std::regex_search(m.value("status", ""), *re)) continue;
        const json tags = m.value("tags", json::object());
        bool all = true;
        for (const auto& [key, tre] : tag_res) {
          const auto it = tags.find(key);
          all = all && it != tags.end() && it->is_string() &&
                std::regex_match(it->get<std::string>(), tre);
        }
        if (all) list.push_back(m);
      }
      if (format == "json") {
        std::printf("%s\n", meshtrain::daemon::JsonText(json{{"members", list}}).c_str());
      } else {
        std::vector<json> rows(list.begin(), list.end());
        for (json& row : rows) {  // tags as one "k=v,k2=v2" cell
          std::string cell;
          const json tags = row.value("tags", json::object());
          for (const auto& [k, v] : tags.items()) {
            cell +=
                (cell.empty() ? "" : ",") + k + "=" + (v.is_string() ? v.get<std::string>() : "");
          }
          row["tags"] = cell;
        }
        PrintTable({"name", "addr", "status", "incarnation", "step", "training", "uplink_mbps",
                    "downlink_mbps", "reach", "path", "relay", "tags"},
                   rows);
      }
      return 0;
    }
    if (status->parsed()) {
      auto r = Call(rpc, {{"cmd", "status"}});
      if (!r) return 1;
      if (format == "json") {
        std::printf("%s\n", meshtrain::daemon::JsonText(*r).c_str());
      } else {
        for (auto& [k, v] : r->items())
          std::printf("%-17s %s\n", (k + ":").c_str(), Cell(v).c_str());
      }
      return 0;
    }
  } catch (const nlohmann::json::exception& e) {
    return Fail(std::string("malformed reply from the agent: ") + e.what());
  }
  return 0;
}
