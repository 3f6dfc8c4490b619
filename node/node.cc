#include "node/node.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

#include "node/node_internal.h"

namespace meshtrain::node {

namespace ms = ::meshtrain::membership;
using internal::IsLive;
using internal::kFrameOverheadBytes;

namespace {

const char* KindName(ms::Event::Kind k) {
  using K = ms::Event::Kind;
  switch (k) {
    case K::kJoined:
      return "joined";
    case K::kUpdated:
      return "updated";
    case K::kSuspect:
      return "suspect";
    case K::kAlive:
      return "alive again";
    case K::kFailed:
      return "failed";
    case K::kLeft:
      return "left";
    case K::kReaped:
      return "reaped";
  }
  return "?";
}

}  // namespace

Node::Node(NodeConfig config, TimeMs now)
    : config_(std::move(config)),
      // --min-peers gates the first step of a fresh run only: a node resuming from its
      // checkpoint rejoins a mesh that is already training (or finished: waiting would then be
      // forever).
      lifecycle_(!(config_.training && (config_.resumed || config_.min_peers == 0))),
      probes_(config_.capacity_probe_interval_ms, now),
      rng_(config_.seed) {
  names_ = config_.names ? config_.names : std::make_shared<sync::NameTable>();
  if (!config_.external_membership) {
    ms::Config m = config_.membership;
    m.name = config_.name;
    m.addr = config_.addr;
    swim_ = std::make_unique<ms::Swim>(m, rng_(), now);
    logged_addr_ = swim_->config().addr;
    swim_->TrackProgress(true);
  }
  progress_.step = config_.start_step;
  progress_.training = config_.training && config_.trainer_attached;
  published_step_ = config_.start_step;
  if (config_.training) {
    sync::BarrierConfig bc = config_.barrier;
    bc.probe_timeout = config_.membership.probe_timeout;
    // bsp/ssp need every peer's current step. Gossiped progress arrives about once per probe
    // interval, which would make each step wait up to a second; asking the peers directly is
    // pbsp/pssp with β >= live peers, which docs/contract.md "Barriers" defines to be exactly
    // bsp/ssp.
    if (bc.policy == sync::Policy::kBsp || bc.policy == sync::Policy::kSsp) {
      bc.policy = bc.policy == sync::Policy::kBsp ? sync::Policy::kPbsp : sync::Policy::kPssp;
      bc.sample = std::numeric_limits<size_t>::max();
    }
    // Our queries carry `need`, and a peer below it answers again when it gets there
    // (AddWatcher), so the barrier re-queries nobody who is watching for us. With every peer
    // sampled (bsp, ssp, wbsp) re-queries would ask every blocking peer each requery interval
    // while the node waits: N² queries a second over the mesh, and (each answer re-deciding
    // over every peer) N³ work. Not for dssp, whose controller needs the steps of peers below
    // s_L (a watcher answers only at need).
    if (WatchesPeers()) bc.peers_watch = true;
    barrier_ = std::make_unique<sync::BarrierCore>(bc, config_.name, names_);
  }
  bandwidth_at_ = now + config_.bandwidth_interval_ms;
}

Node::~Node() = default;

void Node::Start(TimeMs now) {
  if (swim_) {
    if (config_.training) {
      published_training_ = training();
      published_absent_ = absent();
      swim_->SetStep(progress_.step);
      SetOwnMeta(now);  // training and the bandwidth caps travel in the alive message
    } else if (!config_.tags.empty()) {
      SetOwnMeta(now);  // operator tags travel in the alive message too
    }
    if (!config_.join.empty() || config_.retry_join) {
      join_attempts_ = 1;
      if (!config_.join.empty()) swim_->Join(config_.join, now);
      if (config_.retry_join) retry_join_at_ = now + config_.retry_join_interval_ms;
    }
  }
  Pump(now, 0);
}

void Node::SetOwnMeta(TimeMs now) {
  if (!swim_) return;
  const ms::Member* self = swim_->Find(config_.name);
  ms::Meta meta = self ? self->meta : ms::Meta{};
  meta.data_addr = config_.data_addr == config_.addr ? std::string() : config_.data_addr;
  meta.training = training();
  meta.absent = absent();
  meta.tags = config_.tags;
  if (self == nullptr || (meta.uplink_mbps == 0 && meta.downlink_mbps == 0)) {
    meta.uplink_mbps = static_cast<float>(uplink_estimate_mbps());
    meta.downlink_mbps = static_cast<float>(downlink_estimate_mbps());
  }
  swim_->SetMeta(meta, now);
}

void Node::StepIn(Input& input, TimeMs now) {
  ++stats_.inputs;
  std::visit(
      [&](auto& in) {
        using T = std::decay_t<decltype(in)>;
        if constexpr (std::is_same_v<T, DatagramIn>) {
          OnDatagram(in, now);
        } else if constexpr (std::is_same_v<T, FrameIn>) {
          OnFrame(in, now);
        } else if constexpr (std::is_same_v<T, ConnClosed>) {
          OnClosed(in, now);
        } else if constexpr (std::is_same_v<T, TrainerProgress>) {
          OnTrainer(in, now);
        } else if constexpr (std::is_same_v<T, SnapshotIn>) {
          OnSnapshot(std::move(in), now);
        } else if constexpr (std::is_same_v<T, PlanResult>) {
          OnPlan(std::move(in), now);
        } else if constexpr (std::is_same_v<T, JoinCmd>) {
          OnJoin(in, now);
        } else if constexpr (std::is_same_v<T, LeaveCmd>) {
          OnLeave(now);
        } else if constexpr (std::is_same_v<T, ForceLeaveCmd>) {
          OnForceLeave(in, now);
        } else if constexpr (std::is_same_v<T, PeerView>) {
          OnPeerView(in, now);
        } else if constexpr (std::is_same_v<T, ProbeResult>) {
          if (probes_.OnResult(in, up_.estimate, now)) stats_.probes_measured++;
        } else if constexpr (std::is_same_v<T, ProbeReceived>) {
          probes_.OnReceived(in, now);
        } else if constexpr (std::is_same_v<T, ConsensusResult>) {
          OnConsensusResult(std::move(in), now);
        }
      },
      input);
}

void Node::Tick(TimeMs now) {
  ++stats_.inputs;
  if (swim_ && now >= swim_->NextDeadline()) swim_->Tick(now);
  if (now >= bandwidth_at_) {
    bandwidth_at_ = now + config_.bandwidth_interval_ms;
    UpdateBandwidth(now);
  }
  if (now >= probes_.next_at()) SendProbe(now);
  if (now >= retry_join_at_) {
    retry_join_at_ = sync::kNoDeadline;
    if (swim_ && !lifecycle_.leaving() && swim_->NumAlive() <= 1) {
      const int max = config_.retry_join_max;
      if (max > 0 && join_attempts_ >= max) {
        Emit(JoinGaveUp{join_attempts_});
      } else {
        join_attempts_++;
        Emit(LogLine{false, "retry-join: contacting the configured peers (attempt " +
                                std::to_string(join_attempts_) + ")"});
        // The driver resolves the names again and answers with JoinCmd{0, ...}.
        Emit(RetryJoin{join_attempts_, max > 0 && join_attempts_ >= max});
        retry_join_at_ = now + config_.retry_join_interval_ms;
      }
    }
  }
  if (lifecycle_.leave_pending()) {
    const TimeMs started = lifecycle_.leave_started();
    const bool others = swim_ ? swim_->NumAlive() > 1 : false;
    const bool spread = swim_ ? swim_->PendingUpdates() == 0 : true;
    // docs/contract.md "Command line": announce "left", wait up to leave_max_ms for the news to
    // spread, then exit.
    if (!others || spread || now - started >= config_.leave_max_ms) {
      lifecycle_.LeaveDone();
      Emit(LeaveDone{now - started});
    }
  }
  if (barrier_waiting_ && now >= barrier_deadline_) RunBarrier(now);
  ServeFinal(now);
  Pump(now, 0);
}

TimeMs Node::NextDeadline() const {
  TimeMs d = std::min({bandwidth_at_, retry_join_at_, probes_.next_at()});
  if (swim_) d = std::min(d, swim_->NextDeadline());
  if (barrier_waiting_) d = std::min(d, barrier_deadline_);
  if (lifecycle_.leave_pending()) d = std::min(d, lifecycle_.leave_started() + 50);
  if (lifecycle_.finished()) d = std::min(d, final_serve_at_);
  return d;
}

std::vector<Output> Node::TakeOutput() {
  std::vector<Output> out;
  out.swap(out_);
  return out;
}

void Node::TakeOutput(std::vector<Output>* out) {
  out->clear();
  out->swap(out_);
}

void Node::Reject() { stats_.rejected++; }

void Node::SendTo(std::string addr, wire::Datagram dg) {
  if (!swim_) {
    Emit(SendDatagram{std::move(addr), std::move(dg), {}, {}});
    return;
  }
  auto route = swim_->Route(addr);
  swim_->NoteSent(route ? route->via : addr);
  if (route && route->dest.empty()) {
    // A relayed member's direct return path (membership::Config::direct_ttl).
    Emit(SendDatagram{std::move(route->via), std::move(dg), {}, {}});
  } else if (route) {
    Emit(SendDatagram{std::move(addr), std::move(dg), std::move(route->via),
                      std::move(route->dest)});
  } else {
    Emit(SendDatagram{std::move(addr), std::move(dg), {}, {}});
  }
}

void Node::OnRelayFrame(const DatagramIn& in, const wire::RelayFrame& rf, TimeMs now) {
  // Frames come straight from their sender or relay: one delivered through a relay is nested.
  if (!swim_ || in.from.empty()) return Reject();
  std::string to;
  const ms::RelayVerdict v =
      swim_->OnRelayFrame(in.msg.sender, in.from, rf.dest, rf.inner.size(), now, &to);
  if (v == ms::RelayVerdict::kDeliver) {
    Emit(RelayedIn{in.msg.sender, in.from, rf.inner});
  } else if (v == ms::RelayVerdict::kForward) {
    // The inner bytes as they came, in a frame of ours: the receiver accepts frames from the
    // relay it registered with.
    wire::Datagram dg;
    dg.sender = config_.name;
    dg.body = rf;
    swim_->NoteSent(to);
    Emit(SendDatagram{std::move(to), std::move(dg), {}, {}});
  }
}

// Sends what the membership core wants sent, reports its events, and re-runs the barrier when
// membership or progress changed. `join_tag` tags new push-pulls with the join that caused them.
void Node::Pump(TimeMs now, uint64_t join_tag) {
  bool changed = false;
  if (swim_) {
    for (auto& p : swim_->TakePackets()) {
      wire::Datagram dg;
      dg.sender = config_.name;
      dg.body = std::move(p.packet);
      Emit(SendDatagram{std::move(p.to_addr), std::move(dg), std::move(p.via), std::move(p.dest)});
    }
    for (auto& pp : swim_->TakePushPulls()) StartPushPull(pp, join_tag, now);
    if (swim_->reach() != logged_reach_ || swim_->config().addr != logged_addr_) {
      // What the node found out about its reachability, once per change.
      logged_reach_ = swim_->reach();
      const bool moved = !logged_addr_.empty() && swim_->config().addr != logged_addr_;
      logged_addr_ = swim_->config().addr;
      Emit(LogLine{
          false,
          std::string("reachability: ") + ms::ReachName(logged_reach_) +
              (moved ? ", advertising " + logged_addr_ + " (where peers see this node)" : "")});
    }
    const std::string relay = swim_->relay_registered() ? swim_->relay() : std::string();
    if (relay != logged_relay_) {
      // Behind symmetric NAT, the relay this node is reached through.
      Emit(LogLine{false, relay.empty() ? "relay: none (looking for one)"
                                        : "relay: reached through " + relay + ", advertising " +
                                              swim_->config().addr});
      logged_relay_ = relay;
    }
    for (const std::string& name : swim_->TakeProgressNews()) {
      const ms::Member* m = swim_->Find(name);
      if (m != nullptr && name != config_.name) OnPeerChanged(RefOf(*m), false, now);
    }
    for (auto& ev : swim_->TakeEvents()) {
      if (ev.member.name != config_.name) {
        // The event carries a copy; the record may have changed since (and a reaped member is
        // gone: the copy says how it left).
        const ms::Member* m = swim_->Find(ev.member.name);
        PeerRef ref = RefOf(m != nullptr ? *m : ev.member);
        // A member the core no longer holds (reaped, or evicted from a bounded view while
        // alive) leaves the barrier and the candidates.
        if (m == nullptr) ref.live = ref.alive = false;
        OnPeerChanged(ref, true, now);
      }
      if (ev.kind == ms::Event::Kind::kUpdated) continue;
      changed = true;
      if (ev.kind == ms::Event::Kind::kFailed || ev.kind == ms::Event::Kind::kLeft) {
        AbortTransfersTo(ev.member.name);
      }
      if (ev.kind == ms::Event::Kind::kAlive ||
          (ev.kind == ms::Event::Kind::kJoined && fell_training_.count(ev.member.name) > 0)) {
        returned_at_[ev.member.name] = now;
      }
      if (ev.kind == ms::Event::Kind::kFailed && ev.member.meta.training) {
        fell_training_[ev.member.name] = FellTraining{now, ev.member.step, false};
      } else if (ev.kind == ms::Event::Kind::kLeft || ev.kind == ms::Event::Kind::kReaped) {
        fell_training_.erase(ev.member.name);  // it left for good, or long ago
        returned_at_.erase(ev.member.name);
      }
      if (ev.kind == ms::Event::Kind::kLeft || ev.kind == ms::Event::Kind::kReaped) {
        // Compressed-transfer references (a failed member may come back and still hold its
        // copy; one that left or was reaped starts over with a full snapshot).
        tx_refs_.erase(ev.member.name);
        rx_refs_.erase(ev.member.name);
      }
      Emit(LogLine{ev.kind == ms::Event::Kind::kFailed,
                   "member " + ev.member.name + " " + KindName(ev.kind) +
                       (ev.kind == ms::Event::Kind::kJoined ? " at " + ev.member.addr : "")});
      Emit(MemberEvent{ev.kind, std::move(ev.member)});
    }
  }
  if (changed) Emit(MembershipChanged{});
  if (changed && !lifecycle_.ready()) PublishTraining(now);
  if (changed || progress_dirty_) {
    if (barrier_waiting_) {
      progress_dirty_ = false;
      RunBarrier(now);
    } else if (early_permit_ < progress_.step + 2) {
      progress_dirty_ = false;
      TryEarlyPermit(now);
    }
  }
}

void Node::OnDatagram(DatagramIn& in, TimeMs now) {
  wire::Datagram& dg = in.msg;
  if (auto* pkt = std::get_if<ms::Packet>(&dg.body)) {
    if (!swim_) return Reject();
    swim_->HandlePacket(in.from, *pkt, now);
    progress_dirty_ = true;
  } else if (auto* rf = std::get_if<wire::RelayFrame>(&dg.body)) {
    OnRelayFrame(in, *rf, now);
  } else if (auto* q = std::get_if<wire::ProgressQuery>(&dg.body)) {
    if (swim_ && !in.from.empty()) swim_->NoteDirect(dg.sender, in.from, now);
    if (in.from.empty()) {
      // Delivered by our relay: the answer goes to the querier's advertised address (through
      // its relay, if it has one).
      // A member that learned of us first queries before we know it: nothing says where to
      // answer (a well-formed query: dropped, not counted as refused), and it asks again.
      const ms::Member* m = swim_ ? swim_->Find(dg.sender) : nullptr;
      if (m == nullptr) return;
      in.from = m->addr;
    }
    wire::Datagram reply;
    reply.sender = config_.name;
    reply.body = wire::ProgressReply{q->seq, progress_.step, training()};
    const bool below = training() && q->need > progress_.step;
    const bool watched = below && watchers_.Add(dg.sender, in.from, q->seq, q->need,
                                                barrier_ ? barrier_->view().size() : 0);
    // The query carries the querier's step: progress news, but only about a peer the barrier
    // already tracks (membership put it there as live and training, docs/contract.md "Barriers"). A
    // stranger would stay in the barrier's view, where nothing removes it.
    if (barrier_ && training()) barrier_->OnKnownProgress(dg.sender, q->step, now);
    // Where barriers watch (WatchesPeers: a mesh runs one policy) a peer below the query's
    // need answers only when it gets there. Its answer at once could not let the querier pass
    // (it is below need) and is not waited for (the round ends at the probe timeout either
    // way): at 200 nodes it was a fifth of pbsp's messages.
    if (watched && WatchesPeers()) return Pump(now, 0);
    SendTo(in.from, std::move(reply));
  } else if (auto* rep = std::get_if<wire::ProgressReply>(&dg.body)) {
    if (swim_ && !in.from.empty()) swim_->NoteDirect(dg.sender, in.from, now);
    if (!barrier_) return;
    const bool changed = rep->training
                             ? barrier_->OnReply(dg.sender, rep->seq, rep->step, now, !rep->watched)
                             : barrier_->OnPeerRemoved(dg.sender);
    if (changed) OnBarrierNews(now);
    return;
  }
  Pump(now, 0);
}

void Node::OnFrame(FrameIn& in, TimeMs now) {
  wire::Frame& f = in.msg;
  // Replies on connections this node opened.
  if (auto pull = pulls_.find(in.conn); pull != pulls_.end()) {
    auto* chunk = std::get_if<wire::ParamChunk>(&f.body);
    // A snapshot as a whole; the consensus model only from the consensus leader we asked.
    const bool consensus_ok = chunk != nullptr && chunk->consensus && config_.consensus &&
                              !consensus_.leader().empty() && f.sender == consensus_.leader();
    if (chunk == nullptr || f.sender != pull->second || chunk->base != 0 || chunk->keyed ||
        chunk->final || (chunk->consensus && !consensus_ok) || chunk->fragment) {
      Reject();
      pulls_.erase(pull);
      Emit(Close{in.conn, true});
      return;
    }
    return OnParamChunk(in.conn, f.sender, *chunk, now);
  }
  if (in.conn >= kFirstOutgoingConn) {
    if (lifecycle_.fetching_state() && in.conn == fetch_.conn()) {
      return OnStateChunk(in.conn, f, now);
    }
    if (auto pp = pushpulls_.find(in.conn); pp != pushpulls_.end()) {
      auto* msg = std::get_if<wire::PushPullMsg>(&f.body);
      if (msg == nullptr || !msg->response || pp->second->done) {
        Reject();
        Emit(Close{in.conn, true});
        return;
      }
      return OnPushPullReply(in.conn, *msg, now);
    }
    const auto* ack = std::get_if<wire::ParamAckMsg>(&f.body);
    const std::string* receiver = round_ ? round_->ReceiverOn(in.conn) : nullptr;
    if (receiver == nullptr || ack == nullptr || f.sender != *receiver ||
        ack->round != round_->id()) {
      Reject();
      DropDataConn(in.conn);
      Emit(Close{in.conn, true});
      return;
    }
    if (ack->need_full) {
      // The receiver lacks the reference this change was against: nothing was mixed, the
      // transfer is lost and the next one to it is a full snapshot.
      tx_refs_.erase(f.sender);
      FinishTransfer(in.conn, false, now);
      return;
    }
    // Delivered; the connection stays open for the next transfer to this receiver.
    FinishTransfer(in.conn, true, now);
    if (barrier_ && barrier_->OnProgress(f.sender, ack->step, now)) OnBarrierNews(now);
    return;
  }
  // Requests on accepted connections.
  if (auto* pp = std::get_if<wire::PushPullMsg>(&f.body)) {
    if (pp->response || !swim_ || serving_.count(in.conn) > 0) {
      Reject();
      Emit(Close{in.conn, true});
      return;
    }
    wire::Frame reply;
    reply.sender = config_.name;
    reply.body = wire::PushPullMsg{true, swim_->HandlePushPullRequest(pp->state, now)};
    serving_.insert(in.conn);
    Emit(SendFrame{in.conn, std::move(reply)});
    Emit(Close{in.conn, false});
    Pump(now, 0);
  } else if (auto* chunk = std::get_if<wire::ParamChunk>(&f.body)) {
    OnParamChunk(in.conn, f.sender, *chunk, now);
  } else if (std::holds_alternative<wire::StateRequestMsg>(f.body) &&
             serving_.count(in.conn) == 0) {
    serving_.insert(in.conn);
    ServeState(in.conn, f.sender);
  } else {
    Reject();
    Emit(Close{in.conn, true});
  }
}

void Node::OnClosed(const ConnClosed& in, TimeMs now) {
  serving_.erase(in.conn);
  pulls_.erase(in.conn);
  state_waiters_.erase(std::remove(state_waiters_.begin(), state_waiters_.end(), in.conn),
                       state_waiters_.end());
  if (lifecycle_.fetching_state() && in.conn == fetch_.conn()) return OnStateClosed(now);
  if (incoming_.count(in.conn) > 0) return EndIncoming(in.conn, now);
  if (auto it = pushpulls_.find(in.conn); it != pushpulls_.end()) {
    std::unique_ptr<PushPull> pp = std::move(it->second);
    pushpulls_.erase(it);
    if (!pp->done) {
      if (pp->join) {
        Emit(LogLine{true, "could not join through " + pp->addr +
                               (config_.retry_join ? " (will retry)"
                                                   : " (use --retry-join to keep trying)")});
      }
      if (swim_) swim_->PushPullFailed(pp->addr, now);
    }
    FinishJoinPart(pp->join_tag, pp->done);
    Pump(now, 0);
    return;
  }
  DropDataConn(in.conn);
  // Closed before the receiver acknowledged: the transfer on it is lost.
  if (round_ && round_->Carries(in.conn)) FinishTransfer(in.conn, false, now);
}

}  // namespace meshtrain::node
