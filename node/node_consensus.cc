// One model at the end of training. While peers still train, a finished node offers
// them its final model (node_state.cc, ServeFinal). Once no live member trains any more, the
// finished nodes — the participants: live members that stopped training after at least one step,
// and this node — agree on one model:
//   1. The leader is the participant with the smallest name among those not behind NAT
//      (docs/design.md "NAT and relays"; the smallest of all when every one is). Every other
//      participant sends it its final model (a final transfer, compressed as configured) until
//      it holds a consensus model from that leader.
//   2. The leader, once it holds every participant's final model (its own included), asks the
//      driver for their plain average (ConsensusReduce: equal weights, off the event loop).
//   3. It adopts the average (AdoptConsensus) and sends it, as plain floats, to every
//      participant that has not acknowledged it yet; each adopts it bit for bit. A participant
//      behind NAT, which nothing can connect to, asks the leader for it instead, on a connection
//      it opens (a state request the leader answers with the consensus model once it has one).
// A participant that fails leaves the view: the leader reduces over the rest (a result that
// covers every participant still alive stays valid). A leader that fails is replaced by the next
// name: it serves the result it holds, or collects and reduces anew, and everyone adopts the
// new leader's model. So every live participant ends with the same bytes after one reduce per
// leader failure. Every step is repeated after consensus_retry_ms until it is acknowledged.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "node/node.h"
#include "node/node_internal.h"

