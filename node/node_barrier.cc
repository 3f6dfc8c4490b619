// Driving the barrier for the trainer (docs/contract.md "Barriers"): checks, queries, watchers,
// early permits (OSP) and the --min-peers gate.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "node/node.h"
#include "node/node_internal.h"

namespace meshtrain::node {

namespace ms = ::meshtrain::membership;

// ---- training: barrier ----------------------------------------------------------------------

// Peers that wait for our step (their ProgressQuery.need) hear it when we get there, or that we
// stopped training: one ProgressReply each, with the seq of their query.
void Node::NotifyWatchers() {
  std::vector<Watchers::Watcher> due = watchers_.TakeDue(progress_.step, training());
  for (Watchers::Watcher& w : due) {
    wire::Datagram reply;
    reply.sender = config_.name;
    reply.body = wire::ProgressReply{w.seq, progress_.step, training(), true};
    SendTo(std::move(w.addr), std::move(reply));
  }
}

void Node::OnTrainer(const TrainerProgress& p, TimeMs now) {
  if (!config_.training) return;
  const bool step_changed = p.step != progress_.step;
  const bool eval_changed = p.eval != progress_.eval;
  progress_ = p;
  if (swim_ && step_changed) swim_->SetStep(p.step);
  if (swim_ && eval_changed) swim_->SetEval(p.eval);
  if (swim_ && p.step_ms > 0) swim_->SetStepMs(p.step_ms);
  if (!watchers_.empty() && (step_changed || !training())) NotifyWatchers();
  PublishTraining(
      now);  // peers' barriers stop waiting on us when we stop (docs/contract.md "Barriers")
  if (p.training && (p.waiting || (config_.overlap_barrier && step_changed))) {
    // With overlap a completed step starts the next Check at once, before the trainer asks:
    // it passes (and prefetches) while the trainer still holds an early permit or is on its
    // way to wait.
    barrier_waiting_ = true;
    RunBarrier(now);
  } else if (!p.training || !config_.overlap_barrier) {
    barrier_waiting_ = false;
  }
  Pump(now, 0);
}

// The median of the compute times per step that live training peers publish (their step
// intervals would not do: a barrier makes everyone's interval the straggler's). A walk over the
// view, so it is recomputed at most once a second: the mesh's pace changes slowly.
double Node::MeshStepMs(TimeMs now) {
  if (!swim_) return 0;
  if (mesh_step_at_ && now - *mesh_step_at_ < 1000) return mesh_step_ms_;
  mesh_step_at_ = now;
  std::vector<double> intervals;
  ForEachPeer([&](const PeerRef& p) {
    if (p.alive && p.training && p.step_ms > 0) intervals.push_back(p.step_ms);
  });
  mesh_step_ms_ = 0;
  if (intervals.empty()) return 0;
  auto mid = intervals.begin() + static_cast<std::ptrdiff_t>(intervals.size() / 2);
  std::nth_element(intervals.begin(), mid, intervals.end());
  mesh_step_ms_ = *mid;
  return mesh_step_ms_;
}

// Sends the barrier's queries for passing from `step` (completed steps) to step + 1.
void Node::SendBarrierQueries(uint64_t step) {
  const std::vector<sync::ProgressQuery> queries = barrier_->TakeQueries();
  if (!swim_ && queries.size() > 1) {
    // The external view's index buckets, then entries, of every receiver, requested together
    // (no effect on behaviour): with thousands of simulated nodes each lookup below is a chain
    // of cache misses, which would otherwise come one receiver after the other.
    for (const auto& q : queries) external_index_.PrefetchBucket(q.to);
    for (const auto& q : queries) {
      const size_t pos = external_index_.Probe(q.to);
      if (pos < external_.size()) __builtin_prefetch(&external_[pos]);
    }
  }
  for (const auto& q : queries) {
    const std::string* addr = PeerAddr(q.to);
    if (addr == nullptr) continue;
    wire::Datagram dg;
    dg.sender = config_.name;
    // `need`: the step this node waits for from the peer; a peer below it answers again when it
    // gets there, so the wait ends without polling (re-queries stay as the fallback).
    const uint64_t bound = barrier_->SampledBound();
    const uint64_t need = step > bound ? step - bound : 0;
    // Our own step is what we completed (a prefetch runs ahead of it, the report never does).
    dg.body = wire::ProgressQuery{q.seq, progress_.step, need};
    SendTo(*addr, std::move(dg));
  }
}

// OSP: while the trainer computes step c + 1 (permitted, not yet reported), the permit for
// c + 2 is granted as soon as what is known shows the barrier would let a node at c + 1 pass.
// Peers' progress only grows, so the bound holds when the step ends; the trainer then goes on
// without a round trip through the node for the permit (the daemon's loop thread may be busy
// with parameter transfers). The Check at the step's end still runs and opens the next episode.
void Node::TryEarlyPermit(TimeMs now) {
  if (!config_.overlap_barrier || !barrier_ || barrier_waiting_ ||
      !lifecycle_.min_peers_reached() || !training() || !lifecycle_.ready() ||
      early_permit_ >= progress_.step + 2) {
    return;
  }
  if (!barrier_->PassesAhead(progress_.step + 1)) return;
  early_permit_ = progress_.step + 2;
  ++stats_.early_permits;
  Emit(Permit{early_permit_, MeshStepMs(now)});
}

// New progress news for the barrier: a waiting Check runs again; otherwise an early permit may
// have become possible.
void Node::OnBarrierNews(TimeMs now) {
  if (barrier_waiting_) {
    RunBarrier(now);
  } else {
    TryEarlyPermit(now);
  }
}

void Node::RunBarrier(TimeMs now) {
  if (!barrier_waiting_ || !barrier_) return;
  barrier_deadline_ = sync::kNoDeadline;
  if (!lifecycle_.min_peers_reached()) {
    // --min-peers: the mesh forms before anyone trains, so no node races ahead alone.
    // A peer that already finished training means the mesh formed and trained: a node that
    // starts now (restarted at the end) does not wait for peers that will never train again.
    if (barrier_->view().size() < config_.min_peers && FinishedMaxStep() == 0) {
      // Enough live members but too few seen training: a peer's change of `training` may have
      // missed us (gossip's budget is small in a small mesh, and it went out before that peer
      // knew us); a push-pull fetches the current view instead of waiting for the periodic one.
      if (swim_ && PeersAlive() >= config_.min_peers) swim_->RequestPushPull(now);
      barrier_deadline_ = now + config_.min_peers_poll_ms;
      return;
    }
    lifecycle_.PeersReached();
    Emit(LogLine{false, std::to_string(barrier_->view().size()) +
                            " training peers alive: starting to train"});
  }
  if (!StateReady(now)) return;  // a fresh node joining a running mesh fetches its model first
  const sync::Decision d = barrier_->Check(progress_.step, now, rng_);
  SendBarrierQueries(progress_.step);
  if (d == sync::Decision::kPass) {
    barrier_waiting_ = false;
    Emit(Permit{progress_.step + 1, MeshStepMs(now)});
    if (config_.overlap_barrier) {
      // OSP: the queries for the next step go out while this one computes.
      barrier_->Prefetch(progress_.step + 1, now, rng_);
      SendBarrierQueries(progress_.step + 1);
      TryEarlyPermit(now);
    }
    return;
  }
  const sync::TimeMs deadline = barrier_->NextDeadline();
  barrier_deadline_ = deadline == sync::kNoDeadline ? now + 1000 : std::max(deadline, now + 1);
}

}  // namespace meshtrain::node
