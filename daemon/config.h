// Agent configuration: every `meshtrain agent` option (docs/contract.md "Command line"),
// validated into one value. Enumerated options are held typed (parsed once, by the CLI's checks
// built from each option's names table; see daemon/option_names.h); free-form ones (names,
// addresses, paths, specs) as strings, checked by Finalize.
// Thread-safety: plain value type.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "daemon/ops/log_format.h"
#include "learn/mixing.h"
#include "membership/swim.h"
#include "node/node.h"
#include "sync/barrier.h"
#include "sync/selection.h"
#include "wire/compress.h"

namespace meshtrain::daemon {

using ::meshtrain::Status;

// --trainer: builtin (the --task/--model, on a thread of the agent) or external (one local
// trainer process attached over --trainer-socket; see daemon/trainer/external_trainer.h).
enum class TrainerKind : uint8_t { kBuiltin, kExternal };
inline constexpr std::array<std::pair<std::string_view, TrainerKind>, 2> kTrainerNames = {{
    {"builtin", TrainerKind::kBuiltin},
    {"external", TrainerKind::kExternal},
}};

// --relay's keywords; any other value names the member to relay through (RelayMode::kNamed).
inline constexpr std::array<std::pair<std::string_view, membership::Config::RelayMode>, 2>
    kRelayModeNames = {{
        {"auto", membership::Config::RelayMode::kAuto},
        {"off", membership::Config::RelayMode::kOff},
    }};

struct AgentConfig {
  std::string name;  // empty: hostname-port
  std::string bind = "0.0.0.0:7950";
  // --advertise HOST:PORT; empty: the bind address, or with a wildcard bind the address routing
  // to the first --join peer (ResolveAddresses; addressing.h). Resolved to IP:PORT at start.
  std::string advertise;
  std::string advertise_how;     // how ResolveAddresses chose it (for the banner)
  bool advertise_given = false;  // --advertise was given (Finalize): never moved
  // --nat auto|off (kAutoOffNames): find this node's reachability, answer packets where they came
  // from, and (without --advertise) move to the address peers agree they see it at.
  bool nat = true;
  // Relays (with --nat auto): --relay auto|NAME|off picks the member this node is reached
  // through when it is behind symmetric NAT (relay_name: the NAME); --serve-relay on|off whether
  // it relays for others; --relay-rate MBIT caps what it relays (0 = no cap).
  membership::Config::RelayMode relay_mode = membership::Config::RelayMode::kAuto;
  std::string relay_name;
  bool serve_relay = true;
  double relay_rate_mbit = 0;
  std::string rpc = "127.0.0.1:7951";
  std::string rpc_token;          // required from RPC clients when set
  std::string http;               // --http IP:PORT: /metrics and the dashboard; empty = off
  std::vector<std::string> join;  // HOST:PORT, IP:PORT or [IPv6]:PORT, as given
  std::vector<std::string> join_resolved;  // IP:PORT, by ResolveAddresses
  bool retry_join = false;
  std::string retry_interval = "30s";  // --retry-interval (Serf's default)
  int64_t retry_join_interval_ms = 30000;
  int retry_max = 0;  // --retry-max: join attempts before giving up; 0 = unlimited
  // --test-clock-offset SECONDS (hidden, tests only): shifts this agent's wall clock, which
  // stamps messages, to show that nothing depends on hosts' clocks agreeing.
  double test_clock_offset_s = 0;
  membership::TimingProfile profile = membership::TimingProfile::kLan;
  // Single-timing overrides (< 0 = the profile's).
  int64_t probe_interval_ms = -1;
  int64_t probe_timeout_ms = -1;
  int suspicion_mult = -1;
  int64_t gossip_interval_ms = -1;
  double push_pull_interval_s = -1;
  std::string cluster = "default";
  std::string encrypt;  // base64 key, empty = off
  std::string data_dir;
  int checkpoint_every = 500;  // steps between checkpoints (with data_dir)
  std::string task = "fmnist-mlp";
  TrainerKind trainer = TrainerKind::kBuiltin;
  std::string trainer_socket;     // empty: --data-dir/trainer.sock or /run/meshtrain/NAME.sock
  double trainer_timeout_s = 60;  // an attached trainer silent this long is detached
  // A trainer gone (before it finished) this long: the consensus goes on without this node.
  double trainer_grace_s = 60;
  bool external_trainer() const { return trainer == TrainerKind::kExternal; }
  // --model: a preset (learn::Presets) or a layer spec (learn/network.h); when set it replaces
  // --task (Finalize copies it there, so everything downstream reads `task`).
  std::string model;
  std::string train_data;    // --train-data FILE[,FILE]: user data instead of Fashion-MNIST
  std::string test_data;     // --test-data FILE[,FILE]
  std::string label_column;  // --label-column NAME|INDEX (CSV)
  std::string input_shape;   // --input-shape C,H,W
  int threads = 1;           // --threads N: cores one minibatch's gradient is split over
  std::string dataset_dir = "/usr/share/datasets/fashion-mnist";
  std::string shard;               // "I/N" or empty
  std::string shard_mode = "iid";  // "iid" or "label-skew:ALPHA" (learn/label_skew.h)
  int batch = 64;
  std::string batch_spec;   // --batch as given: N or auto (empty: `batch`)
  bool batch_auto = false;  // --batch auto: dynamic batch size from the mesh's pace
  double lr = 0.05;
  double momentum = 0.9;
  std::optional<uint64_t> seed;
  uint64_t steps = 0;          // 0 = unbounded
  int max_peers = 0;           // barriers wait for at most this many training peers (0 = all)
  int min_peers = 0;           // do not start training before this many training peers are alive
  double target_accuracy = 0;  // 0 = none
  int eval_every = 100;
  double eval_average = 0;  // --eval-average: decay of the evaluated moving average; 0 = off
  sync::Policy barrier = sync::Policy::kPssp;
  int staleness = 4;
  int sample = 4;
  bool sample_given = false;  // --sample was given (dssp/wbsp then sample β peers)
  int staleness_max = 4;      // dssp: r_max, extra steps beyond --staleness (s_L)
  bool overlap = true;        // on (OSP): next step's barrier queries overlap this step's compute
  sync::SelectPolicy select = sync::SelectPolicy::kSelmcast;
  int fanout = 3;
  int sync_every = 1;
  std::string
      sync_every_spec;  // --sync-every as given: "N" or "auto" (Finalize sets the two below)
  bool sync_every_auto = false;
  // --outer (learn::OuterStep, DiLoCo): avg, sgd or nesterov at each sync; --outer-lr and
  // --outer-momentum (0 and -1 here: the kind's defaults, set by Finalize: nesterov 0.7 and 0.9,
  // sgd 1.0 and 0).
  learn::OuterStep::Kind outer = learn::OuterStep::Kind::kAvg;
  // --fragments F (streaming DiLoCo fragments): every H/F steps one of F fragments of the model
  // is sent (and takes its outer step), in turn.
  int fragments = 1;
  double outer_lr = 0;
  double outer_momentum = -1;
  wire::CompressSpec compress;  // --compress none, fp16, int8, sparse or topk:F (wire/compress.h)
  // --robust on|off: judge each peer's model against this node's own before mixing it, and
  // the end-of-training consensus around the final models' median (learn/robust_mix.h).
  bool robust = false;
  bool join_state = true;        // on: a fresh node joining a running mesh fetches its model
  double uplink_limit = 0;       // MB/s, 0 = none
  double downlink_limit = 0;     // MB/s, 0 = none
  double capacity_probe_s = 30;  // --capacity-probe-interval: a probe train this often, 0 = off
  double slowdown = 1;
  std::string metrics_file;
  spdlog::level::level_enum log_level = spdlog::level::info;
  LogFormat log_format = LogFormat::kText;
  std::vector<std::string> tag_args;  // --tag KEY=VALUE, as given
  // Parsed by Finalize: sorted by key, unique, wire::ValidTags.
  std::vector<std::pair<std::string, std::string>> tags;

  // Fills defaults that depend on other fields (name, advertise) and checks every value.
  // An InvalidArgument naming the option and what it expects, or ok when usable.
  Status Finalize();
  // The --outer options (part of Finalize).
  Status FinalizeOuter();
  // Start-up name resolution (blocks; call before the event loop runs): `join` into
  // `join_resolved` (a name that does not resolve is an error unless retry_join, when the
  // retries resolve it again) and the advertised address (addressing.h, ChooseAdvertise).
  // InvalidArgument (exit 2) for an unusable combination, e.g. loopback to a remote peer.
  Status ResolveAddresses();
  // The address family names are resolved in (addressing.h, ResolveFamily).
  int JoinFamily() const;
  // The membership timing for this configuration (profile plus overrides).
  membership::Config MembershipConfig() const;
  // The start-up banner (docs/contract.md "Output formats"): name, bind, rpc, cluster,
  // encrypted, task, barrier, selection.
  std::string Banner(bool encrypted) const;
  // The node core's configuration; `seed` is the node's RNG seed, `resumed_step` the checkpoint
  // step it resumed at (-1: a fresh start).
  node::NodeConfig NodeConfig(uint64_t seed, int64_t resumed_step) const;
};

}  // namespace meshtrain::daemon
