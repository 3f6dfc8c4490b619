// `meshtrain agent`: the agent's options (every field of daemon::AgentConfig; enumerated ones
// through their names tables, cli/option_choice.h) and running the agent in the foreground.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <csignal>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/option_choice.h"
#include "daemon/agent.h"
#include "daemon/config.h"
#include "daemon/config_file.h"
#include "daemon/ops/log_format.h"
#include "daemon/option_names.h"
#include "learn/network.h"
#include "wire/compress.h"

namespace meshtrain::cli {
namespace {

// "{none,fp16,int8,sparse,topk:F}" for --help, from wire::kEncodingNames.
std::string CompressBraces() {
  std::string out;
  for (const auto& [name, kind] : wire::kEncodingNames) {
    out +=
        (out.empty() ? "{" : ",") + std::string(name) + (kind == wire::Encoding::kTopK ? ":F" : "");
  }
  return out + "}";
}

// --compress: a scheme of wire::kEncodingNames, topk with its fraction (topk:F).
void AddCompressOption(CLI::App* a, daemon::AgentConfig& c) {
  const CLI::Validator scheme(
      [](const std::string& v) -> std::string {
        auto spec = wire::ParseCompress(v);
        if (spec.ok()) return {};
        // The parser's message names the option; CLI11 puts the name in front already.
        std::string msg = spec.status().message();
        const std::string prefix = "invalid --compress ";
        return msg.rfind(prefix, 0) == 0 ? msg.substr(prefix.size()) : msg;
      },
      CompressBraces());
  a->add_option_function<std::string>(
       "--compress", [&c](const std::string& v) { c.compress = *wire::ParseCompress(v); },
       "Parameter transfers: none, fp16, int8 (blocks of 256, one scale each), sparse "
       "(mostly-zero values of few levels, e.g. MeshOptimizer's compressed pseudo-gradients, "
       "sent losslessly as gaps and codes; other chunks as int8) or topk:F (the largest F of "
       "the change since the receiver's last acknowledged model, with error feedback)")
      ->check(scheme)
      ->type_name("TEXT")
      ->default_str(wire::CompressName(c.compress));
}

// Identity, addresses, NAT and relays, joining, membership timing, cluster and key.
void AddNetworkOptions(CLI::App* a, daemon::AgentConfig& c) {
  a->add_option("--name", c.name, "Unique node name (default: hostname-port)");
  a->add_option("--bind", c.bind, "UDP+TCP address for membership and parameters")
      ->capture_default_str();
  a->add_option("--advertise", c.advertise,
                "HOST:PORT given to peers (default: the bind address; with a wildcard bind, this "
                "host's address on the route to the first --join peer, else its first "
                "non-loopback address)");
  AddChoice(a, "--nat", c.nat, daemon::kAutoOffNames,
            "NAT traversal: auto (peers tell this node where they see it; it answers packets "
            "where they came from, publishes whether it is reachable from outside and, "
            "without --advertise, moves to the address its peers agree on) or off");
  a->add_option_function<std::string>(
       "--relay",
       [&c](const std::string& v) {
         const auto mode = daemon::ParseName(daemon::kRelayModeNames, v);
         c.relay_mode = mode ? *mode : membership::Config::RelayMode::kNamed;
         c.relay_name = mode ? std::string() : v;  // checked by Finalize
       },
       "With --nat auto, behind a symmetric NAT (peers see this node at a different "
       "address each): auto (register with any public member that serves relays, and "
       "be reached through it), NAME (that member only) or off")
      ->default_str("auto");
  AddChoice(a, "--serve-relay", c.serve_relay, daemon::kOnOffNames,
            "on: relay membership datagrams for members behind symmetric NAT that register "
            "here (they stay sealed end to end); off: refuse");
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
  AddChoice(a, "--profile", c.profile, membership::kTimingProfileNames,
            "Membership timing (memberlist's profiles)");
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
}

// What is trained, on which data, with which optimizer; evaluations.
void AddTrainingOptions(CLI::App* a, daemon::AgentConfig& c) {
  a->add_option("--data-dir", c.data_dir, "Checkpoints and peer snapshot directory");
  a->add_option("--checkpoint-every", c.checkpoint_every, "Steps between checkpoints")
      ->capture_default_str();
  a->add_option("--task", c.task, "none, synthetic, fmnist-softmax, fmnist-mlp or fmnist-cnn")
      ->capture_default_str();
  a->add_option("--model", c.model,
                "A preset (fmnist-mlp, fmnist-softmax, fmnist-cnn, synthetic) or a layer spec, "
                "e.g. \"conv(16,5),relu,maxpool(2),flatten,dense(10)\"; replaces --task. "
                "Layers: " +
                    learn::LayerUsage());
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
}

// Barriers, receiver selection, parameter exchange and its bandwidth.
void AddSyncOptions(CLI::App* a, daemon::AgentConfig& c) {
  AddChoice(a, "--barrier", c.barrier, sync::kPolicyNames,
            "Barrier: asp, bsp, ssp, pbsp, pssp, dssp (dynamic staleness in [s, s + "
            "--staleness-max]) or wbsp (bsp on the global step; a node that would wait "
            "keeps taking local steps)");
  a->add_option("--staleness", c.staleness, "SSP/PSP staleness bound (dssp: its lower bound)")
      ->capture_default_str();
  a->add_option("--staleness-max", c.staleness_max,
                "dssp: at most this many extra steps beyond --staleness (r_max)")
      ->capture_default_str();
  AddChoice(a, "--overlap", c.overlap, daemon::kOnOffNames,
            "on: the barrier queries for the next step go out while this step computes, "
            "and its permit comes as soon as the known progress allows (OSP); off: only "
            "once the step is done");
  a->add_option("--sample", c.sample,
                "PSP sample size (beta); with dssp or wbsp: sample this many peers instead "
                "of all (pdssp, pwbsp)")
      ->capture_default_str();
  AddChoice(a, "--select", c.select, sync::kSelectPolicyNames, "Receiver selection");
  a->add_option("--fanout", c.fanout, "Receivers per round (P)")->capture_default_str();
  a->add_option("--sync-every", c.sync_every_spec,
                "Local steps between parameter multicasts, or auto (hide a round's transfer "
                "under computation: H = ceil(round time / step time), 1..64)")
      ->default_str("1");
  AddChoice(a, "--outer", c.outer, learn::OuterStep::kKindNames,
            "Outer optimizer at each sync (DiLoCo): avg (the mix is the model), sgd or "
            "nesterov (a step from the last sync's parameters along theta0 - mixed)");
  a->add_option("--fragments", c.fragments,
                "Streaming fragments: the model in F parts, one sent (and outer-stepped) every "
                "H/F steps in turn, so each sync moves 1/F of it (F must divide --sync-every)")
      ->capture_default_str();
  a->add_option("--outer-lr", c.outer_lr, "Outer learning rate (default: nesterov 0.7, sgd 1.0)");
  a->add_option("--outer-momentum", c.outer_momentum,
                "Outer Nesterov momentum (default 0.9; only with --outer nesterov)");
  AddChoice(a, "--robust", c.robust, daemon::kOnOffNames,
            "on: each peer's model (or chunk) is judged by its distance to this node's last "
            "mix before it is mixed (centered clipping, ClippedGossip): clipped or refused beyond "
            "a radius that follows the mesh's recent distances; senders clipped again and "
            "again are flagged in members and quarantined; the end consensus is taken around "
            "the final models' coordinate-wise median");
  AddChoice(a, "--join-state", c.join_state, daemon::kOnOffNames,
            "on: a fresh node joining a running mesh first takes over the most advanced "
            "peer's model and the slowest peer's step; off: it starts from its own "
            "initialisation at step 0");
  AddCompressOption(a, c);
  a->add_option("--uplink-limit", c.uplink_limit, "Uplink cap for parameter traffic (MB/s)");
  a->add_option("--downlink-limit", c.downlink_limit, "Downlink cap (MB/s)");
  a->add_option("--capacity-probe-interval", c.capacity_probe_s,
                "Seconds between link-capacity probes: a train of UDP datagrams to one peer's "
                "membership port measures the path (the first ten go 2 s apart); 0 = off, "
                "bandwidth is then measured from parameter transfers only")
      ->capture_default_str();
}

// The trainer process, straggler emulation, logs, metrics and tags.
void AddOperationOptions(CLI::App* a, daemon::AgentConfig& c) {
  AddChoice(a, "--trainer", c.trainer, daemon::kTrainerNames,
            "builtin: train --task/--model inside the agent; external: serve one local "
            "trainer process (e.g. the Python client, python/meshtrain) over "
            "--trainer-socket, parameters in shared memory");
  a->add_option("--trainer-socket", c.trainer_socket,
                "Unix socket for --trainer external (mode 0600, same user only; default "
                "DATA_DIR/trainer.sock, or /run/meshtrain/NAME.sock without --data-dir)");
  a->add_option("--trainer-timeout", c.trainer_timeout_s,
                "Seconds an attached external trainer may stay silent (outside barrier waits) "
                "before it is detached and the agent stops counting as training")
      ->capture_default_str();
  a->add_option("--trainer-grace", c.trainer_grace_s,
                "Seconds an external trainer that left before it finished may take to attach "
                "again; past them the end-of-training consensus goes on without this node")
      ->capture_default_str();
  a->add_option("--slowdown", c.slowdown,
                "Make each step F times slower (straggler emulation): a step lasts F times the "
                "CPU time it used (its wall time with --threads > 1), so agents sharing cores "
                "emulate F-times slower hosts");
  a->add_option("--metrics-file", c.metrics_file, "JSON-lines metrics log");
  AddChoice(a, "--log-level", c.log_level, daemon::kLogLevelNames, "Log level");
  a->add_option("--tag", c.tag_args,
                "KEY=VALUE operator tag, repeatable; gossiped to every member and shown by "
                "`members` (at most 8; keys [A-Za-z0-9_.-]{1,32}; values up to 64 bytes)");
  a->add_option("--http", c.http,
                "IP:PORT to serve GET /metrics (Prometheus) and GET / (live dashboard) on; off "
                "when not given. Not authenticated: keep it on loopback or a trusted network");
  AddChoice(a, "--log-format", c.log_format, daemon::kLogFormatNames,
            "text, or json: one JSON object per line (ts, level, node, msg)");
}

int RunAgent(daemon::AgentConfig config) {
  if (auto st = config.Finalize(); !st.ok()) return UsageError(st.message());
  auto logger = spdlog::stderr_color_mt("meshtrain");
  spdlog::set_default_logger(logger);
  spdlog::set_level(config.log_level);
  daemon::SetLogFormat(*logger, config.log_format, config.name);
  std::signal(SIGPIPE, SIG_IGN);
#if defined(__GLIBC__)
  // Parameter snapshots, transfer buffers and decoded chunks are ~1 MB each and come and go
  // every step: served from mmap and trimmed back on free, each one is page-faulted and zeroed
  // anew (perf: ~15 % of an agent's CPU on fmnist-mlp). Keep them in the heap and keep freed
  // memory for reuse; the working set stays a few snapshots.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  daemon::Agent agent(std::move(config));
  return agent.Run();
}

}  // namespace

std::string ParseErrorMessage(const CLI::ParseError& e) {
  std::string msg = e.what();
  const size_t colon = msg.find(": ");
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr && msg.rfind("-", 0) == 0 &&
      colon != std::string::npos) {
    const std::string rest = msg.substr(colon + 2);
    const bool quoted = !rest.empty() && (rest[0] == '\'' || rest[0] == '"');
    msg = "invalid " + msg.substr(0, colon) + (quoted ? " " : ": ") + rest;
  }
  return msg;
}

