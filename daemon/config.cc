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
  learn::OuterStep::Kind kind;
  if (!learn::OuterStep::ParseKind(outer, &kind)) {
    return Status::InvalidArgument("invalid --outer " + Quoted(outer) +
                                   ": expected avg, sgd or nesterov");
  }
  const bool nesterov = kind == learn::OuterStep::Kind::kNesterov;
  if (kind == learn::OuterStep::Kind::kAvg && (outer_lr != 0 || outer_momentum != -1)) {
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
    if (compress.rfind("topk", 0) == 0) {
      return Status::InvalidArgument("--fragments does not go with --compress topk");
    }
  }
  if (kind != learn::OuterStep::Kind::kAvg && external_trainer()) {
    return Status::InvalidArgument(
        "--outer applies to the built-in trainer (an external trainer takes the outer step "
        "itself: MeshOptimizer(outer=...) in meshtrain.torch)");
  }
  return Status::OK();
}

Status AgentConfig::Finalize() {
  // Strings that end up in names, labels and addresses, on the wire and in JSON: valid UTF-8
  // first (issue 20), then their own syntax below.
  for (const auto& [flag, value] :
       std::initializer_list<std::pair<const char*, const std::string*>>{
           {"--name", &name},
           {"--bind", &bind},
           {"--advertise", &advertise},
           {"--rpc", &rpc},
           {"--rpc-token", &rpc_token},
           {"--cluster", &cluster},
           {"--profile", &profile}}) {
    if (!wire::ValidUtf8(*value))
      return Status::InvalidArgument(std::string("invalid ") + flag + ": not valid UTF-8");
  }
  for (const auto& j : join) {
    if (!wire::ValidUtf8(j))
      return Status::InvalidArgument("invalid --join " + Quoted(j) + ": not valid UTF-8");
  }
  auto bind_addr = wire::NetAddr::Parse(bind);
  if (!bind_addr)
    return Status::InvalidArgument("invalid --bind " + Quoted(bind) +
                                   ": expected IP:PORT, e.g. 0.0.0.0:7950 or [::]:7950");
  if (bind_addr->port() == 0)
    return Status::InvalidArgument("invalid --bind " + Quoted(bind) + ": port 0 is not allowed");
  if (nat != "auto" && nat != "off") {
    return Status::InvalidArgument("invalid --nat " + Quoted(nat) + ": auto or off");
  }
  if (relay.empty() || (relay != "auto" && relay != "off" && !wire::ValidNodeName(relay))) {
    return Status::InvalidArgument("invalid --relay " + Quoted(relay) +
                                   ": auto, off or a member's name");
  }
  if (serve_relay != "on" && serve_relay != "off") {
    return Status::InvalidArgument("invalid --serve-relay " + Quoted(serve_relay) + ": on or off");
  }
  if (!(relay_rate_mbit >= 0) || !std::isfinite(relay_rate_mbit)) {
    return Status::InvalidArgument("invalid --relay-rate: a rate in Mbit/s >= 0 (0 = no cap)");
  }
  advertise_given = !advertise.empty();
  if (!advertise.empty()) {
    auto adv = ParseHostPort(advertise);
    if (!adv.ok()) {
      return Status::InvalidArgument("invalid --advertise " + Quoted(advertise) + ": " +
                                     adv.status().message());
    }
    const auto literal = wire::NetAddr::Parse(advertise);
    if (literal && literal->IsAny()) {
      return Status::InvalidArgument("invalid --advertise " + Quoted(advertise) +
                                     ": a wildcard address cannot be reached; give this host's "
                                     "address");
    }
  }
  if (!wire::NetAddr::Parse(rpc))
    return Status::InvalidArgument("invalid --rpc " + Quoted(rpc) + ": expected IP:PORT");
  if (!http.empty() && !wire::NetAddr::Parse(http)) {
    return Status::InvalidArgument("invalid --http " + Quoted(http) + ": expected IP:PORT");
  }
  for (auto& j : join) {
    if (auto hp = ParseHostPort(j); !hp.ok()) {
      return Status::InvalidArgument("invalid --join " + Quoted(j) + ": " + hp.status().message());
    }
  }
  if (auto ms = ParseDurationMs(retry_interval); !ms || *ms < 100 || *ms > 86400000) {
    return Status::InvalidArgument("invalid --retry-interval " + Quoted(retry_interval) +
                                   ": expected a duration from 100ms to 24h, e.g. 30s");
  } else {
    retry_join_interval_ms = *ms;
  }
  if (retry_max < 0) return Status::InvalidArgument("invalid --retry-max: must be >= 0");
  if (!std::isfinite(test_clock_offset_s) || std::fabs(test_clock_offset_s) > 1e6) {
    return Status::InvalidArgument("invalid --test-clock-offset: at most 1e6 seconds either way");
  }
  if (name.empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "node");
    name = std::string(host) + "-" + std::to_string(bind_addr->port());
  }
  static const std::regex kName("[A-Za-z0-9._-]{1,64}");
  if (!std::regex_match(name, kName)) {
    return Status::InvalidArgument("invalid --name " + Quoted(name) +
                                   ": use 1-64 characters of [A-Za-z0-9._-]");
  }
  if (!membership::Config::Profile(profile)) {
    return Status::InvalidArgument("invalid --profile " + Quoted(profile) +
                                   ": expected lan, wan or local");
  }
  if (!wire::ValidClusterLabel(cluster)) {
    return Status::InvalidArgument(
        "invalid --cluster: 1-64 bytes of UTF-8 without control characters");
  }
  if (!model.empty()) {
    const auto& presets = learn::TaskNames();
    if (model != "none" && std::find(presets.begin(), presets.end(), model) == presets.end()) {
      if (auto spec = learn::ParseModelSpec(model); !spec.ok()) {
        return Status::InvalidArgument("invalid --model " + Quoted(model) + ": " +
                                       spec.status().message());
      }
    }
    task = model;
  } else if (!OneOf(task, {"none", "synthetic", "fmnist-softmax", "fmnist-mlp", "fmnist-cnn"})) {
    return Status::InvalidArgument(
        "invalid --task " + Quoted(task) +
        ": expected none, synthetic, fmnist-softmax, fmnist-mlp or fmnist-cnn (or use --model "
        "with a layer spec)");
  }
  if (!OneOf(trainer, {"builtin", "external"})) {
    return Status::InvalidArgument("invalid --trainer " + Quoted(trainer) +
                                   ": expected builtin or external");
  }
  if (external_trainer()) {
    if (trainer_socket.empty()) {
      trainer_socket =
          data_dir.empty() ? "/run/meshtrain/" + name + ".sock" : data_dir + "/trainer.sock";
    }
    // sockaddr_un.sun_path holds 108 bytes with the terminating NUL.
    if (trainer_socket.size() > 107) {
      return Status::InvalidArgument("invalid --trainer-socket: a path of at most 107 bytes");
    }
  } else if (!trainer_socket.empty()) {
    return Status::InvalidArgument("--trainer-socket needs --trainer external");
  }
  if (!(trainer_timeout_s >= 0.1 && trainer_timeout_s <= 86400)) {
    return Status::InvalidArgument("invalid --trainer-timeout: 0.1..86400 seconds");
  }
  if (threads < 1 || threads > 64) {
    return Status::InvalidArgument("invalid --threads " + std::to_string(threads) + ": 1..64");
  }
  if (!input_shape.empty()) {
    if (auto shape = learn::ParseInputShape(input_shape); !shape.ok()) {
      return Status::InvalidArgument("invalid --input-shape: " + shape.status().message());
    }
  }
  if (train_data.empty() && !test_data.empty()) {
    return Status::InvalidArgument("--test-data needs --train-data");
  }
  if (!train_data.empty() && task == "synthetic") {
    return Status::InvalidArgument("--train-data does not apply to the synthetic task");
  }
  if (!OneOf(barrier, {"bsp", "ssp", "asp", "pbsp", "pssp", "dssp", "wbsp"})) {
    return Status::InvalidArgument("invalid --barrier " + Quoted(barrier) +
                                   ": expected bsp, ssp, asp, pbsp, pssp, dssp or wbsp");
  }
  if (!OneOf(overlap, {"on", "off"})) {
    return Status::InvalidArgument("invalid --overlap " + Quoted(overlap) + ": expected on or off");
  }
  if (staleness_max < 0 || staleness_max > 1000) {
    return Status::InvalidArgument("invalid --staleness-max: 0..1000");
  }
  if (!OneOf(select, {"all", "random", "selmcast"})) {
    return Status::InvalidArgument("invalid --select " + Quoted(select) +
                                   ": expected all, random or selmcast");
  }
  if (!batch_spec.empty()) {
    static const std::regex kBatch("[0-9]{1,6}");
    if (batch_spec == "auto") {
      batch_auto = true;
    } else if (std::regex_match(batch_spec, kBatch)) {
      batch = std::stoi(batch_spec);
    } else {
      return Status::InvalidArgument("invalid --batch " + Quoted(batch_spec) +
                                     ": expected a number or auto");
    }
  }
  if (batch < 1 || batch > 65536) return Status::InvalidArgument("invalid --batch: 1..65536");
  if (!(lr > 0 && lr < 100)) return Status::InvalidArgument("invalid --lr: must be > 0");
  if (!(momentum >= 0 && momentum < 1))
    return Status::InvalidArgument("invalid --momentum: must be in [0, 1)");
  if (!(target_accuracy >= 0 && target_accuracy <= 1)) {
    return Status::InvalidArgument("invalid --target-accuracy: must be in [0, 1]");
  }
  if (eval_every < 1) return Status::InvalidArgument("invalid --eval-every: must be >= 1");
  if (!(eval_average >= 0 && eval_average < 1)) {
    return Status::InvalidArgument("invalid --eval-average: a decay in [0, 1), e.g. 0.98");
  }
  if (eval_average > 0 && external_trainer()) {
    return Status::InvalidArgument(
        "--eval-average applies to the built-in trainer (an external trainer evaluates its own "
        "model)");
  }
  if (checkpoint_every < 1)
    return Status::InvalidArgument("invalid --checkpoint-every: must be >= 1");
  if (staleness < 0) return Status::InvalidArgument("invalid --staleness: must be >= 0");
  if (min_peers < 0 || min_peers > 10000)
    return Status::InvalidArgument("invalid --min-peers: 0..10000");
  if (max_peers < 0 || max_peers > 10000)
    return Status::InvalidArgument("invalid --max-peers: 0..10000");
  if (max_peers > 0 && min_peers > max_peers) {
    return Status::InvalidArgument("invalid --min-peers " + std::to_string(min_peers) +
                                   ": more than --max-peers " + std::to_string(max_peers) +
                                   " (the barrier would never see that many peers)");
  }
  if (sample < 0) return Status::InvalidArgument("invalid --sample: must be >= 0");
  if (fanout < 1) return Status::InvalidArgument("invalid --fanout: must be >= 1");
  if (!sync_every_spec.empty()) {
    static const std::regex kSteps("[0-9]{1,6}");
    sync_every_auto = sync_every_spec == "auto";
    if (!sync_every_auto && !std::regex_match(sync_every_spec, kSteps)) {
      return Status::InvalidArgument("invalid --sync-every " + Quoted(sync_every_spec) +
                                     ": expected a number of steps >= 1 or auto");
    }
    sync_every = sync_every_auto ? 1 : std::stoi(sync_every_spec);
  }
  if (sync_every < 1) return Status::InvalidArgument("invalid --sync-every: must be >= 1");
  if (auto st = FinalizeOuter(); !st.ok()) return st;
  if (auto c = wire::ParseCompress(compress); !c.ok()) return c.status();
  if (!OneOf(join_state, {"on", "off"})) {
    return Status::InvalidArgument("invalid --join-state " + Quoted(join_state) +
                                   ": expected on or off");
  }
  if (uplink_limit < 0 || downlink_limit < 0)
    return Status::InvalidArgument("invalid bandwidth limit: must be >= 0");
  if (!(capacity_probe_s == 0 || (capacity_probe_s >= 1 && capacity_probe_s <= 86400)))
    return Status::InvalidArgument(
        "invalid --capacity-probe-interval: must be 0 (off) or in [1, 86400] seconds");
  if (!(slowdown >= 1 && slowdown <= 1000))
    return Status::InvalidArgument("invalid --slowdown: must be in [1, 1000]");
  if (!shard.empty()) {
    static const std::regex kShard("([0-9]{1,6})/([0-9]{1,6})");
    std::smatch m;
    if (!std::regex_match(shard, m, kShard) || std::stoi(m[1]) >= std::stoi(m[2])) {
      return Status::InvalidArgument("invalid --shard " + Quoted(shard) +
                                     ": expected I/N with 0 <= I < N");
    }
  }
  if (auto mode = learn::ParseShardMode(shard_mode); !mode.ok()) {
    return Status::InvalidArgument("invalid " + mode.status().message());
  }
  if (probe_interval_ms == 0 || probe_timeout_ms == 0 || gossip_interval_ms == 0) {
    return Status::InvalidArgument("timing overrides must be positive");
  }
  if (!OneOf(log_level, {"trace", "debug", "info", "warn", "error", "critical", "off"})) {
    return Status::InvalidArgument("invalid --log-level " + Quoted(log_level));
  }
  tags.clear();
  for (const std::string& arg : tag_args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument("invalid --tag " + Quoted(arg) + ": expected KEY=VALUE");
    }
    tags.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
  }
  std::sort(tags.begin(), tags.end());
  for (size_t i = 1; i < tags.size(); ++i) {
    if (tags[i].first == tags[i - 1].first) {
      return Status::InvalidArgument("invalid --tag: key " + Quoted(tags[i].first) +
                                     " given twice");
    }
  }
  if (!wire::ValidTags(tags)) {
    return Status::InvalidArgument(
        "invalid --tag: at most 8 tags; keys 1..32 bytes of [A-Za-z0-9_.-]; values up to 64 "
        "bytes of UTF-8 without control characters; 256 bytes in all");
  }
  if (!OneOf(log_format, {"text", "json"})) {
    return Status::InvalidArgument("invalid --log-format " + Quoted(log_format) +
                                   ": expected text or json");
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
  membership::Config c = *membership::Config::Profile(profile);
  c.name = name;
  c.addr = advertise;
  c.nat = nat == "auto";
  c.adopt_reflexive = c.nat && !advertise_given;
  using RelayMode = membership::Config::RelayMode;
  c.relay_mode = relay == "off"    ? RelayMode::kOff
                 : relay == "auto" ? RelayMode::kAuto
                                   : RelayMode::kNamed;
  if (c.relay_mode == RelayMode::kNamed) c.relay_name = relay;
  c.serve_relay = serve_relay == "on";
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
             cluster, encrypted ? "yes" : "no", profile,
             external_trainer() ? "external (socket " + trainer_socket + ")" : task, barrier,
             select, compress, sync_every_auto ? std::string("auto") : std::to_string(sync_every)) +
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
  n.barrier.policy = *sync::ParsePolicy(barrier);
  n.barrier.staleness = static_cast<uint64_t>(staleness);
  n.barrier.sample = static_cast<size_t>(sample);
  n.barrier.r_max = static_cast<uint64_t>(staleness_max);
  n.overlap_barrier = overlap == "on";
  // dssp and wbsp decide on every live peer; an explicit --sample makes them pdssp/pwbsp.
  if ((barrier == "dssp" || barrier == "wbsp") && !sample_given) n.barrier.sample = 0;
  n.select = *sync::ParseSelectPolicy(select);
  n.fanout = static_cast<size_t>(fanout);
  n.min_peers = static_cast<size_t>(std::max(0, min_peers));
  n.barrier.max_peers = static_cast<size_t>(std::max(0, max_peers));
  n.resumed = resumed_step >= 0;
  n.start_step = resumed_step >= 0 ? static_cast<uint64_t>(resumed_step) : 0;
  n.compress = *wire::ParseCompress(compress);
  n.join_state = join_state == "on";
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
