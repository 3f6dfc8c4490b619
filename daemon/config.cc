#include "daemon/config.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <regex>
#include <utility>

#include "daemon/addressing.h"
#include "daemon/option_names.h"
#include "learn/data_file.h"
#include "learn/label_skew.h"
#include "learn/mixing.h"
#include "learn/network.h"
#include "learn/task.h"
#include "wire/compress.h"
#include "wire/messages.h"
#include "wire/net_addr.h"

namespace meshtrain::daemon {
namespace {

bool OneOf(const std::string& v, std::initializer_list<const char*> options) {
  for (const char* o : options) {
    if (v == o) return true;
  }
  return false;
}

// `v` in single quotes for an error line: bytes that are not printable ASCII (control
// characters, anything not valid UTF-8, newlines) are shown as \xNN, so the message stays one
// line of valid text whatever the user typed.
std::string Quoted(const std::string& v) {
  std::string out = "'";
  const bool utf8 = wire::ValidUtf8(v);
  for (char ch : v) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f || (u >= 0x80 && !utf8)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  return out + "'";
}

}  // namespace

Status AgentConfig::FinalizeOuter() {
  const bool nesterov = outer == learn::OuterStep::Kind::kNesterov;
  if (outer == learn::OuterStep::Kind::kAvg && (outer_lr != 0 || outer_momentum != -1)) {
    return Status::InvalidArgument("--outer-lr and --outer-momentum need --outer sgd or nesterov");
  }
  if (!nesterov && outer_momentum != -1 && outer_momentum != 0) {
    return Status::InvalidArgument("--outer-momentum needs --outer nesterov");
  }
  if (outer_lr == 0) outer_lr = nesterov ? 0.7 : 1.0;
  if (outer_momentum == -1) outer_momentum = nesterov ? 0.9 : 0.0;
  if (!(outer_lr > 0 && outer_lr <= 10)) {
    return Status::InvalidArgument("invalid --outer-lr: must be in (0, 10]");
  }
  if (!(outer_momentum >= 0 && outer_momentum < 1)) {
    return Status::InvalidArgument("invalid --outer-momentum: must be in [0, 1)");
  }
  if (fragments < 1 || fragments > 1024) {
    return Status::InvalidArgument("invalid --fragments: 1..1024");
  }
  if (fragments > 1) {
    if (external_trainer()) {
      return Status::InvalidArgument(
          "--fragments applies to the built-in trainer (an external trainer passes fragments= to "
          "MeshOptimizer in meshtrain.torch)");
    }
    if (sync_every_auto || sync_every % fragments != 0) {
      return Status::InvalidArgument("--fragments " + std::to_string(fragments) +
                                     " needs a --sync-every that it divides (one fragment every "
                                     "H/F steps)");
    }
    if (compress.kind == wire::Encoding::kTopK) {
      return Status::InvalidArgument("--fragments does not go with --compress topk");
    }
  }
  if (outer != learn::OuterStep::Kind::kAvg && external_trainer()) {
    return Status::InvalidArgument(
        "--outer applies to the built-in trainer (an external trainer takes the outer step "
        "itself: MeshOptimizer(outer=...) in meshtrain.torch)");
  }
  return Status::OK();
}

namespace {

// Strings that end up in names, labels and addresses, on the wire and in JSON: valid UTF-8
// first, then their own syntax (CheckAddresses, CheckIdentity).
Status CheckUtf8(AgentConfig& c) {
  for (const auto& [flag, value] :
       std::initializer_list<std::pair<const char*, const std::string*>>{
           {"--name", &c.name},
           {"--bind", &c.bind},
           {"--advertise", &c.advertise},
           {"--relay", &c.relay_name},
           {"--rpc", &c.rpc},
           {"--rpc-token", &c.rpc_token},
           {"--cluster", &c.cluster}}) {
    if (!wire::ValidUtf8(*value))
      return Status::InvalidArgument(std::string("invalid ") + flag + ": not valid UTF-8");
  }
  for (const auto& j : c.join) {
    if (!wire::ValidUtf8(j))
      return Status::InvalidArgument("invalid --join " + Quoted(j) + ": not valid UTF-8");
  }
  return Status::OK();
}

// The addresses: bind, advertise, rpc, http, join and the join retries.
Status CheckAddresses(AgentConfig& c) {
  auto bind_addr = wire::NetAddr::Parse(c.bind);
  if (!bind_addr)
    return Status::InvalidArgument("invalid --bind " + Quoted(c.bind) +
                                   ": expected IP:PORT, e.g. 0.0.0.0:7950 or [::]:7950");
  if (bind_addr->port() == 0)
    return Status::InvalidArgument("invalid --bind " + Quoted(c.bind) + ": port 0 is not allowed");
  c.advertise_given = !c.advertise.empty();
  if (!c.advertise.empty()) {
    auto adv = ParseHostPort(c.advertise);
    if (!adv.ok()) {
      return Status::InvalidArgument("invalid --advertise " + Quoted(c.advertise) + ": " +
                                     adv.status().message());
    }
    const auto literal = wire::NetAddr::Parse(c.advertise);
    if (literal && literal->IsAny()) {
      return Status::InvalidArgument("invalid --advertise " + Quoted(c.advertise) +
                                     ": a wildcard address cannot be reached; give this host's "
                                     "address");
    }
  }
  if (!wire::NetAddr::Parse(c.rpc))
    return Status::InvalidArgument("invalid --rpc " + Quoted(c.rpc) + ": expected IP:PORT");
  if (!c.http.empty() && !wire::NetAddr::Parse(c.http)) {
    return Status::InvalidArgument("invalid --http " + Quoted(c.http) + ": expected IP:PORT");
  }
  for (auto& j : c.join) {
    if (auto hp = ParseHostPort(j); !hp.ok()) {
      return Status::InvalidArgument("invalid --join " + Quoted(j) + ": " + hp.status().message());
    }
  }
  if (auto ms = ParseDurationMs(c.retry_interval); !ms || *ms < 100 || *ms > 86400000) {
    return Status::InvalidArgument("invalid --retry-interval " + Quoted(c.retry_interval) +
                                   ": expected a duration from 100ms to 24h, e.g. 30s");
  } else {
    c.retry_join_interval_ms = *ms;
  }
  if (c.retry_max < 0) return Status::InvalidArgument("invalid --retry-max: must be >= 0");
  return Status::OK();
}

// Who this node is: name (default hostname-port), relay, profile, cluster, timing overrides.
Status CheckIdentity(AgentConfig& c) {
  if (c.relay_mode == membership::Config::RelayMode::kNamed &&
      (c.relay_name.empty() || !wire::ValidNodeName(c.relay_name))) {
    std::string names;  // "auto, off"
    for (const auto& entry : kRelayModeNames)
      names += (names.empty() ? "" : ", ") + std::string(entry.first);
    return Status::InvalidArgument("invalid --relay " + Quoted(c.relay_name) + ": " + names +
                                   " or a member's name");
  }
  if (!(c.relay_rate_mbit >= 0) || !std::isfinite(c.relay_rate_mbit)) {
    return Status::InvalidArgument("invalid --relay-rate: a rate in Mbit/s >= 0 (0 = no cap)");
  }
  if (!std::isfinite(c.test_clock_offset_s) || std::fabs(c.test_clock_offset_s) > 1e6) {
    return Status::InvalidArgument("invalid --test-clock-offset: at most 1e6 seconds either way");
  }
  if (c.name.empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "node");
    c.name = std::string(host) + "-" + std::to_string(wire::NetAddr::Parse(c.bind)->port());
  }
  static const std::regex kName("[A-Za-z0-9._-]{1,64}");
  if (!std::regex_match(c.name, kName)) {
    return Status::InvalidArgument("invalid --name " + Quoted(c.name) +
                                   ": use 1-64 characters of [A-Za-z0-9._-]");
  }
  if (!wire::ValidClusterLabel(c.cluster)) {
    return Status::InvalidArgument(
        "invalid --cluster: 1-64 bytes of UTF-8 without control characters");
  }
  if (c.probe_interval_ms == 0 || c.probe_timeout_ms == 0 || c.gossip_interval_ms == 0) {
    return Status::InvalidArgument("timing overrides must be positive");
  }
  return Status::OK();
}

// What is trained and on what: --model/--task, the trainer, the data and its shards.
Status CheckModelAndData(AgentConfig& c) {
  if (!c.model.empty()) {
    const auto& presets = learn::TaskNames();
    if (c.model != "none" && std::find(presets.begin(), presets.end(), c.model) == presets.end()) {
      if (auto spec = learn::ParseModelSpec(c.model); !spec.ok()) {
        return Status::InvalidArgument("invalid --model " + Quoted(c.model) + ": " +
                                       spec.status().message());
      }
    }
    c.task = c.model;
  } else if (!OneOf(c.task, {"none", "synthetic", "fmnist-softmax", "fmnist-mlp", "fmnist-cnn"})) {
    return Status::InvalidArgument(
        "invalid --task " + Quoted(c.task) +
        ": expected none, synthetic, fmnist-softmax, fmnist-mlp or fmnist-cnn (or use --model "
        "with a layer spec)");
  }
  if (c.external_trainer()) {
    if (c.trainer_socket.empty()) {
      c.trainer_socket =
          c.data_dir.empty() ? "/run/meshtrain/" + c.name + ".sock" : c.data_dir + "/trainer.sock";
    }
    // sockaddr_un.sun_path holds 108 bytes with the terminating NUL.
    if (c.trainer_socket.size() > 107) {
      return Status::InvalidArgument("invalid --trainer-socket: a path of at most 107 bytes");
    }
  } else if (!c.trainer_socket.empty()) {
    return Status::InvalidArgument("--trainer-socket needs --trainer external");
  }
  if (!(c.trainer_timeout_s >= 0.1 && c.trainer_timeout_s <= 86400)) {
    return Status::InvalidArgument("invalid --trainer-timeout: 0.1..86400 seconds");
  }
  if (!(c.trainer_grace_s >= 0 && c.trainer_grace_s <= 86400)) {
    return Status::InvalidArgument("invalid --trainer-grace: 0..86400 seconds");
  }
  if (c.threads < 1 || c.threads > 64) {
    return Status::InvalidArgument("invalid --threads " + std::to_string(c.threads) + ": 1..64");
  }
  if (!c.input_shape.empty()) {
    if (auto shape = learn::ParseInputShape(c.input_shape); !shape.ok()) {
      return Status::InvalidArgument("invalid --input-shape: " + shape.status().message());
    }
  }
  if (c.train_data.empty() && !c.test_data.empty()) {
    return Status::InvalidArgument("--test-data needs --train-data");
  }
  if (!c.train_data.empty() && c.task == "synthetic") {
    return Status::InvalidArgument("--train-data does not apply to the synthetic task");
  }
  if (!c.shard.empty()) {
    static const std::regex kShard("([0-9]{1,6})/([0-9]{1,6})");
    std::smatch m;
    if (!std::regex_match(c.shard, m, kShard) || std::stoi(m[1]) >= std::stoi(m[2])) {
      return Status::InvalidArgument("invalid --shard " + Quoted(c.shard) +
                                     ": expected I/N with 0 <= I < N");
    }
  }
  if (auto mode = learn::ParseShardMode(c.shard_mode); !mode.ok()) {
    return Status::InvalidArgument("invalid " + mode.status().message());
  }
  return Status::OK();
}

// The optimizer and the evaluations: batch, lr, momentum, targets, checkpoints.
Status CheckOptimizer(AgentConfig& c) {
  if (!c.batch_spec.empty()) {
    static const std::regex kBatch("[0-9]{1,6}");
    if (c.batch_spec == "auto") {
      c.batch_auto = true;
    } else if (std::regex_match(c.batch_spec, kBatch)) {
      c.batch = std::stoi(c.batch_spec);
    } else {
      return Status::InvalidArgument("invalid --batch " + Quoted(c.batch_spec) +
                                     ": expected a number or auto");
    }
  }
  if (c.batch < 1 || c.batch > 65536) return Status::InvalidArgument("invalid --batch: 1..65536");
  if (!(c.lr > 0 && c.lr < 100)) return Status::InvalidArgument("invalid --lr: must be > 0");
  if (!(c.momentum >= 0 && c.momentum < 1))
    return Status::InvalidArgument("invalid --momentum: must be in [0, 1)");
  if (!(c.target_accuracy >= 0 && c.target_accuracy <= 1)) {
    return Status::InvalidArgument("invalid --target-accuracy: must be in [0, 1]");
  }
  if (c.eval_every < 1) return Status::InvalidArgument("invalid --eval-every: must be >= 1");
  if (!(c.eval_average >= 0 && c.eval_average < 1)) {
    return Status::InvalidArgument("invalid --eval-average: a decay in [0, 1), e.g. 0.98");
  }
  if (c.eval_average > 0 && c.external_trainer()) {
    return Status::InvalidArgument(
        "--eval-average applies to the built-in trainer (an external trainer evaluates its own "
        "model)");
  }
  if (c.checkpoint_every < 1)
    return Status::InvalidArgument("invalid --checkpoint-every: must be >= 1");
  if (!(c.slowdown >= 1 && c.slowdown <= 1000))
    return Status::InvalidArgument("invalid --slowdown: must be in [1, 1000]");
  return Status::OK();
}

// Barriers, peers and parameter exchange (the --outer options: FinalizeOuter).
Status CheckSync(AgentConfig& c) {
  if (c.staleness_max < 0 || c.staleness_max > 1000) {
    return Status::InvalidArgument("invalid --staleness-max: 0..1000");
  }
  if (c.staleness < 0) return Status::InvalidArgument("invalid --staleness: must be >= 0");
  if (c.min_peers < 0 || c.min_peers > 10000)
    return Status::InvalidArgument("invalid --min-peers: 0..10000");
  if (c.max_peers < 0 || c.max_peers > 10000)
    return Status::InvalidArgument("invalid --max-peers: 0..10000");
  if (c.max_peers > 0 && c.min_peers > c.max_peers) {
    return Status::InvalidArgument("invalid --min-peers " + std::to_string(c.min_peers) +
                                   ": more than --max-peers " + std::to_string(c.max_peers) +
                                   " (the barrier would never see that many peers)");
  }
  if (c.sample < 0) return Status::InvalidArgument("invalid --sample: must be >= 0");
  if (c.fanout < 1) return Status::InvalidArgument("invalid --fanout: must be >= 1");
  if (!c.sync_every_spec.empty()) {
    static const std::regex kSteps("[0-9]{1,6}");
    c.sync_every_auto = c.sync_every_spec == "auto";
    if (!c.sync_every_auto && !std::regex_match(c.sync_every_spec, kSteps)) {
      return Status::InvalidArgument("invalid --sync-every " + Quoted(c.sync_every_spec) +
                                     ": expected a number of steps >= 1 or auto");
    }
    c.sync_every = c.sync_every_auto ? 1 : std::stoi(c.sync_every_spec);
  }
  if (c.sync_every < 1) return Status::InvalidArgument("invalid --sync-every: must be >= 1");
  if (auto st = c.FinalizeOuter(); !st.ok()) return st;
  if (c.uplink_limit < 0 || c.downlink_limit < 0)
    return Status::InvalidArgument("invalid bandwidth limit: must be >= 0");
  if (!(c.capacity_probe_s == 0 || (c.capacity_probe_s >= 1 && c.capacity_probe_s <= 86400)))
    return Status::InvalidArgument(
        "invalid --capacity-probe-interval: must be 0 (off) or in [1, 86400] seconds");
  return Status::OK();
}

// --tag KEY=VALUE arguments into `tags`: sorted by key, unique, wire::ValidTags.
Status ParseTags(AgentConfig& c) {
  c.tags.clear();
  for (const std::string& arg : c.tag_args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument("invalid --tag " + Quoted(arg) + ": expected KEY=VALUE");
    }
    c.tags.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
  }
  std::sort(c.tags.begin(), c.tags.end());
  for (size_t i = 1; i < c.tags.size(); ++i) {
    if (c.tags[i].first == c.tags[i - 1].first) {
      return Status::InvalidArgument("invalid --tag: key " + Quoted(c.tags[i].first) +
                                     " given twice");
    }
  }
  if (!wire::ValidTags(c.tags)) {
    return Status::InvalidArgument(
        "invalid --tag: at most 8 tags; keys 1..32 bytes of [A-Za-z0-9_.-]; values up to 64 "
        "bytes of UTF-8 without control characters; 256 bytes in all");
  }
  return Status::OK();
}

}  // namespace

