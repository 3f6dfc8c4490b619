#include "node/consensus.h"

#include <algorithm>
#include <utility>

namespace meshtrain::node {

const char* ConsensusPhaseName(ConsensusPhase p) {
  switch (p) {
    case ConsensusPhase::kOff:
      return "off";
    case ConsensusPhase::kTraining:
      return "training";
    case ConsensusPhase::kWaiting:
      return "waiting";
    case ConsensusPhase::kCollecting:
      return "collecting";
    case ConsensusPhase::kReducing:
      return "reducing";
    case ConsensusPhase::kServing:
      return "serving";
    case ConsensusPhase::kAdopted:
      return "adopted";
  }
  return "?";
}

void Consensus::SetParticipants(std::vector<std::string> parts, std::set<std::string> natted,
                                bool spectator, TimeMs now) {
  // Nobody can push to a participant behind NAT, so the leader is the first one that is not
  // (when there is one); those behind NAT pull the result from it.
  std::string leader = parts.front();
  for (const std::string& p : parts) {
    if (natted.count(p) == 0) {
      leader = p;
      break;
    }
  }
  if (parts != participants_ || leader != leader_ || natted != natted_ || spectator != spectator_) {
    participants_ = std::move(parts);
    spectator_ = spectator;
    leader_ = std::move(leader);
    natted_ = std::move(natted);
    next_send_ = now;  // a new leader or member: act at once
    next_pull_ = now;
  }
}

Consensus::Model Consensus::AdoptOffer() {
  if (!offer_ || offer_from_ != leader_) return nullptr;
  result_ = std::move(offer_);
  result_from_ = leader_;
  result_covers_ = offer_covers_;
  reducing_ = false;
  return result_;
}

bool Consensus::Settled() const {
  return HasLeadersResult() && (result_covers_ == 0 || result_covers_ >= participants_.size());
}

bool Consensus::TakeSettled(TimeMs now, TimeMs give_up) {
  if (!HasLeadersResult() || settled_told_ == result_.get()) return false;
  if (unsettled_ != result_.get()) {
    unsettled_ = result_.get();
    unsettled_since_ = now;
  }
  if (!Settled() && now - unsettled_since_ < give_up) return false;
  settled_told_ = result_.get();
  return true;
}

bool Consensus::PullDue(const std::string& self, TimeMs now) const {
  return (spectator_ || natted(self)) && now >= next_pull_ && !natted(leader_) && !Settled();
}

bool Consensus::ResultStands() const {
  if (!result_) return false;
  return std::all_of(participants_.begin(), participants_.end(), [&](const std::string& p) {
    return std::binary_search(reduced_over_.begin(), reduced_over_.end(), p);
  });
}

std::vector<std::string> Consensus::Serve(const std::string& self) {
  if (result_from_ != self) {
    result_from_ = self;  // we serve it from now on
    acked_.clear();
  }
  std::vector<std::string> due;
  for (const std::string& p : participants_) {
    if (p != self && !acked_.count(p) && !natted_.count(p)) due.push_back(p);
  }
  return due;
}

std::optional<ConsensusReduce> Consensus::Reduce(const std::string& self, const Model& own) {
  ConsensusReduce req;
  req.id = ++reduce_id_;
  for (const auto& p : participants_) {
    req.names.push_back(p);
    if (p == self) {
      req.models.push_back(own);
      continue;
    }
    auto it = finals_.find(p);
    if (it == finals_.end()) return std::nullopt;  // still waiting for this participant's model
    req.models.push_back(it->second);
  }
  reducing_ = true;
  reduced_over_ = participants_;
  return req;
}

Consensus::Model Consensus::OnReduced(ConsensusResult r, const Model& latest,
                                      const std::string& self, TimeMs now) {
  if (!reducing_ || r.id != reduce_id_ || !r.params || !latest ||
      r.params->size() != latest->size()) {
    return nullptr;
  }
  reducing_ = false;
  result_ = std::move(r.params);
  result_from_ = self;
  result_covers_ = static_cast<uint32_t>(reduced_over_.size());
  acked_.clear();
  next_send_ = now;
  return result_;
}

void Consensus::OnOffer(const std::string& sender, Model m, uint32_t covers) {
  offer_ = std::move(m);
  offer_from_ = sender;
  offer_covers_ = covers;
}

ConsensusPhase Consensus::Phase(bool finished, const std::string& self) const {
  if (!finished) return ConsensusPhase::kTraining;
  if (participants_.empty()) return ConsensusPhase::kWaiting;  // peers still train
  if (result_ && result_from_ == leader_) {
    return leader_ == self ? ConsensusPhase::kServing : ConsensusPhase::kAdopted;
  }
  return reducing_ ? ConsensusPhase::kReducing : ConsensusPhase::kCollecting;
}

}  // namespace meshtrain::node
