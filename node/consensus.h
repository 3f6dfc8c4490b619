// The end-of-training consensus's own state and rules (the protocol: node/node_consensus.cc).
// One concept, one type: who takes part, who leads, the final models the leader collects, the
// reduce in flight, the result, who acknowledged it, and when to act again. It decides; the
// node (node/node.h) computes the participants from its view and executes what it asks for
// (transfers, pulls, the reduce, adoption).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "node/io.h"

namespace meshtrain::node {

// Where this node stands in the consensus, as status shows it: off (no consensus configured, or
// no training); training (not finished yet); waiting (finished, peers still train); collecting
// (the leader gathers final models, or a participant sends its own); reducing (the leader's
// average is being computed); serving (the leader holds the result and sends it); adopted (a
// participant took the leader's result over).
enum class ConsensusPhase : uint8_t {
  kOff,
  kTraining,
  kWaiting,
  kCollecting,
  kReducing,
  kServing,
  kAdopted
};
// The status JSON's and RPC's name of a phase ("off", "training", ...).
const char* ConsensusPhaseName(ConsensusPhase p);

class Consensus {
 public:
  using Model = std::shared_ptr<const std::vector<float>>;

  // ---- the participants ----
  // `parts`: sorted, self included unless `spectator`; `natted`: those behind NAT. The leader
  // is the first participant not behind NAT (every other pushes to it), else the first. A new
  // set, leader or spectator status makes the node act at once.
  void SetParticipants(std::vector<std::string> parts, std::set<std::string> natted, bool spectator,
                       TimeMs now);
  const std::vector<std::string>& participants() const { return participants_; }
  const std::string& leader() const { return leader_; }
  bool spectator() const { return spectator_; }
  bool natted(const std::string& name) const { return natted_.count(name) > 0; }

  // ---- a participant ----
  // The leader's consensus model, if it came (maybe before our view agreed that everyone
  // finished): it becomes our result. Returns it, to adopt, or null.
  Model AdoptOffer();
  bool HasLeadersResult() const { return result_ && result_from_ == leader_; }
  // The leader's result averages as many participants as our view counts (or did not say how
  // many). One that averages fewer is provisional: the leader missed a participant that our
  // view has (it saw it training, or not at all), and reduces again once it sees it finished.
  bool Settled() const;
  // Once per result we hold from the leader: true when it is settled, or has stayed unsettled
  // for `give_up` ms since `now` first asked (views that never agree must not hold a trainer's
  // finish() for good). The trainer's finish() returns a result only once this said so: a
  // provisional one may be replaced a moment later.
  bool TakeSettled(TimeMs now, TimeMs give_up);
  // Behind NAT (or a spectator) we pull the leader's result, every retry interval, until it is
  // settled.
  bool PullDue(const std::string& self, TimeMs now) const;
  void Pulled(TimeMs next) { next_pull_ = next; }
  // Our final model to the leader (or the result to the participants), every retry interval.
  bool SendDue(TimeMs now) const { return now >= next_send_; }
  void Sent(TimeMs next) { next_send_ = next; }

  // ---- the leader ----
  // A result that covers every live participant stands (whoever computed it: a leader that
  // failed after sending it to us). Serving it makes it ours; returns the participants still
  // to send it to (not self, not acknowledged, not behind NAT: those pull).
  bool ResultStands() const;
  std::vector<std::string> Serve(const std::string& self);
  bool reducing() const { return reducing_; }
  // The reduce over every participant's final model (`own` for self); none while one is
  // missing (a reduce id is spent all the same).
  std::optional<ConsensusReduce> Reduce(const std::string& self, const Model& own);
  // The reduce's answer; the result to adopt, or null when it is not ours or does not fit.
  Model OnReduced(ConsensusResult r, const Model& latest, const std::string& self, TimeMs now);
  size_t reduced_over() const { return reduced_over_.size(); }
  // As it goes out (ParamChunk::covers): the participants the result averages.
  uint32_t result_covers() const { return result_covers_; }

  // ---- transfers ----
  // A participant's final model: kept for the reduce. One that sends it does not hold our
  // result (a participant that adopted it sends no final model again): a restarted node whose
  // former self acknowledged the result is served it anew.
  void OnFinal(const std::string& sender, Model m) {
    finals_[sender] = std::move(m);
    acked_.erase(sender);
  }
  // A consensus model received: kept, adopted once our view has `sender` as the leader (a
  // stale leader's is dropped then).
  // `covers`: how many participants it averages (ParamChunk::covers; 0 = not said).
  void OnOffer(const std::string& sender, Model m, uint32_t covers);
  void Acked(const std::string& receiver) { acked_.insert(receiver); }
  // Our final model `model` (by identity) was acknowledged by `receiver` at `now`, as the
  // consensus's copy for its leader (`to_leader`) or offered to a peer still training (which
  // mixes it and keeps nothing for the consensus): a finished node sends each final model once
  // to each, not at every retry. Delivered(..., now, again) holds for `again` ms only (a leader
  // that restarted and lost it gets it again then).
  void FinalDelivered(const std::string& receiver, const void* model, bool to_leader, TimeMs now) {
    (to_leader ? to_leader_ : offered_)[receiver] = {model, now};
  }
  bool Delivered(const std::string& receiver, const void* model, TimeMs now, TimeMs again) const {
    auto it = to_leader_.find(receiver);
    return it != to_leader_.end() && it->second.first == model && now - it->second.second < again;
  }
  bool Offered(const std::string& receiver, const void* model) const {
    auto it = offered_.find(receiver);
    return it != offered_.end() && it->second.first == model;
  }

  // ---- status ----
  ConsensusPhase Phase(bool finished, const std::string& self) const;
  size_t finals() const { return finals_.size(); }
  // As the leader serves it (ServeState): the result when we computed it.
  const Model& result() const { return result_; }
  const std::string& result_from() const { return result_from_; }

 private:
  // Sorted; self included unless we are a spectator: a node that took no step of its own (it
  // took a finished peer's final model over before its first step) is no participant by its
  // peers' rule (stopped after at least one step), so by ours neither: it pulls the leader's
  // result instead of sending it a final model.
  std::vector<std::string> participants_;
  bool spectator_ = false;
  std::string leader_;
  std::set<std::string> natted_;  // participants behind NAT: they pull the result
  TimeMs next_pull_ = 0;
  // Leader: the finished peers' final models (the newest per sender).
  std::map<std::string, Model> finals_;
  uint64_t reduce_id_ = 0;
  bool reducing_ = false;
  std::vector<std::string> reduced_over_;  // the participants of the reduce in flight or done
  Model result_;
  std::string result_from_;      // who averaged it (ourselves when leading)
  uint32_t result_covers_ = 0;   // how many participants it averages (0: not said)
  std::set<std::string> acked_;  // leader: participants that acknowledged the result
  // Receivers that acknowledged our final model: which one (identity) and when; as the
  // leader's copy, or offered to a peer still training.
  std::map<std::string, std::pair<const void*, TimeMs>> to_leader_, offered_;
  TimeMs next_send_ = 0;
  // A consensus model received, not adopted yet (our view may not agree yet that everyone
  // finished, or that its sender leads).
  Model offer_;
  std::string offer_from_;
  uint32_t offer_covers_ = 0;
  // TakeSettled: the result it said settled last, and since when the current one waits.
  const void* settled_told_ = nullptr;
  const void* unsettled_ = nullptr;
  TimeMs unsettled_since_ = 0;
};

}  // namespace meshtrain::node
