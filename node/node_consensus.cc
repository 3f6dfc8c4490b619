// One model at the end of training (issue 32). While peers still train, a finished node offers
// them its final model (node_state.cc, ServeFinal). Once no live member trains any more, the
// finished nodes — the participants: live members that stopped training after at least one step,
// and this node — agree on one model:
//   1. The leader is the participant with the smallest name among those not behind NAT (issue
//      34; the smallest of all when every one is). Every other participant sends it its final
//      model (a final transfer, compressed as configured) until it holds a consensus model from
//      that leader.
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

#include "node/node.h"
#include "node/node_internal.h"

namespace meshtrain::node {

bool Node::ConsensusParticipants(TimeMs now) {
  ConsensusState& cs = consensus_;
  if (!config_.consensus || !config_.training || !final_ || !latest_ || leaving_) return false;
  if (!Candidates().empty()) return false;  // peers still train: ServeFinal offers them our model
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
  ForEachPeer([&](const PeerRef& p) {
    if (!p.live || p.training || p.step == 0) return;
    parts.push_back(*p.name);
    if (p.nat) natted.insert(*p.name);
  });
  if (parts.empty()) return false;  // a spectator with nobody who trained: it keeps its model
  std::sort(parts.begin(), parts.end());
  // Issue 34: nobody can push to a participant behind NAT, so the leader is the first one
  // that is not (when there is one); those behind NAT pull the result from it.
  std::string leader = parts.front();
  for (const std::string& p : parts) {
    if (natted.count(p) == 0) {
      leader = p;
      break;
    }
  }
  if (parts != cs.participants || leader != cs.leader || natted != cs.natted ||
      spectator != cs.spectator) {
    cs.participants = std::move(parts);
    cs.spectator = spectator;
    cs.leader = std::move(leader);
    cs.natted = std::move(natted);
    cs.next_send = now;  // a new leader or member: act at once
    cs.next_pull = now;
  }
  return true;
}

void Node::Consensus(TimeMs now) {
  ConsensusState& cs = consensus_;
  if (!ConsensusParticipants(now)) return;
  const std::vector<std::string>& parts = cs.participants;
  const std::string leader = cs.leader;
  if (leader != config_.name) {
    // A participant: the leader's consensus model (it may have come before our view agreed
    // that everyone finished), else our final model to the leader until it comes.
    if (cs.offer && cs.offer_from == leader) {
      cs.result = std::move(cs.offer);
      cs.result_from = leader;
      cs.reducing = false;
      Emit(AdoptConsensus{leader, cs.result, parts.size()});
    }
    if (cs.result && cs.result_from == leader) return;
    if ((cs.spectator || cs.natted.count(config_.name) > 0) && pulls_.empty() &&
        now >= cs.next_pull && cs.natted.count(leader) == 0) {
      // Behind NAT the leader cannot push the result to us, and to a spectator it does not:
      // we ask for it (it closes until it has one). A participant's final model goes to it as
      // below.
      if (auto peer = FindPeer(leader)) {
        cs.next_pull = now + config_.consensus_retry_ms;
        stats_.consensus_pulls++;
        PullFrom(leader, *peer->data_addr);
      }
    }
    if (cs.spectator || round_ || pending_ || now < cs.next_send) return;
    cs.next_send = now + config_.consensus_retry_ms;
    pending_ = SnapshotIn{latest_step_, latest_, true, {}};
    return SendRound({leader}, now);
  }
  // The leader. A result that covers every live participant stands (whoever computed it: a
  // leader that failed after sending it to us); otherwise reduce anew.
  const auto covers = [&](const std::vector<std::string>& over) {
    return std::all_of(parts.begin(), parts.end(), [&](const std::string& p) {
      return std::binary_search(over.begin(), over.end(), p);
    });
  };
  if (cs.result && covers(cs.reduced_over)) {
    if (cs.result_from != config_.name) {
      cs.result_from = config_.name;  // we serve it from now on
      cs.acked.clear();
    }
    std::vector<std::string> due;  // (those behind NAT pull it)
    for (const std::string& p : parts) {
      if (p != config_.name && !cs.acked.count(p) && !cs.natted.count(p)) due.push_back(p);
    }
    if (due.empty() || round_ || pending_ || now < cs.next_send) return;
    cs.next_send = now + config_.consensus_retry_ms;
    pending_ = SnapshotIn{latest_step_, cs.result, true, {}};
    return SendRound(std::move(due), now, true);
  }
  if (cs.reducing) return;
  ConsensusReduce req;
  req.id = ++cs.reduce_id;
  for (const auto& p : parts) {
    if (p == config_.name) {
      req.models.push_back(latest_);
      continue;
    }
    auto it = cs.finals.find(p);
    if (it == cs.finals.end()) return;  // still waiting for this participant's model
    req.models.push_back(it->second);
  }
  cs.reducing = true;
  cs.reduced_over = parts;
  Emit(LogLine{false, "consensus: averaging the final models of " + std::to_string(parts.size()) +
                          " nodes"});
  Emit(std::move(req));
}

void Node::OnConsensusResult(ConsensusResult r, TimeMs now) {
  ConsensusState& cs = consensus_;
  if (!cs.reducing || r.id != cs.reduce_id || !r.params || !latest_ ||
      r.params->size() != latest_->size()) {
    return;
  }
  cs.reducing = false;
  cs.result = std::move(r.params);
  cs.result_from = config_.name;
  cs.acked.clear();
  cs.next_send = now;
  Emit(AdoptConsensus{config_.name, cs.result, cs.reduced_over.size()});
  Consensus(now);
}

bool Node::OnConsensusModel(const std::string& sender, bool consensus, std::vector<float>* params,
                            TimeMs now) {
  ConsensusState& cs = consensus_;
  if (!config_.consensus) return false;
  if (!consensus) {  // a finished peer's final model, kept for the reduce
    cs.finals[sender] = std::make_shared<const std::vector<float>>(std::move(*params));
    Consensus(now);
    return true;
  }
  // The consensus model: kept, and adopted (Consensus) once our view has `sender` as the leader
  // (a stale leader's is dropped then). It is acknowledged already, so it is not sent again.
  cs.offer = std::make_shared<const std::vector<float>>(std::move(*params));
  cs.offer_from = sender;
  Consensus(now);
  return true;
}

Node::ConsensusView Node::consensus() const {
  ConsensusView v;
  const ConsensusState& cs = consensus_;
  if (!config_.consensus || !config_.training) return v;
  v.participants = cs.participants.size();
  v.leader = cs.leader;
  v.models = cs.finals.size() + (final_ ? 1 : 0);
  if (!final_) {
    v.state = "training";
  } else if (cs.participants.empty()) {
    v.state = "waiting";  // peers still train
  } else if (cs.result && cs.result_from == v.leader) {
    v.state = v.leader == config_.name ? "serving" : "adopted";
  } else if (cs.reducing) {
    v.state = "reducing";
  } else {
    v.state = "collecting";
  }
  return v;
}

}  // namespace meshtrain::node
