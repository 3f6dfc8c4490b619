#include "daemon/ops/status_json.h"

#include <spdlog/spdlog.h>

#include "daemon/option_names.h"

namespace meshtrain::daemon {

using nlohmann::json;

const char* EventStatus(membership::Event::Kind kind) {
  using K = membership::Event::Kind;
  switch (kind) {
    case K::kJoined:
    case K::kAlive:
    case K::kUpdated:
      return "alive";
    case K::kSuspect:
      return "suspect";
    case K::kFailed:
      return "failed";
    case K::kLeft:
      return "left";
    case K::kReaped:
      return "reaped";
  }
  return "unknown";
}

bool RecordEvent(const node::Output& o, MetricsLog* metrics) {
  if (auto* ev = std::get_if<node::MemberEvent>(&o)) {
    if (ev->kind != membership::Event::Kind::kUpdated) {
      metrics->Write("member", {{"name", ev->member.name}, {"status", EventStatus(ev->kind)}});
    }
  } else if (auto* r = std::get_if<node::RoundDone>(&o)) {
    spdlog::debug("parameter round done: fanout {}, {} bytes on the wire, {:.3f} s", r->fanout,
                  r->bytes, r->seconds);
    metrics->Write("sync", {{"fanout", r->fanout},
                            {"bytes", r->bytes},
                            {"raw_bytes", r->raw_bytes},
                            {"seconds", r->seconds}});
  } else if (auto* log = std::get_if<node::LogLine>(&o)) {
    log->warn ? spdlog::warn("{}", log->text) : spdlog::info("{}", log->text);
  } else {
    return false;
  }
  return true;
}

json CommandReply(const node::CommandDone& done) {
  json reply = {{"ok", done.ok}};
  if (done.joined > 0 || !done.ok) reply["joined"] = done.joined;
  if (!done.error.empty()) reply["error"] = done.error;
  return reply;
}

std::vector<std::pair<std::string, std::string>> LivePeers(
    const std::vector<membership::Member>& members, const std::string& self) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& m : members) {
    if (m.name != self && m.status == membership::Status::kAlive) out.emplace_back(m.name, m.addr);
  }
  return out;
}

const char* PathName(const membership::Member& m, const std::string& self) {
  if (m.name == self) return "self";
  if (!m.meta.relay.empty()) return m.direct ? "punched" : "relayed";
  return m.meta.reach == membership::Reach::kNat ? "punched" : "direct";
}

json RobustPeerJson(const learn::PeerJudgment& p) {
  return {{"accepted", p.accepted},   {"clipped", p.clipped},
          {"refused", p.refused},     {"last_distance", p.last_distance},
          {"bad_share", p.bad_share}, {"drift", p.drift},
          {"flagged", p.flagged}};
}

void FillMixStatus(const Trainer& trainer, StatusInputs* in) {
  in->mix_chunks_dropped = trainer.MixChunksDropped();
  in->models_mixed = trainer.ModelsMixed();
  in->robust = trainer.Robust();
}

json MembersJson(const std::vector<membership::Member>& members, const std::string& self,
                 const Trainer* trainer) {
  const learn::RobustReport robust = trainer ? trainer->Robust() : learn::RobustReport{};
  json arr = json::array();
  for (const auto& m : members) {
    json tags = json::object();
    for (const auto& [key, value] : m.meta.tags) tags[key] = value;
    arr.push_back({{"name", m.name},
                   {"addr", m.addr},
                   {"status", membership::StatusName(m.status)},
                   {"incarnation", m.incarnation},
                   {"step", m.step},
                   {"accuracy", m.eval.valid() ? json(m.eval.accuracy) : json(nullptr)},
                   {"loss", m.eval.valid() ? json(m.eval.loss) : json(nullptr)},
                   {"training", m.meta.training},
                   {"absent", m.meta.absent},
                   {"uplink_mbps", m.meta.uplink_mbps},
                   {"downlink_mbps", m.meta.downlink_mbps},
                   {"reach", membership::ReachName(m.meta.reach)},
                   {"path", PathName(m, self)},
                   {"relay", m.meta.relay},
                   {"tags", tags}});
    if (robust.on) {
      const auto it = robust.peers.find(m.name);
      const bool judged = it != robust.peers.end();
      arr.back()["robust"] = judged ? RobustPeerJson(it->second) : json(nullptr);
      arr.back()["flagged"] = judged && it->second.flagged;
    }
  }
  return {{"members", arr}};
}