Status AgentConfig::Finalize() {
  for (Status (*check)(AgentConfig&) : {CheckUtf8, CheckAddresses, CheckIdentity, CheckModelAndData,
                                        CheckOptimizer, CheckSync, ParseTags}) {
    if (auto st = check(*this); !st.ok()) return st;
  }
  return Status::OK();
}

int AgentConfig::JoinFamily() const { return ResolveFamily(*wire::NetAddr::Parse(bind)); }

Status AgentConfig::ResolveAddresses() {
  const auto bind_addr = *wire::NetAddr::Parse(bind);
  const int family = JoinFamily();
  join_resolved.clear();
  std::vector<wire::NetAddr> peers;
  for (const std::string& j : join) {
    auto a = ResolveBlocking(*ParseHostPort(j), family);
    if (!a.ok()) {
      if (!retry_join) {
        return Status::InvalidArgument("--join " + Quoted(j) + ": " + a.status().message() +
                                       " (use --retry-join to keep trying)");
      }
      continue;  // the retries resolve it again
    }
    peers.push_back(*a);
  }
  std::optional<wire::NetAddr> adv;
  if (!advertise.empty()) {
    auto a = ResolveBlocking(*ParseHostPort(advertise), family);
    if (!a.ok()) return Status::InvalidArgument("--advertise: " + a.status().message());
    adv = *a;
  }
  auto chosen = ChooseAdvertise(bind_addr, adv, peers, &advertise_how);
  if (!chosen.ok()) return chosen.status();
  advertise = chosen->ToString();
  for (const wire::NetAddr& p : peers) {
    const std::string text = p.ToString();
    if (text != advertise) join_resolved.push_back(text);  // never join ourselves
  }
  return Status::OK();
}

