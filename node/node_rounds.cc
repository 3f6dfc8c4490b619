// Parameter multicast rounds (docs/contract.md "Barriers", "Receiver selection"): receiver choice
// (all, random, the shared SELMCAST plan), chunked transfers acknowledged by ParamAck, and
// reassembly of what peers send.
#include <algorithm>
#include <cstdio>
#include <random>

#include "node/node.h"
#include "node/node_internal.h"

namespace meshtrain::node {

namespace ms = ::meshtrain::membership;
using internal::kFrameOverheadBytes;
using internal::StableHash;

// ---- training: parameter rounds ---------------------------------------------------------------

void Node::OnSnapshot(SnapshotIn s, TimeMs now) {
  if (!config_.training || !s.params) return;
  latest_ = s.params;
  latest_step_ = s.step;
  if (s.final && lifecycle_.Finish()) {
    final_serve_at_ = now + config_.final_serve_interval_ms;
  }
  for (ConnId conn : state_waiters_) SendState(conn);
  state_waiters_.clear();
  // Peers still training do not need a final model (config offer_final off): it is kept for the
  // consensus, and a snapshot still to send goes out as it is.
  if (s.final && !config_.offer_final) return;
  pending_ = std::move(s);
  StartRound(now);
}

// SELMCAST plans are global: every node computes the whole assignment and keeps its own row. So
// that nodes with the same view build the same plan, the plan's RNG is seeded from the cluster
// view and a logical epoch — the slowest live training node's step divided by plan_epoch_steps —
// which every node learns from gossip, with no clock agreement between hosts. The plan is cached
// per (epoch, view) and changes with the epoch (ties randomized per epoch).
//
// The slowest step is the barrier's: its view holds every live training peer's step as this node
// knows it (membership's, or fresher from queries and acknowledgements), with the minimum kept
// in O(1). Without a barrier (or with --max-peers, whose observers it leaves out) one walk.
uint64_t Node::PlanEpoch() const {
  uint64_t min_step = progress_.step;
  if (barrier_ && barrier_->config().max_peers == 0) {
    if (auto m = barrier_->view().MinStep()) min_step = std::min(min_step, *m);
  } else {
    ForEachPeer([&](const PeerRef& p) {
      if (p.alive && p.training) min_step = std::min(min_step, p.step);
    });
  }
  return min_step / std::max<uint64_t>(1, config_.plan_epoch_steps);
}

const std::string* Node::PeerAddr(const std::string& name) const {
  if (name == config_.name) return nullptr;
  if (swim_) {
    const ms::Member* m = swim_->Find(name);
    return m == nullptr ? nullptr : &m->addr;
  }
  const ExternalPeer* v = FindExternal(name);
  return v == nullptr ? nullptr : &AddrOf(*v);
}

bool Node::PeerLive(const std::string& name) const {
  if (swim_) {
    const ms::Member* m = swim_->Find(name);
    return m != nullptr && name != config_.name && internal::IsLive(m->status);
  }
  const ExternalPeer* v = FindExternal(name);
  return v != nullptr && v->alive;
}

const Node::ExternalPeer* Node::FindExternal(const std::string& name) const {
  const size_t pos = external_index_.Find(
      name, [this](size_t i) -> const std::string& { return NameOf(external_[i]); });
  return pos == sync::NameIndex::kNone ? nullptr : &external_[pos];
}

const std::vector<std::string>& Node::Candidates() {
  if (candidates_stale_) {
    candidates_.clear();
    push_candidates_.clear();
    ForEachPeer([&](const PeerRef& p) {
      if (!p.alive || !p.training) return;
      candidates_.push_back(*p.name);
      if (!p.nat) push_candidates_.push_back(*p.name);
    });
    std::sort(candidates_.begin(), candidates_.end());  // independent of the hash order
    std::sort(push_candidates_.begin(), push_candidates_.end());
    candidates_stale_ = false;
  }
  return candidates_;
}

const std::vector<std::string>& Node::PushCandidates() {
  Candidates();
  return push_candidates_;
}

// `fanout` distinct candidates, uniformly (sync::Select's kRandom, drawn by index: Select copies
// its candidates into a set per call, which costs more than the rest of a round in large views).
std::vector<std::string> Node::RandomReceivers(const std::vector<std::string>& candidates) {
  const size_t n = candidates.size();
  const size_t k = std::min(config_.fanout, n);
  std::vector<size_t> picked;
  picked.reserve(k);
  if (2 * k > n) {
    std::vector<size_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = i;
    for (size_t i = 0; i < k; ++i) {
      std::swap(idx[i], idx[std::uniform_int_distribution<size_t>(i, n - 1)(rng_)]);
      picked.push_back(idx[i]);
    }
  } else {
    while (picked.size() < k) {
      const size_t c = std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
      if (std::find(picked.begin(), picked.end(), c) == picked.end()) picked.push_back(c);
    }
  }
  std::vector<std::string> out;
  out.reserve(k);
  for (size_t i : picked) out.push_back(candidates[i]);
  return out;
}

std::vector<std::string> Node::SampleExternal() {
  std::vector<std::string> out;
  const size_t n = external_.size();
  if (n == 0 || 2 * external_eligible_ < n) return out;
  const size_t k = std::min(config_.fanout, external_eligible_);
  std::vector<size_t> picked;
  picked.reserve(k);
  // At most 3n draws (memberlist): with at least half the view eligible, about 2k suffice.
  for (size_t draws = 0; picked.size() < k && draws < 3 * n; ++draws) {
    const size_t c = std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
    ++stats_.peer_visits;
    const ExternalPeer& v = external_[c];
    if (!v.alive || !v.training) continue;
    if (std::find(picked.begin(), picked.end(), c) == picked.end()) picked.push_back(c);
  }
  if (picked.size() < k) return out;
  out.reserve(k);
  for (size_t i : picked) out.push_back(NameOf(external_[i]));
  return out;
}

void Node::MaybePull() {
  if (!swim_ || !pulls_.empty() || lifecycle_.leaving() || swim_->reach() != ms::Reach::kNat)
    return;
  std::vector<std::pair<std::string, std::string>> reachable;  // (name, data address)
  ForEachPeer([&](const PeerRef& p) {
    if (!p.alive || !p.training) return;
    const ms::Member* m = swim_->Find(*p.name);
    if (m != nullptr && m->meta.reach != ms::Reach::kNat)
      reachable.emplace_back(*p.name, *p.data_addr);
  });
  if (reachable.empty()) return;
  std::sort(reachable.begin(), reachable.end());
  const auto& [name, addr] =
      reachable[std::uniform_int_distribution<size_t>(0, reachable.size() - 1)(rng_)];
  PullFrom(name, addr);
}

void Node::PullFrom(const std::string& name, const std::string& addr) {
  const ConnId conn = next_conn_++;
  pulls_[conn] = name;
  // A pulled snapshot is always round 1 (SendState), and so is a pulled consensus model: what
  // came before from this peer is no older round of it.
  in_streams_.erase(name);
  assemblers_.erase(name);
  Emit(Connect{conn, addr});
  wire::Frame f;
  f.sender = config_.name;
  f.body = wire::StateRequestMsg{progress_.step};
  Emit(SendFrame{conn, std::move(f)});
}

void Node::StartRound(TimeMs now) {
  if (pending_ && !lifecycle_.leaving()) MaybePull();
  if (!pending_ || round_ || awaiting_plan_ != 0 || lifecycle_.leaving()) return;
  if (!swim_ && !pending_->final && config_.select == sync::SelectPolicy::kRandom) {
    if (external_eligible_ == 0) {
      pending_.reset();
      return ReleaseSnapshot();
    }
    std::vector<std::string> receivers = SampleExternal();
    if (!receivers.empty()) return SendRound(std::move(receivers), now);
  }
  if (pending_->final || config_.select != sync::SelectPolicy::kSelmcast) {
    // all and random need no bandwidth view. Members behind NAT are no receivers (they pull).
    const std::vector<std::string>& candidates = PushCandidates();
    if (candidates.empty()) {
      pending_.reset();
      return ReleaseSnapshot();
    }
    if (pending_->final || config_.select == sync::SelectPolicy::kAll) {
      return SendRound(candidates, now);
    }
    return SendRound(RandomReceivers(candidates), now);
  }
  // The sender is part of the global plan, with the figures its peers see (published ones).
  const ms::Member* self = swim_ ? swim_->Find(config_.name) : nullptr;
  const sync::NodeBandwidth own =
      self ? sync::NodeBandwidth{self->meta.uplink_mbps, self->meta.downlink_mbps, 0}
           : sync::NodeBandwidth{static_cast<float>(uplink_estimate_mbps()),
                                 static_cast<float>(downlink_estimate_mbps()), 0};
  PlanView& pv = plan_view_;
  if (pv.version != peers_version_ || pv.self_up != own.uplink_mbps ||
      pv.self_down != own.downlink_mbps) {
    // Membership or a published figure changed since the last round: one walk.
    pv.version = peers_version_;
    pv.self_up = own.uplink_mbps;
    pv.self_down = own.downlink_mbps;
    pv.candidates.clear();
    pv.bw.clear();
    ForEachPeer([&](const PeerRef& p) {
      // A member behind NAT is no receiver (nothing can connect to it: it pulls, MaybePull),
      // so the plan spends no sender's fanout or uplink on it. Its own plan has it as a
      // sender to the others.
      if (!p.alive || !p.training || p.nat) return;
      pv.bw[*p.name] = sync::NodeBandwidth{p.uplink_mbps, p.downlink_mbps, 0};
      pv.candidates.push_back(*p.name);
    });
    std::sort(pv.candidates.begin(), pv.candidates.end());
    pv.text.clear();
    if (!pv.candidates.empty()) {
      pv.bw[config_.name] = own;
      for (const auto& [name, b] : pv.bw) {  // std::map: sorted, so the text is canonical
        char buf[64];
        std::snprintf(buf, sizeof(buf), "=%.3g/%.3g;", b.uplink_mbps, b.downlink_mbps);
        pv.text += name;
        pv.text += buf;
      }
    }
    pv.hash = StableHash(pv.text);
  }
  if (pv.candidates.empty()) {
    pending_.reset();
    return ReleaseSnapshot();
  }
  const uint64_t epoch = PlanEpoch();
  if (epoch == plan_cache_.epoch && pv.hash == plan_cache_.view_hash) {
    return SendRound(plan_cache_.receivers, now);
  }
  PlanRequest req;
  req.id = next_plan_++;
  req.self = config_.name;
  req.candidates = pv.candidates;
  req.bandwidth = pv.bw;
  req.fanout = config_.fanout;
  req.seed = StableHash(pv.text, epoch * 0x9E3779B97F4A7C15ULL ^ StableHash(config_.cluster));
  awaiting_plan_ = req.id;
  awaiting_epoch_ = epoch;
  awaiting_hash_ = pv.hash;
  Emit(std::move(req));
}

void Node::OnPlan(PlanResult p, TimeMs now) {
  if (p.id != awaiting_plan_ || awaiting_plan_ == 0) return;
  awaiting_plan_ = 0;
  plan_cache_.epoch = awaiting_epoch_;
  plan_cache_.view_hash = awaiting_hash_;
  // Receivers that died while the plan was being solved are left out.
  std::vector<std::string> live;
  for (auto& r : p.receivers) {
    auto peer = FindPeer(r);
    if (peer && peer->alive && peer->training) live.push_back(r);
  }
  plan_cache_.receivers = std::move(p.receivers);
  if (live.empty()) {
    pending_.reset();
    return ReleaseSnapshot();
  }
  SendRound(std::move(live), now);
}

void Node::SendRound(std::vector<std::string> receivers, TimeMs now, bool consensus) {
  if (swim_ && !receivers.empty()) {
    // Nothing can open a connection to a member behind NAT; it pulls (MaybePull).
    receivers.erase(std::remove_if(receivers.begin(), receivers.end(),
                                   [&](const std::string& name) {
                                     const ms::Member* m = swim_->Find(name);
                                     return m != nullptr && m->meta.reach == ms::Reach::kNat;
                                   }),
                    receivers.end());
    if (receivers.empty() && pending_) {
      pending_.reset();
      return ReleaseSnapshot();
    }
  }
  if (receivers.empty() || !pending_) return;
  SnapshotIn snap = std::move(*pending_);
  pending_.reset();
  const std::vector<float>& params = *snap.params;
  if (params.empty() || params.size() > UINT32_MAX) return ReleaseSnapshot();
  const uint64_t id = next_round_++;
  const auto total = static_cast<uint32_t>(params.size());
  // none, fp16, int8 and sparse stream one shared snapshot, chunk by chunk, the same bytes to every
  // receiver (SendParams); top-k transfers are keyed per receiver (the change since what it
  // acknowledged last), so they are encoded per receiver, whole.
  // The consensus model goes as plain floats: every node ends with the leader's exact bytes.
  const wire::CompressSpec spec = consensus ? wire::CompressSpec{} : config_.compress;
  const bool streamed = wire::Streamable(spec);
  const uint32_t chunk_floats =
      std::clamp<uint32_t>(config_.chunk_floats, 1, wire::kParamChunkFloats);
  // A fragment (streaming fragments) of a streamed transfer; the whole model otherwise.
  wire::StreamSpan span;
  if (streamed && !consensus && !snap.final && snap.span.end > snap.span.begin &&
      snap.span.end <= total && (snap.span.begin != 0 || snap.span.end != total)) {
    span = snap.span;
  }
  const uint32_t floats = span.end != 0 ? span.end - span.begin : total;
  const uint64_t chunks = wire::StreamChunks(total, chunk_floats, span);
  // The bytes the chunks will put on the wire (a sparse chunk's size depends on its values).
  const uint64_t stream_bytes =
      streamed ? wire::StreamWireBytes(params.data(), total, spec, chunk_floats, span) +
                     chunks * kFrameOverheadBytes
               : 0;
  round_ = std::make_unique<Round>(
      id, now, uint64_t{floats} * sizeof(float) + chunks * kFrameOverheadBytes, consensus);
  if (snap.final && !consensus) round_->CarriesFinal(snap.params.get());
  up_.Begin(now);
  for (const auto& name : receivers) {
    auto peer = FindPeer(name);
    if (!peer) continue;
    const ConnId conn = DataConnTo(name, *peer->data_addr);
    Round::Transfer t;
    t.receiver = name;
    // The transfer ends when the receiver acknowledges the whole snapshot (ParamAck); a
    // connection closed before that (refused, aborted, timed out) loses it.
    if (streamed) {
      t.wire_bytes = stream_bytes;
      Emit(SendParams{conn, config_.name, snap.params, id, snap.step, snap.final, spec,
                      chunk_floats, consensus, span, consensus ? consensus_.result_covers() : 0});
    } else {
      for (auto& c : EncodeFor(name, params, id, snap.step, &t)) {
        c.final = snap.final;
        c.keyed = true;
        t.wire_bytes += wire::ChunkWireBytes(c) + kFrameOverheadBytes;
        wire::Frame f;
        f.sender = config_.name;
        f.body = std::move(c);
        Emit(SendFrame{conn, std::move(f)});
      }
    }
    round_->Add(conn, std::move(t));
  }
  if (round_->done()) {
    up_.End(now, 0);
    round_.reset();
    ReleaseSnapshot();
  }
}

void Node::ReleaseSnapshot() {
  if (lifecycle_.finished() || pending_ || round_) return;
  if (latest_ && latest_->size() <= config_.keep_snapshot_floats) return;  // a joiner's answer
  latest_.reset();
}

// A compressed transfer to `name`: the change since the reference it acknowledged last, or a full
// snapshot when it has none (new receiver, lost state) or after full_every changes (so that any
// drift between the two copies stays bounded). Top-k sends its full snapshots as int8.
std::vector<wire::ParamChunk> Node::EncodeFor(const std::string& name,
                                              const std::vector<float>& params, uint64_t round,
                                              uint64_t step, Round::Transfer* t) {
  auto ref = tx_refs_.find(name);
  const bool full = ref == tx_refs_.end() || ref->second.since_full >= config_.full_every ||
                    ref->second.values->size() != params.size();
  wire::CompressSpec spec = config_.compress;
  if (full && spec.kind == wire::Encoding::kTopK) spec.kind = wire::Encoding::kInt8;
  std::vector<float> values = params;
  if (!full) {
    const std::vector<float>& base = *ref->second.values;
    for (size_t i = 0; i < values.size(); ++i) values[i] -= base[i];
  }
  auto enc = wire::EncodeTransfer(values, spec, round, step, full ? 0 : ref->second.round,
                                  config_.chunk_floats);
  if (!full) {
    const std::vector<float>& base = *ref->second.values;
    for (size_t i = 0; i < enc.decoded.size(); ++i) enc.decoded[i] += base[i];
  }
  t->full = full;
  t->new_ref = std::make_shared<const std::vector<float>>(std::move(enc.decoded));
  return std::move(enc.chunks);
}

void Node::FinishTransfer(ConnId conn, bool ok, TimeMs now) {
  Round::Transfer t = round_->End(conn, ok);
  if (ok) {
    stats_.params_bytes_sent += t.wire_bytes;
    stats_.params_bytes_raw += round_->raw_per_rx();
    if (round_->consensus()) consensus_.Acked(t.receiver);
    if (round_->final_of()) {
      consensus_.FinalDelivered(t.receiver, round_->final_of(), round_->to_leader(), now);
    }
    if (t.new_ref) {
      const auto old = tx_refs_.find(t.receiver);
      const uint32_t since = t.full || old == tx_refs_.end() ? 0 : old->second.since_full + 1;
      tx_refs_[t.receiver] = Reference{round_->id(), since, std::move(t.new_ref)};
    }
  }
  if (!round_->done()) return;
  up_.End(now, round_->bytes());
  stats_.rounds++;
  stats_.fanout_sum += static_cast<uint64_t>(round_->delivered());
  Emit(round_->Summary(now));
  round_.reset();
  StartRound(now);
  ReleaseSnapshot();
}

// A transfer to a member that failed or left is abandoned at once, so the next round (and with
// it the rest of the mesh) does not wait for a TCP timeout (docs/contract.md "Barriers": no
// stalls). The driver answers the abort with ConnClosed, which ends the transfer.
void Node::AbortTransfersTo(const std::string& name) {
  const std::optional<ConnId> open = data_conns_.Find(name);
  if (!open) return;
  const ConnId conn = *open;
  if (round_ && round_->Carries(conn)) {
    Emit(LogLine{false, "abandoning the parameter transfer to " + name});
  }
  DropDataConn(conn);
  Emit(Close{conn, true});
}

ConnId Node::DataConnTo(const std::string& name, const std::string& addr) {
  if (auto open = data_conns_.Use(name, next_round_)) return *open;
  // At the limit: close the least recently used connection with no transfer on it.
  const auto busy = [&](ConnId c) { return round_ && round_->Carries(c); };
  if (auto old = data_conns_.EvictIdle(busy)) Emit(Close{*old, false});
  const ConnId conn = next_conn_++;
  data_conns_.Add(name, conn, next_round_);
  Emit(Connect{conn, addr});
  return conn;
}

void Node::EndIncoming(ConnId conn, TimeMs now) {
  auto it = incoming_.find(conn);
  if (it == incoming_.end()) return;
  down_.End(now, it->second);
  incoming_.erase(it);
}

void Node::DropDataConn(ConnId conn) { data_conns_.Drop(conn); }

void Node::OnParamChunk(ConnId conn, const std::string& sender, wire::ParamChunk& chunk,
                        TimeMs now) {
  const bool size_ok = config_.expected_params == 0 || chunk.total == config_.expected_params;
  // The codec checks chunks (and expands all but int8 ones); a simulated network hands them over
  // as built, so check here too (at once when the codec did).
  if (!config_.training || !size_ok || !PeerLive(sender) || !wire::CheckChunk(&chunk)) {
    // Parameters only from live members of this mesh, for a model of our size.
    Reject();
    Emit(Close{conn, true});
    return;
  }
  auto [it, fresh] = incoming_.try_emplace(conn, 0);
  if (fresh) down_.Begin(now);
  it->second += (chunk.wire_bytes != 0 ? chunk.wire_bytes : chunk.data.size() * sizeof(float)) +
                kFrameOverheadBytes;
  const bool streamed = !chunk.keyed && chunk.base == 0 && !chunk.final && !chunk.consensus;
  if (chunk.fragment && !streamed) {  // fragments are streamed full values, never more
    Reject();
    Emit(Close{conn, true});
    return;
  }
  if (streamed) {
    if (!OnStreamChunk(conn, sender, chunk, now)) {
      Reject();
      Emit(Close{conn, true});
    }
    return;
  }
  const uint64_t chunk_round = chunk.round;
  if (!wire::ExpandChunk(&chunk)) {  // an assembled model is floats (int8 came compact)
    Reject();
    Emit(Close{conn, true});
    return;
  }
  auto model = assemblers_[sender].Add(chunk);
  if (!model) return;
  if (model->base != 0) {
    // A change against the last snapshot we acknowledged to this sender: add it to our copy.
    auto ref = rx_refs_.find(sender);
    if (ref == rx_refs_.end() || ref->second.round != model->base ||
        ref->second.values->size() != model->params.size()) {
      stats_.params_need_full++;
      rx_refs_.erase(sender);
      EndIncoming(conn, now);
      wire::Frame ack;  // the sender's round for this receiver ends with this
      ack.sender = config_.name;
      ack.body = wire::ParamAckMsg{chunk_round, progress_.step, true};
      Emit(SendFrame{conn, std::move(ack)});
      return;
    }
    const std::vector<float>& base = *ref->second.values;
    for (size_t i = 0; i < base.size(); ++i) model->params[i] += base[i];
  }
  if (model->keyed) {
    rx_refs_[sender] =
        Reference{chunk_round, 0, std::make_shared<const std::vector<float>>(model->params)};
  }
  CompleteIncoming(conn, sender, chunk_round, model->step, now);
  // The end-of-training consensus: a finished node keeps its finished peers' final models
  // (the leader averages them), and the consensus model replaces ours.
  if ((model->consensus || (model->final && lifecycle_.finished())) &&
      OnConsensusModel(sender, model->consensus, model->covers, &model->params, now)) {
    return;
  }
  // A finished peer's model reached its goal however few steps it took: it mixes at full weight
  // (the step it carries is ours at least), so the last nodes converge with the finished ones.
  // The chunks say so (ParamChunk::final), or membership already knows the sender stopped.
  auto peer = FindPeer(sender);
  const bool finished = model->final || (peer && !peer->training);
  const uint64_t weight_step = finished ? std::max(model->step, progress_.step) : model->step;
  Emit(Mix{sender, weight_step, std::move(model->params), finished, model->final, model->step});
}

// A streamed transfer's chunk is mixed as it comes (MixChunk); the transfer is acknowledged when
// every chunk has come. As ParamAssembler: a newer round discards an unfinished older one, chunk
// 0 of an older round starts a new transfer (the sender restarted), other chunks of older
// rounds, duplicates and chunks whose geometry disagrees with their round's first are ignored.
bool Node::OnStreamChunk(ConnId conn, const std::string& sender, wire::ParamChunk& c, TimeMs now) {
  // The codec checked 0 < chunks <= total and the slice; a chunk count beyond what the largest
  // chunks need for `total` would only make the bitmap below large.
  // A fragment's chunks cover part of the model (streaming fragments): mixed per coordinate.
  if (uint64_t{c.chunks} > uint64_t{c.total} ||
      (!c.fragment && uint64_t{c.chunks} * wire::kParamChunkFloats < c.total) ||
      c.chunks > (1u << 24)) {
    return false;
  }
  InStream& s = in_streams_[sender];
  if (c.round < s.round && c.chunk != 0) return true;
  if (c.round != s.round || s.chunks == 0) {
    s = InStream{c.round, c.chunks, c.total, 0, std::vector<bool>(c.chunks, false)};
  }
  if (c.chunks != s.chunks || c.total != s.total || s.got == s.chunks || s.seen[c.chunk]) {
    return true;
  }
  s.seen[c.chunk] = true;
  s.got++;
  const bool complete = s.got == s.chunks;
  if (complete) s.seen = std::vector<bool>();  // the round stays recorded: late duplicates
  auto peer = FindPeer(sender);
  const bool finished = peer && !peer->training;
  const uint64_t weight_step = finished ? std::max(c.step, progress_.step) : c.step;
  const uint64_t round = c.round, step = c.step;
  MixChunk m{sender,
             round,
             weight_step,
             finished,
             c.total,
             c.offset,
             std::move(c.data),
             std::move(c.q),
             std::move(c.scales),
             std::move(c.held)};
  m.last = complete;
  Emit(std::move(m));
  if (complete) CompleteIncoming(conn, sender, round, step, now);
  return true;
}

void Node::CompleteIncoming(ConnId conn, const std::string& sender, uint64_t round, uint64_t step,
                            TimeMs now) {
  stats_.params_received++;
  EndIncoming(conn, now);  // the sender's next transfer may use this connection again
  if (pulls_.count(conn) > 0) {
    // A snapshot we asked for: the peer closes after it, nothing to acknowledge.
    pulls_.erase(conn);
    Emit(Close{conn, false});
    Emit(ParamsReceived{sender, step});
    if (barrier_->OnProgress(sender, step, now)) OnBarrierNews(now);
    return;
  }
  wire::Frame ack;  // the sender's round for this receiver ends with this
  ack.sender = config_.name;
  ack.body = wire::ParamAckMsg{round, progress_.step};
  Emit(SendFrame{conn, std::move(ack)});
  Emit(ParamsReceived{sender, step});
  if (barrier_->OnProgress(sender, step, now)) OnBarrierNews(now);
}

}  // namespace meshtrain::node