namespace {

// how late the loop's 20 ms tick fired (p50/p99/max over the last minute, max since
// start) and the most CPU the loop thread used between two ticks.
json LoopJson(const StatusInputs& in) {
  if (!in.loop) return nullptr;
  const LoopStats& l = *in.loop;
  return {{"lag_p50_ms", l.lag_p50_ms},
          {"lag_p99_ms", l.lag_p99_ms},
          {"lag_max_ms", l.lag_max_ms},
          {"lag_max_ever_ms", l.lag_max_ever_ms},
          {"tick_cpu_max_ms", l.tick_cpu_max_ms},
          {"ticks", l.ticks},
          {"ticks_late_50ms", l.ticks_late_50ms},
          {"model_passes", l.model_passes},
          {"model_pass_largest_floats", l.model_pass_largest}};
}

// NAT traversal and relays. `relay`: the member this node is reached through ("" =
// none) and whether it answered; the rest counts what this node relayed for others and what it
// refused, by reason.
json NatJson(const StatusInputs& in) {
  const membership::Swim* sw = in.node.swim();
  if (sw == nullptr) return nullptr;
  const membership::Stats& s = sw->stats();
  return {{"relay", sw->relay()},
          {"relay_registered", sw->relay_registered()},
          {"relay_keepalives", s.relay_keepalives},
          {"relay_failovers", s.relay_failovers},
          {"relay_delivered", s.relay_delivered},
          {"relay_clients", sw->relay_clients()},
          {"relay_registrations", s.relay_registrations},
          {"relayed_frames", s.relay_frames},
          {"relayed_bytes", s.relay_bytes},
          {"relay_refused", s.relay_refused() + in.relay_nested},
          {"relay_refused_by_reason",
           {{"not_serving", s.relay_refused_not_serving},
            {"not_member", s.relay_refused_not_member},
            {"not_registered", s.relay_refused_not_registered},
            {"loop", s.relay_refused_loop},
            {"over_rate", s.relay_refused_over_rate},
            {"nested", in.relay_nested}}},
          // Direct return paths to relayed members (membership::Config::direct_ttl):
          // membership datagrams sent on them, paths learned, paths dropped (a probe on one
          // went unanswered).
          {"direct_packets", s.direct_packets},
          {"direct_paths", s.direct_paths},
          {"direct_dropped", s.direct_dropped},
          {"punches", s.punches},
          {"reflexive_moves", s.reflexive_moves},
          // Failed probes that started no suspicion: an unconfirmed address, or a member that
          // moved while the probe was out (membership::Config::unconfirmed_grace_intervals).
          {"unconfirmed_holds", s.unconfirmed_holds},
          // Failed probes of a relayed member whose relay did not say it could not reach it
          // either (a slow relay is no dead member): held, no suspicion.
          {"relay_holds", s.relay_holds}};
}

// What was refused, by reason (rejected_by_reason); *total: their sum (rejected_packets).
json RejectedJson(const StatusInputs& in, uint64_t* total) {
  const node::Node& n = in.node;
  json rejected = json::object();
  for (size_t i = 0; i < wire::kNumRejects; ++i) {
    const auto r = static_cast<wire::Reject>(i);
    if (in.rejects.get(r) > 0) rejected[wire::RejectName(r)] = in.rejects.get(r);
  }
  if (n.stats().rejected > 0) rejected["node"] = n.stats().rejected;
  if (in.rpc_rejects > 0) rejected["rpc"] = in.rpc_rejects;
  uint64_t trainer_rejected = 0;
  for (const auto& [reason, count] : in.trainer_rejects) {
    rejected[reason] = count;
    trainer_rejected += count;
  }
  if (in.framing_errors > 0) rejected["framing"] = in.framing_errors;
  if (in.refused_connections > 0) rejected["connections_refused"] = in.refused_connections;
  if (in.probe_rejects > 0) rejected["capacity_probe"] = in.probe_rejects;
  *total = in.rejects.total() + n.stats().rejected + in.rpc_rejects + in.framing_errors +
           trainer_rejected + in.probe_rejects;
  return rejected;
}

// --trainer: its kind and, for an external one, whether a process is attached.
json TrainerJson(const StatusInputs& in) {
  const TrainerKind kind = in.external ? TrainerKind::kExternal : TrainerKind::kBuiltin;
  json trainer = {{"kind", std::string(NameOf(kTrainerNames, kind))}};
  if (in.external) {
    trainer["attached"] = in.external->attached;
    trainer["pid"] = in.external->attached ? json(in.external->pid) : json(nullptr);
    trainer["socket"] = in.external->socket;
  }
  return trainer;
}

// What the syncs mixed (an external trainer's; docs/design.md "Mixing"): `short` counts syncs
// that mixed fewer whole peer models than peers they waited for.
json SyncsJson(const TrainerState& st) {
  const SyncTally& t = st.syncs;
  return {{"count", t.count},
          {"short", t.short_of},
          {"timeouts", t.timeouts},
          {"partial", t.partial},
          {"unsent", t.unsent},
          {"publish_wait_s", t.publish_wait_s},
          {"wait_s", t.wait_s},
          {"last", {{"waited", t.last_waited}, {"mixed", t.last_mixed}, {"models", t.last_models}}},
          {"drift", st.drift},
          {"configured", st.configured}};
}

// The end-of-training consensus: one model for every finished node.
json ConsensusJson(const StatusInputs& in, const TrainerState& st) {
  const auto& s = in.node.stats();
  return {{"state", node::ConsensusPhaseName(in.node.consensus().state)},
          {"leader", in.node.consensus().leader},
          {"participants", in.node.consensus().participants},
          {"models", st.consensus_models},
          {"crc32", st.consensus_crc32},
          // Behind NAT: requests for the consensus model made (a participant behind NAT pulls
          // it) and answered with it (the leader).
          {"pulls", s.consensus_pulls},
          {"pulls_served", s.consensus_pulls_served},
          // Live members left out: their trainer left before it finished and stayed away past
          // --trainer-grace.
          {"left_out", in.node.consensus().left_out},
          // Members that failed while training: the consensus waits up to --trainer-grace for
          // them to come back.
          {"awaiting", in.node.consensus().awaiting}};
}

// Link-capacity probes (docs/contract.md "Receiver selection"): trains sent and measured, and
// the estimates (MB/s) this node publishes as its uplink_mbps/downlink_mbps.
json ProbesJson(const StatusInputs& in) {
  const node::Node& n = in.node;
  return {{"sent", n.stats().probes_sent},
          {"measured", n.stats().probes_measured},
          {"answered", in.probe_trains_answered},
          {"contended", in.probe_trains_contended},
          {"queued", in.probe_trains_queued},
          {"uplink_mbps", n.uplink_estimate_mbps()},
          {"downlink_mbps", n.downlink_estimate_mbps()}};
}

// Robust mixing (learn/robust_mix.h): on, the radius, and per judged sender its tallies;
// "flagged" lists the senders flagged now.
json RobustJson(const learn::RobustReport& r) {
  json peers = json::object(), flagged = json::array();
  uint64_t clipped = 0, refused = 0;
  for (const auto& [name, p] : r.peers) {
    peers[name] = RobustPeerJson(p);
    clipped += p.clipped;
    refused += p.refused;
    if (p.flagged) flagged.push_back(name);
  }
  return {{"on", r.on},         {"radius", r.radius}, {"clipped", clipped},
          {"refused", refused}, {"flagged", flagged}, {"peers", peers}};
}

}  // namespace