bool ParseAgentArgs(const std::vector<std::string>& args, daemon::AgentConfig* config,
                    std::string* error) {
  std::vector<std::string> argv = {"meshtrain", "agent"}, expanded;
  argv.insert(argv.end(), args.begin(), args.end());
  if (!daemon::ExpandAgentConfig(argv, &expanded, error)) return false;
  CLI::App app{"meshtrain agent"};
  std::string config_file;
  app.add_option("--config", config_file, "Read options from a file");
  AddNetworkOptions(&app, *config);
  AddTrainingOptions(&app, *config);
  AddSyncOptions(&app, *config);
  AddOperationOptions(&app, *config);
  std::vector<std::string> reversed(expanded.rbegin(), expanded.rend() - 2);
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::ParseError& e) {
    *error = ParseErrorMessage(e);
    return false;
  }
  config->sample_given = app.get_option("--sample")->count() > 0;
  if (auto st = config->Finalize(); !st.ok()) {
    *error = st.message();
    return false;
  }
  return true;
}

Command AddAgentCommand(CLI::App& app) {
  static daemon::AgentConfig config;
  static std::string config_file;  // read by main() (daemon::ExpandAgentConfig) before parsing
  CLI::App* agent = app.add_subcommand("agent", "Run an agent in the foreground");
  agent->add_option("--config", config_file,
                    "Read options from a file (key = value lines; command-line flags win)");
  AddNetworkOptions(agent, config);
  AddTrainingOptions(agent, config);
  AddSyncOptions(agent, config);
  AddOperationOptions(agent, config);
  return {agent, [agent] {
            config.sample_given = agent->get_option("--sample")->count() > 0;
            return RunAgent(config);
          }};
}

}  // namespace meshtrain::cli