namespace meshtrain::node {

// A participant's trainer gets a result whose leader averaged fewer participants than our view
// counts (provisional) as final after this long, should the views never agree.
constexpr TimeMs kSettleGiveUpMs = 30000;

bool Node::ConsensusParticipants(TimeMs now) {
  if (!config_.consensus || !config_.training || !lifecycle_.finished() || !latest_ ||
      lifecycle_.leaving()) {
    return false;
  }
  if (!Candidates().empty()) return false;  // peers still train: ServeFinal offers them our model
  if (ConsensusHeld(now)) return false;     // a peer that failed while training may come back
  // A suspected peer that trains is no candidate (it leaves the sampled barriers too), but it is
  // no participant yet either: it is alive again in a moment, or it is declared failed and then
  // held for as ConsensusHeld says.
  bool suspect_training = false;
  ForEachPeer([&](const PeerRef& p) { suspect_training |= p.live && !p.alive && p.training; });
  if (suspect_training) return false;
  // Participants: live members that stopped training after at least one step, by the same rule
  // for ourselves as for our peers (a node that took a final model over before its first step
  // is a spectator: every view leaves it out, and it pulls the result).
  const bool spectator = progress_.step == 0;
  std::vector<std::string> parts;
  std::set<std::string> natted;
  if (!spectator) {
    parts.push_back(config_.name);
    if (swim_ && swim_->reach() == ms::Reach::kNat) natted.insert(config_.name);
  }
  consensus_left_out_.clear();
  ForEachPeer([&](const PeerRef& p) {
    if (!p.live || p.training || p.step == 0) return;
    if (p.absent) {  // its trainer is gone past the grace: we go on without it
      consensus_left_out_.push_back(*p.name);
      return;
    }
    parts.push_back(*p.name);
    if (p.nat) natted.insert(*p.name);
  });
  if (parts.empty()) return false;  // a spectator with nobody who trained: it keeps its model
  std::sort(parts.begin(), parts.end());
  std::sort(consensus_left_out_.begin(), consensus_left_out_.end());
  consensus_.SetParticipants(std::move(parts), std::move(natted), spectator, now);
  return true;
}

bool Node::ConsensusHeld(TimeMs now) {
  bool held = false;
  for (auto it = fell_training_.begin(); it != fell_training_.end();) {
    const std::string& name = it->first;
    FellTraining& f = it->second;
    const std::optional<PeerRef> p = FindPeer(name);
    // Back (training again, or further than it failed at: it resumed and finished), or gone
    // past the trainer's grace (Meta::absent, its own agent says so).
    const bool back = p && p->live && (p->training || p->step > f.step || p->absent);
    if (back || now - f.at >= config_.consensus_hold_ms) {
      if (!back && f.logged) {
        Emit(LogLine{true, "consensus: " + name + " did not come back within " +
                               std::to_string(config_.consensus_hold_ms / 1000) +
                               " s: going on without it"});
      }
      it = fell_training_.erase(it);
      continue;
    }
    if (!f.logged) {
      f.logged = true;
      Emit(LogLine{false, "consensus: waiting up to " +
                              std::to_string((f.at + config_.consensus_hold_ms - now) / 1000) +
                              " s for " + name + ", which failed while training at step " +
                              std::to_string(f.step)});
    }
    held = true;
    ++it;
  }
  return held;
}

void Node::RunConsensus(TimeMs now) {
  Consensus& cs = consensus_;
  if (!ConsensusParticipants(now)) return;
  const std::string leader = cs.leader();
  const size_t parts = cs.participants().size();
  if (leader != config_.name) {
    // A participant: the leader's consensus model (it may have come before our view agreed
    // that everyone finished), else our final model to the leader until it comes.
    // The trainer hears of a result at once (its final model), and once more when it settles.
    if (auto result = cs.AdoptOffer()) {
      const bool settled = cs.TakeSettled(now, kSettleGiveUpMs);
      Emit(AdoptConsensus{leader, std::move(result), parts, settled});
    } else if (cs.TakeSettled(now, kSettleGiveUpMs)) {
      Emit(AdoptConsensus{leader, cs.result(), parts, true});
    }
    if (cs.Settled()) return;
    if (pulls_.empty() && cs.PullDue(config_.name, now)) {
      // Behind NAT the leader cannot push the result to us, and to a spectator it does not:
      // we ask for it (it closes until it has one), and again while the one we hold averages
      // fewer participants than our view counts. A participant's final model goes to it as
      // below.
      if (auto peer = FindPeer(leader)) {
        cs.Pulled(now + config_.consensus_retry_ms);
        stats_.consensus_pulls++;
        PullFrom(leader, *peer->data_addr);
      }
    }
    // A provisional result (Settled) came from the leader, so our final model is with it: the
    // leader pushes its next result, or we pull it.
    if (cs.HasLeadersResult() || cs.spectator() || round_ || pending_ || !cs.SendDue(now)) return;
    // Once: the leader acknowledged this final model (again only after a long while, in case
    // it restarted and lost it).
    if (cs.Delivered(leader, latest_.get(), now, internal::kFinalResendMs)) return;
    cs.Sent(now + config_.consensus_retry_ms);
    pending_ = SnapshotIn{latest_step_, latest_, true, {}};
    SendRound({leader}, now);
    if (round_) round_->CarriesFinal(latest_.get(), /*to_leader=*/true);
    return;
  }
  // The leader. A result that covers every live participant stands; otherwise reduce anew.
  if (cs.ResultStands()) {
    std::vector<std::string> due = cs.Serve(config_.name);  // (those behind NAT pull it)
    if (due.empty() || round_ || pending_ || !cs.SendDue(now)) return;
    cs.Sent(now + config_.consensus_retry_ms);
    pending_ = SnapshotIn{latest_step_, cs.result(), true, {}};
    return SendRound(std::move(due), now, true);
  }
  if (cs.reducing()) return;
  std::optional<ConsensusReduce> req = cs.Reduce(config_.name, latest_);
  if (!req) return;  // still waiting for a participant's model
  Emit(LogLine{false,
               "consensus: averaging the final models of " + std::to_string(parts) + " nodes"});
  Emit(std::move(*req));
}

void Node::OnConsensusResult(ConsensusResult r, TimeMs now) {
  auto result = consensus_.OnReduced(std::move(r), latest_, config_.name, now);
  if (!result) return;
  Emit(AdoptConsensus{config_.name, std::move(result), consensus_.reduced_over()});
  RunConsensus(now);
}

bool Node::OnConsensusModel(const std::string& sender, bool consensus, uint32_t covers,
                            std::vector<float>* params, TimeMs now) {
  if (!config_.consensus) return false;
  auto model = std::make_shared<const std::vector<float>>(std::move(*params));
  if (!consensus) {  // a finished peer's final model, kept for the reduce
    consensus_.OnFinal(sender, std::move(model));
  } else {
    // The consensus model: adopted (RunConsensus) once our view has `sender` as the leader. It
    // is acknowledged already, so it is not sent again.
    consensus_.OnOffer(sender, std::move(model), covers);
  }
  RunConsensus(now);
  return true;
}

Node::ConsensusView Node::consensus() const {
  ConsensusView v;
  if (!config_.consensus || !config_.training) return v;
  v.participants = consensus_.participants().size();
  v.leader = consensus_.leader();
  v.models = consensus_.finals() + (lifecycle_.finished() ? 1 : 0);
  v.state = consensus_.Phase(lifecycle_.finished(), config_.name);
  v.left_out = consensus_left_out_;
  for (const auto& [name, f] : fell_training_) v.awaiting.push_back(name);
  return v;
}

}  // namespace meshtrain::node