json StatusJson(const StatusInputs& in) {
  const node::Node& n = in.node;
  const TrainerState st = in.trainer.value_or(TrainerState{});
  const bool has_trainer = in.trainer.has_value();
  uint64_t rejected_total = 0;
  const json rejected = RejectedJson(in, &rejected_total);
  const auto& s = n.stats();
  const membership::Stats ms = n.MembershipStats();
  return {{"name", in.config.name},
          {"trainer", TrainerJson(in)},
          {"membership",
           {{"probes", ms.probes},
            {"suspicions_raised", ms.suspicions_raised},
            {"refutations", ms.refutations},
            {"failures_declared", ms.failures_declared}}},
          {"step", st.step},
          {"loss", st.loss ? json(*st.loss) : json(nullptr)},
          {"accuracy", st.accuracy ? json(*st.accuracy) : json(nullptr)},
          // --eval-average: the decay of the averaged model that loss/accuracy measure (0: the
          // parameters as trained)
          {"eval_average", in.config.eval_average},
          {"training", has_trainer && st.training},
          // An external trainer left before it finished and none came back in --trainer-grace.
          {"trainer_absent", has_trainer && st.absent},
          {"train_loss", st.train_loss},
          {"params_received", s.params_received},
          {"params_crc32", st.params_crc32},
          {"params", n.config().expected_params},  // floats a model (transfer) has; 0 = unknown
          {"rounds", s.rounds},
          {"barrier", sync::PolicyName(in.config.barrier)},
          {"select", sync::SelectPolicyName(in.config.select)},
          {"peers_alive", n.PeersAlive()},
          {"barrier_wait_s", n.BarrierWaitSeconds(in.now)},
          // --max-peers; barrier_peers = training peers barriers may wait for
          {"max_peers", in.config.max_peers},
          {"barrier_peers", n.barrier() ? n.barrier()->view().size() : 0},
          {"observers", n.barrier() ? json(n.barrier()->observers()) : json::array()},
          // where the time goes (compute includes wbsp's local steps)
          {"compute_s", st.compute_s},
          {"idle_s", st.idle_s},
          {"early_permits", s.early_permits},  // OSP: permits that came before their step ended
          {"compute_share", st.train_s > 0 ? std::min(1.0, st.compute_s / st.train_s) : 0.0},
          {"steps_per_s",
           st.train_s > 0 ? static_cast<double>(st.step - st.start_step) / st.train_s : 0.0},
          {"local_steps", st.local_steps},
          {"batch", st.batch},
          {"lr", st.lr},
          {"bytes_sent", in.bytes_sent},
          {"bytes_received", in.bytes_received},
          {"mean_fanout", s.rounds ? static_cast<double>(s.fanout_sum) / s.rounds : 0.0},
          {"compress", wire::CompressName(in.config.compress)},
          {"sync_every", has_trainer ? st.sync_every : in.config.sync_every},
          {"outer", learn::OuterStep::Name(has_trainer ? st.outer : in.config.outer)},
          {"outer_lr", has_trainer ? st.outer_lr : in.config.outer_lr},
          {"outer_momentum", has_trainer ? st.outer_momentum : in.config.outer_momentum},
          {"fragments", has_trainer ? st.fragments : in.config.fragments},
          {"outer_steps", st.outer_steps},
          {"syncs", SyncsJson(st)},
          {"consensus", ConsensusJson(in, st)},
          {"params_bytes_sent", s.params_bytes_sent},
          {"params_bytes_raw", s.params_bytes_raw},
          {"compression_ratio",
           s.params_bytes_sent > 0
               ? static_cast<double>(s.params_bytes_raw) / static_cast<double>(s.params_bytes_sent)
               : 1.0},
          {"params_need_full", s.params_need_full},
          {"capacity_probes", ProbesJson(in)},
          {"rejected_packets", rejected_total},
          {"rejected_by_reason", rejected},
          {"health_score", n.HealthScore()},
          {"incarnation", n.Incarnation()},
          {"advertise", n.AdvertisedAddr()},
          {"reach", membership::ReachName(n.Reach())},
          {"nat", NatJson(in)},
          {"uptime_s", in.uptime_s},
          {"loop", LoopJson(in)},
          {"param_streams",
           {{"active", in.streams_active},
            {"chunks_encoded", in.chunks_encoded},
            {"chunks_sent", in.chunks_sent},
            {"mix_chunks_dropped", in.mix_chunks_dropped},
            {"models_mixed", in.models_mixed},
            {"read_pauses", in.read_pauses}}},
          {"robust", RobustJson(in.robust)}};
}

}  // namespace meshtrain::daemon