membership::Config AgentConfig::MembershipConfig() const {
  membership::Config c = membership::Config::ForProfile(profile);
  c.name = name;
  c.addr = advertise;
  c.nat = nat;
  c.adopt_reflexive = c.nat && !advertise_given;
  c.relay_mode = relay_mode;
  if (c.relay_mode == membership::Config::RelayMode::kNamed) c.relay_name = relay_name;
  c.serve_relay = serve_relay;
  c.relay_rate_bytes_per_s = relay_rate_mbit * 1e6 / 8;
  if (probe_interval_ms > 0) c.probe_interval = probe_interval_ms;
  if (probe_timeout_ms > 0) c.probe_timeout = probe_timeout_ms;
  if (suspicion_mult > 0) c.suspicion_mult = suspicion_mult;
  if (gossip_interval_ms > 0) c.gossip_interval = gossip_interval_ms;
  if (push_pull_interval_s >= 0) {
    c.push_pull_interval = static_cast<membership::TimeMs>(push_pull_interval_s * 1000);
  }
  // A keepalive a probe interval: the relay is also probed as a member, so failing over on
  // missed keepalives happens within the suspicion timeout.
  c.relay_keepalive = c.probe_interval;
  return c;
}

std::string AgentConfig::Banner(bool encrypted) const {
  return fmt::format(
             "meshtrain agent {}\n  name:      {}\n  bind:      {}\n  advertise: {}\n  rpc:       "
             "{}\n"
             "  cluster:   {}\n  encrypted: {}\n  profile:   {}\n  task:      {}\n"
             "  barrier:   {}\n  selection: {}\n  compress:  {}, sync every {}\n",
             MESHTRAIN_VERSION_STRING, name, bind,
             advertise_how.empty() ? advertise : advertise + " (" + advertise_how + ")", rpc,
             cluster, encrypted ? "yes" : "no", NameOf(membership::kTimingProfileNames, profile),
             external_trainer() ? "external (socket " + trainer_socket + ")" : task,
             sync::PolicyName(barrier), sync::SelectPolicyName(select),
             wire::CompressName(compress),
             sync_every_auto ? std::string("auto") : std::to_string(sync_every)) +
         (http.empty() ? std::string()
                       : fmt::format("  http:      http://{}/ (dashboard), http://{}/metrics\n",
                                     http, http));
}

