// Elastic meshes: join with state, and finished nodes serving their final model.
//
// Join with state. A node about to take its first step (fresh, or resumed from a checkpoint) that,
// once its --min-peers are there, sees every live training peer further on asks the most advanced
// one for its model
// (StateRequest on a parameter connection; the peer answers with the chunks of its newest full
// snapshot and closes). The node adopts the model and the step of the slowest live training peer
// (so no bsp/ssp barrier of anyone waits for it, and its own barrier starts where the mesh is),
// and only then permits its first step. If the peer has no model, the transfer fails or takes
// longer than join_state_timeout_ms (join_state_answer_ms once a peer was asked: it answers with
// its next snapshot, a sync interval of an external trainer away), the node starts from its own
// initialisation, as the first nodes of a mesh do.
//
// Final models. A node that finished training (--target-accuracy or --steps) counts as finished
// in every barrier (its metadata says training: false), and offers its final model to the peers
// still training (config offer_final): once to each, checked every final_serve_interval_ms
// (200 ms) for peers that started training since or whose transfer failed. The last nodes mix
// with it (progress-aware, see learn/mixing.h) instead of finishing alone on their shards.
#include <algorithm>

#include "node/node.h"
#include "node/node_internal.h"

namespace meshtrain::node {

// Joining: a node behind every live training peer (fresh at step 0, or resumed from an older
// checkpoint) holds back "training" while it fetches, while such a peer is known (it fetches once
// its --min-peers are there), and, when it was given peers to join, until it knows any: so that
// nobody's barrier waits for a node that is about to take over the mesh's model and step.
bool Node::Joining() const {
  if (lifecycle_.ready() || !config_.join_state) return false;
  if (lifecycle_.fetching_state()) return true;
  // An upper bound: exact, unless a peer's step went down (it restarted from an older
  // checkpoint) while it held the largest; then we hold back until that peer leaves the set.
  if (MeshLeadStep() > progress_.step + config_.join_state_min_lead) return true;
  const size_t peers = swim_ ? swim_->NumMembers() - 1 : external_.size();
  return peers == 0 && !config_.join.empty();
}

uint64_t Node::PeersMaxStep() const {
  if (peers_max_stale_) {
    peers_max_step_ = 0;
    ForEachPeer([&](const PeerRef& p) {
      if (p.alive && p.training) peers_max_step_ = std::max(peers_max_step_, p.step);
    });
    peers_max_stale_ = false;
  }
  return peers_max_step_;
}

uint64_t Node::FinishedMaxStep() const {
  if (finished_max_stale_) {
    finished_max_step_ = 0;
    ForEachPeer([&](const PeerRef& p) {
      if (FinishedPeer(p)) finished_max_step_ = std::max(finished_max_step_, p.step);
    });
    finished_max_stale_ = false;
  }
  return finished_max_step_;
}

void Node::PublishTraining(TimeMs now) {
  const bool t = training();
  const bool a = absent();
  if (t == published_training_ && a == published_absent_) return;
  if (a != published_absent_) {
    Emit(LogLine{a, a ? "no trainer within the grace period: the end-of-training consensus "
                        "goes on without this node"
                      : "a trainer is back: this node takes part in the consensus again"});
  }
  published_training_ = t;
  published_absent_ = a;
  SetOwnMeta(now);
}

// Before the first step: fetch the most advanced live peer's model when every live training peer
// is further on than we are ("whichever is newer": a resumed node keeps its checkpoint unless the
// mesh has moved past it), adopting the slowest peer's step (never below our own).
bool Node::StateReady(TimeMs now) {
  if (lifecycle_.ready()) return true;
  if (!lifecycle_.fetching_state()) {
    auto keep_own = [&] {
      lifecycle_.Started();
      PublishTraining(now);
      return true;
    };
    if (!config_.join_state) return keep_own();
    fetch_.Arm(now, config_.join_state_timeout_ms);
    if (now < fetch_.retry_at()) {  // the last attempt failed; another one shortly
      barrier_deadline_ = fetch_.retry_at();
      return false;
    }
    // Nobody is further on than the lead (the usual case: a fresh mesh): no walk needed.
    if ((config_.join.empty() || now >= fetch_.deadline()) &&
        MeshLeadStep() <= progress_.step + config_.join_state_min_lead) {
      return keep_own();
    }
    StateFetch::Choice choice;
    ForEachPeer([&](const PeerRef& p) {
      if (p.alive && p.training) choice.Consider(*p.name, *p.data_addr, p.step, p.step_known);
    });
    if (choice.best.empty()) {
      // Nobody trains any more (we restarted as the mesh finished): the finished peers' model
      // and step; our trainer finishes there and joins the consensus.
      // One that closed on us (the consensus leader, waiting for our final model as a
      // participant's) is asked again only when no other is there.
      for (const bool retry_closed : {false, true}) {
        ForEachPeer([&](const PeerRef& p) {
          if (!FinishedPeer(p) || fetch_.ClosedOnUs(*p.name) != retry_closed) return;
          choice.Consider(*p.name, *p.data_addr, p.step, p.step_known);
        });
        if (!choice.best.empty()) break;
      }
    }
    // Still joining: learn the mesh first. Members told of by gossip before the join's state
    // exchange (e.g. in a ping from a peer that still suspects a restarted node) have no step
    // yet: 0 would read as "the mesh is not ahead", and a restarted node would go on from its
    // checkpoint instead of the mesh's newer model.
    if ((choice.best.empty() || !choice.any_step_known) && !config_.join.empty() &&
        now < fetch_.deadline()) {
      barrier_deadline_ = now + config_.min_peers_poll_ms;
      return false;
    }
    if (choice.best.empty() || choice.best_step <= progress_.step + config_.join_state_min_lead) {
      return keep_own();  // we are not behind
    }
    lifecycle_.BeginFetch();
    fetch_.Begin(next_conn_++, choice, progress_.step, now, config_.join_state_answer_ms);
    Emit(LogLine{false, "joining a running mesh: fetching the model of " + choice.best + " (step " +
                            std::to_string(choice.best_step) + "), continuing after step " +
                            std::to_string(fetch_.adopt_step())});
    Emit(Connect{fetch_.conn(), choice.best_addr});
    wire::Frame f;
    f.sender = config_.name;
    f.body = wire::StateRequestMsg{progress_.step};
    Emit(SendFrame{fetch_.conn(), std::move(f)});
  }
  if (now >= fetch_.deadline()) {
    Emit(LogLine{true, "no model from " + fetch_.from() + " in time: going on with our own"});
    Emit(Close{fetch_.conn(), true});
    lifecycle_.Started();
    PublishTraining(now);
    return true;
  }
  barrier_deadline_ = fetch_.deadline();
  return false;
}

void Node::OnStateChunk(ConnId conn, wire::Frame& f, TimeMs now) {
  auto* chunk = std::get_if<wire::ParamChunk>(&f.body);
  const bool ok = chunk != nullptr && f.sender == fetch_.from() && wire::ExpandChunk(chunk) &&
                  chunk->base == 0 &&
                  (config_.expected_params == 0 || chunk->total == config_.expected_params);
  if (!ok) {
    Reject();
    Emit(Close{conn, true});
    return;  // OnStateClosed falls back
  }
  auto model = fetch_.Add(*chunk);
  if (!model) return;
  lifecycle_.Started();
  Emit(Close{conn, false});
  Emit(LogLine{false, "adopted the model of " + fetch_.from() + " (its step " +
                          std::to_string(model->step) + "); first step " +
                          std::to_string(fetch_.adopt_step() + 1)});
  progress_.step = fetch_.adopt_step();
  if (swim_) swim_->SetStep(progress_.step);
  PublishTraining(now);
  Emit(AdoptState{fetch_.from(), fetch_.adopt_step(), std::move(model->params)});
  if (barrier_waiting_) RunBarrier(now);
}

void Node::OnStateClosed(TimeMs now) {
  if (!lifecycle_.fetching_state()) return;
  if (fetch_.Closed(now)) {
    // E.g. the peer still holds us for failed (we restarted under the same name): ask again,
    // maybe another peer, until the deadline.
    lifecycle_.RetryFetch();
    if (barrier_waiting_) barrier_deadline_ = fetch_.retry_at();
    return;
  }
  Emit(LogLine{true, "could not fetch the model of " + fetch_.from() + ": going on with our own"});
  lifecycle_.Started();
  PublishTraining(now);
  if (barrier_waiting_) RunBarrier(now);
}

// A peer asks for our model (on a connection it opened): the newest snapshot, whole. Between
// rounds the node holds no snapshot larger than keep_snapshot_floats (the trainer reuses its
// buffer): the request then waits for the next one, which comes within a sync interval.
void Node::ServeState(ConnId conn, const std::string& from) {
  // Any member we know (a node restarted under its name may still be "failed" here).
  const bool known = swim_ ? swim_->Find(from) != nullptr : FindExternal(from) != nullptr;
  if (!known || (!latest_ && !config_.training)) {
    Emit(Close{conn, false});
    return;
  }
  // The end-of-training consensus: a participant behind NAT asks its leader for the
  // consensus model. Answered with it once it is ready; closed before (not our final model:
  // that is no consensus, and the participant asks again).
  // A spectator (a finished member that took no step of its own) asks the same way.
  const Consensus& cs = consensus_;
  const auto spectator = [&] {
    const auto p = FindPeer(from);
    return p && p->live && !p->training && p->step == 0;
  };
  if (config_.consensus && lifecycle_.finished() && cs.leader() == config_.name &&
      (std::binary_search(cs.participants().begin(), cs.participants().end(), from) ||
       spectator())) {
    if (cs.result() && cs.result_from() == config_.name) {
      SendParams answer;
      answer.conn = conn;
      answer.sender = config_.name;
      answer.params = cs.result();
      answer.round = 1;
      answer.step = latest_step_;
      answer.chunk_floats = std::clamp<uint32_t>(config_.chunk_floats, 1, wire::kParamChunkFloats);
      answer.consensus = true;
      answer.covers = cs.result_covers();
      Emit(std::move(answer));
      stats_.consensus_pulls_served++;
    }
    Emit(Close{conn, false});
    return;
  }
  if (latest_) return SendState(conn);
  constexpr size_t kMaxStateWaiters = 16;
  if (state_waiters_.size() >= kMaxStateWaiters) {
    Emit(Close{conn, false});
    state_waiters_.erase(state_waiters_.begin());
  }
  state_waiters_.push_back(conn);
}

void Node::SendState(ConnId conn) {
  Emit(SendParams{conn, config_.name, latest_, 1, latest_step_, false, wire::CompressSpec{},
                  std::clamp<uint32_t>(config_.chunk_floats, 1, wire::kParamChunkFloats)});
  Emit(Close{conn, false});
}

void Node::ServeFinal(TimeMs now) {
  if (!lifecycle_.finished() || now < final_serve_at_) return;
  final_serve_at_ = now + config_.final_serve_interval_ms;
  if (Candidates().empty()) return RunConsensus(now);  // nobody trains any more
  if (!config_.offer_final || !latest_ || pending_ || round_ || awaiting_plan_ != 0 ||
      lifecycle_.leaving()) {
    return;
  }
  // Each final model once to each peer still training (a transfer that failed is tried again).
  std::vector<std::string> due;
  for (const std::string& name : PushCandidates()) {
    if (!consensus_.Offered(name, latest_.get())) due.push_back(name);
  }
  if (due.empty()) return;
  pending_ = SnapshotIn{latest_step_, latest_, true, {}};
  SendRound(std::move(due), now);
}

}  // namespace meshtrain::node