node::NodeConfig AgentConfig::NodeConfig(uint64_t seed, int64_t resumed_step) const {
  node::NodeConfig n;
  n.name = name;
  n.cluster = cluster;
  n.addr = advertise;
  n.data_addr = advertise;
  n.tags = tags;
  n.membership = MembershipConfig();
  n.seed = seed;
  n.training = task != "none" || external_trainer();
  n.trainer_attached = !external_trainer();  // until a trainer process attaches
  // An external trainer's peers need no final model but under the mesh-wide stop (it would be
  // taken over); the consensus averages the final models at the end.
  n.offer_final = !external_trainer() || target_accuracy > 0;
  // A node that failed while training gets as long to come back as a trainer that left.
  n.consensus_hold_ms = static_cast<node::TimeMs>(trainer_grace_s * 1000);
  // A joiner gets a small model at once (16 MB: the size up to which a trainer's snapshots are
  // new buffers anyway, daemon/trainer/external_trainer.h).
  n.keep_snapshot_floats = size_t{4} << 20;
  n.barrier.policy = barrier;
  n.barrier.staleness = static_cast<uint64_t>(staleness);
  n.barrier.sample = static_cast<size_t>(sample);
  n.barrier.r_max = static_cast<uint64_t>(staleness_max);
  n.overlap_barrier = overlap;
  // dssp and wbsp decide on every live peer; an explicit --sample makes them pdssp/pwbsp.
  if ((barrier == sync::Policy::kDssp || barrier == sync::Policy::kWbsp) && !sample_given) {
    n.barrier.sample = 0;
  }
  n.select = select;
  n.fanout = static_cast<size_t>(fanout);
  n.min_peers = static_cast<size_t>(std::max(0, min_peers));
  n.barrier.max_peers = static_cast<size_t>(std::max(0, max_peers));
  n.resumed = resumed_step >= 0;
  n.start_step = resumed_step >= 0 ? static_cast<uint64_t>(resumed_step) : 0;
  n.compress = compress;
  n.join_state = join_state;
  n.uplink_limit_mbps = uplink_limit;
  n.downlink_limit_mbps = downlink_limit;
  n.capacity_probe_interval_ms = static_cast<node::TimeMs>(capacity_probe_s * 1000);
  n.join = join_resolved;
  n.retry_join = retry_join;
  n.retry_join_interval_ms = retry_join_interval_ms;
  n.retry_join_max = retry_max;
  return n;
}

}  // namespace meshtrain::daemon
