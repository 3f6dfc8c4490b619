#include "sync/barrier.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>
#include <utility>

namespace meshtrain::sync {
namespace {

// c_i − c_j ≤ bound, without unsigned wrap-around.
bool Within(uint64_t mine, uint64_t theirs, uint64_t bound) {
  return mine <= theirs || mine - theirs <= bound;
}

// k distinct indices drawn uniformly from [0, n), in ascending order.
std::vector<size_t> SampleIndices(size_t n, size_t k, Rng& rng) {
  k = std::min(k, n);
  std::vector<size_t> out;
  if (k == 0) return out;
  if (k == n) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  // Floyd's algorithm: k draws, no O(n) scratch space. A small sample (β) is kept in a flat
  // vector (no allocation per element), a large one in a set.
  if (k <= 64) {
    out.reserve(k);
    for (size_t j = n - k; j < n; ++j) {
      const size_t t = std::uniform_int_distribution<size_t>(0, j)(rng);
      out.push_back(std::find(out.begin(), out.end(), t) == out.end() ? t : j);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::set<size_t> chosen;
  for (size_t j = n - k; j < n; ++j) {
    const size_t t = std::uniform_int_distribution<size_t>(0, j)(rng);
    if (!chosen.insert(t).second) chosen.insert(j);
  }
  out.assign(chosen.begin(), chosen.end());
  return out;
}

}  // namespace

std::optional<Policy> ParsePolicy(std::string_view name) {
  for (const auto& [n, p] : kPolicyNames) {
    if (n == name) return p;
  }
  return std::nullopt;
}

const char* PolicyName(Policy policy) {
  for (const auto& [n, p] : kPolicyNames) {
    if (p == policy) return n.data();  // the table's names are string literals
  }
  return "unknown";
}

bool IsProbabilistic(Policy policy) { return policy == Policy::kPbsp || policy == Policy::kPssp; }

bool UsesSample(Policy policy) {
  return IsProbabilistic(policy) || policy == Policy::kDssp || policy == Policy::kWbsp;
}

BarrierCore::BarrierCore(BarrierConfig config, std::string self, std::shared_ptr<NameTable> names)
    : config_(config), view_(std::move(self), config.interval_alpha, std::move(names)) {
  if (config_.probe_timeout <= 0) config_.probe_timeout = 1;
  // dssp/wbsp decide on every live peer unless a sample size β > 0 makes them pdssp/pwbsp.
  if ((config_.policy == Policy::kDssp || config_.policy == Policy::kWbsp) && config_.sample == 0) {
    config_.sample = std::numeric_limits<size_t>::max();
  }
  if (config_.requery_interval <= 0) {
    config_.requery_interval = std::max<TimeMs>(1, config_.probe_timeout / 5);
  }
}

Decision BarrierCore::Check(uint64_t my_step, TimeMs now, Rng& rng) {
  ++stats_.checks;
  if (!in_episode_ || my_step != episode_step_) {
    StartEpisode(my_step, now);
  } else if (prefetched_) {
    // The first real Check of a prefetched episode: the step's computation ends here.
    prefetched_ = false;
    if (have_last_pass_ && my_step == last_pass_step_ + 1) {
      const double sample = static_cast<double>(std::max<TimeMs>(0, now - last_pass_time_));
      own_interval_ms_ = own_interval_ms_ > 0 ? config_.interval_alpha * sample +
                                                    (1 - config_.interval_alpha) * own_interval_ms_
                                              : sample;
    }
  }
  if (!Evaluate(my_step, now, rng)) {
    if (!waiting_) {
      waiting_ = true;
      wait_start_ = now;
      ++stats_.waits;
    }
    return Decision::kWait;
  }
  if (waiting_) {
    wait_ms_ += std::max<TimeMs>(0, now - wait_start_);
    waiting_ = false;
  }
  ++stats_.passes;
  if (UsesSample(config_.policy) && SampleIsView()) {
    const uint64_t min = *view_.MinStep();  // the sample is the view: its slowest peer
    if (my_step > min) stats_.max_sampled_lead = std::max(stats_.max_sampled_lead, my_step - min);
  } else if (UsesSample(config_.policy)) {
    stats_.sample_visits += slots_.size();
    for (Slot& slot : slots_) {
      const PeerProgress* p = view_.FindId(slot.id, &slot.pos);
      if (p && my_step > p->step) {
        stats_.max_sampled_lead = std::max(stats_.max_sampled_lead, my_step - p->step);
      }
    }
  }
  have_last_pass_ = true;
  last_pass_step_ = my_step;
  last_pass_time_ = now;
  EndEpisode();
  return Decision::kPass;
}

void BarrierCore::StartEpisode(uint64_t my_step, TimeMs now) {
  // The first Check after a pass marks the end of the step's computation: its duration is this
  // node's pace, which dssp needs to project when it would finish r more steps.
  if (have_last_pass_ && my_step == last_pass_step_ + 1) {
    const double sample = static_cast<double>(std::max<TimeMs>(0, now - last_pass_time_));
    own_interval_ms_ = own_interval_ms_ > 0 ? config_.interval_alpha * sample +
                                                  (1 - config_.interval_alpha) * own_interval_ms_
                                            : sample;
  }
  EndEpisode();
  in_episode_ = true;
  episode_step_ = my_step;
}

void BarrierCore::Prefetch(uint64_t next_step, TimeMs now, Rng& rng) {
  if (!UsesSample(config_.policy) || config_.sample == 0 || view_.empty()) return;
  if (in_episode_) return;  // Check has not passed the current step yet
  EndEpisode();
  in_episode_ = true;
  prefetched_ = true;
  episode_step_ = next_step;
  EvaluateSampled(next_step, now, rng);  // draws the sample, queries the peers that block
  // Look-ahead: a sampled peer that does not block this step but will within the steps one
  // query round trip takes is asked now too (it answers at once: its step is past `need`), so
  // its fresh step arrives before the node reaches the bound instead of a round trip after.
  const uint64_t bound = SampledBound();
  if (!config_.lookahead || bound == 0 || own_interval_ms_ <= 0 || rtt_ms_ <= 0) return;
  const auto ahead = static_cast<uint64_t>(
      std::min<double>(static_cast<double>(bound), std::ceil(rtt_ms_ / own_interval_ms_)));
  stats_.sample_visits += slots_.size();
  for (Slot& slot : slots_) {
    if (slot.seq != 0) continue;  // already asked in this round
    const PeerProgress* p = view_.FindId(slot.id, &slot.pos);
    if (!p || Within(next_step + ahead, p->step, bound)) continue;
    Query(slot, now);
    ++stats_.lookahead_queries;
    const TimeMs deadline = now + config_.probe_timeout;
    round_deadline_ =
        round_deadline_ == kNoDeadline ? deadline : std::max(round_deadline_, deadline);
  }
}

bool BarrierCore::PassesAhead(uint64_t next_step) const {
  switch (config_.policy) {
    case Policy::kAsp:
      return true;
    case Policy::kBsp:
      return EvaluateBound(next_step, 0);
    case Policy::kSsp:
      return EvaluateBound(next_step, config_.staleness);
    case Policy::kPbsp:
    case Policy::kPssp:
    case Policy::kDssp:
    case Policy::kWbsp:
      break;
  }
  if (config_.sample == 0 || view_.empty()) return true;  // as EvaluateSampled
  if (!in_episode_ || !prefetched_ || episode_step_ != next_step) return false;
  return SampleWithin(next_step);
}

bool BarrierCore::SampleWithin(uint64_t my_step) const {
  if (slots_.size() < std::min(config_.sample, view_.size())) return false;  // Check refills
  const uint64_t bound = SampledBound();
  if (SampleIsView()) return Within(my_step, *view_.MinStep(), bound);
  stats_.sample_visits += slots_.size();
  for (const Slot& slot : slots_) {
    size_t hint = slot.pos;
    const PeerProgress* p = view_.FindId(slot.id, &hint);
    if (p && !Within(my_step, p->step, bound)) return false;
  }
  return true;
}

void BarrierCore::EndEpisode() {
  in_episode_ = false;
  prefetched_ = false;
  round_active_ = false;
  round_deadline_ = kNoDeadline;
  requery_at_ = kNoDeadline;
  slots_.clear();
  slot_of_.clear();
  slots_asked_ = false;
  due_.clear();
  queries_.clear();  // unsent queries of a passed step are useless
}

bool BarrierCore::Evaluate(uint64_t my_step, TimeMs now, Rng& rng) {
  switch (config_.policy) {
    case Policy::kAsp:
      return true;
    case Policy::kBsp:
      return EvaluateBound(my_step, 0);
    case Policy::kSsp:
      return EvaluateBound(my_step, config_.staleness);
    case Policy::kPbsp:
    case Policy::kPssp:
    case Policy::kDssp:
    case Policy::kWbsp:
      return EvaluateSampled(my_step, now, rng);
  }
  return true;
}

bool BarrierCore::EvaluateBound(uint64_t my_step, uint64_t bound) const {
  // bsp/ssp (docs/contract.md "Barriers"): c_i − c_j ≤ bound for every live peer j, i.e. against
  // the live minimum.
  const std::optional<uint64_t> min = view_.MinStep();
  return !min || Within(my_step, *min, bound);
}

// Dynamic SSP (Zhao et al., "Dynamic Stale Synchronous Parallel Distributed Training for Deep
// Learning", ICDCS 2019), read for a serverless mesh, over the node's sample (every live peer
// unless pDSSP):
//   - Like SSP with the lower bound s_L: pass while c_i − c_min ≤ s_L.
//   - Never pass beyond the upper bound s_H = s_L + r_max.
//   - When the node would be blocked at s_L and it is the fastest node of its sample
//     (c_i ≥ every sampled peer's step), its synchronization controller picks r* ∈ [0, r_max]:
//     the number of extra steps whose projected finish time now + r·T_self best matches the
//     slowest peer's projected next arrival, t_slow = learned_slow + T_slow (T = step-interval
//     EWMAs; with several peers at the minimum step, the latest of their projections). The node
//     may then pass up to c_min + s_L + r*. The paper's rationale: the fastest worker keeps
//     computing instead of idling for exactly as long as the straggler needs to deliver its next
//     update.
//   - A grant is made once per position of the slowest peer: after spending it the node waits
//     until c_min advances, then the controller decides afresh. Nodes that are not the fastest
//     obey plain SSP(s_L). Unknown intervals give r* = 0 (plain SSP).
bool BarrierCore::DsspGrant(uint64_t my_step, uint64_t min, uint64_t max, TimeMs now) {
  const uint64_t s_low = config_.staleness;
  if (!Within(my_step, min, s_low + config_.r_max)) return false;
  if (!has_grant_ || min > grant_base_) {
    // Blocked at s_L with no grant for the slowest peer's current position.
    if (my_step < max) return false;  // not the fastest: plain SSP(s_L)
    const uint64_t r = ChooseDsspExtra(now, min);
    has_grant_ = true;
    grant_base_ = min;
    grant_limit_ = min + s_low + r;
    if (r > 0) ++stats_.dssp_grants;
  }
  if (my_step > grant_limit_) return false;
  ++stats_.dssp_extra_passes;
  return true;
}

uint64_t BarrierCore::ChooseDsspExtra(TimeMs now, uint64_t min) {
  const double t_self = own_interval_ms_;
  if (t_self <= 0 || config_.r_max == 0) return 0;
  double t_slow = -1;
  bool any = false;
  stats_.visited += view_.size();
  for (const ProgressView::Entry& e : view_.entries()) {
    if (e.progress.step != min) continue;
    if (e.progress.interval_ms <= 0) return 0;  // cannot project the straggler
    const double t = static_cast<double>(e.progress.learned) + e.progress.interval_ms;
    t_slow = any ? std::max(t_slow, t) : t;
    any = true;
  }
  if (!any) return 0;
  // argmin over r ∈ [0, r_max] of |now + r·T_self − t_slow|; the cost is convex in r, so the
  // best r is one of the integers around the real minimiser. Ties go to the smaller r.
  const double ideal = (t_slow - static_cast<double>(now)) / t_self;
  if (ideal <= 0) return 0;
  const double r_max = static_cast<double>(config_.r_max);
  const double lo = std::min(std::floor(ideal), r_max);
  const double hi = std::min(lo + 1, r_max);
  const auto cost = [&](double r) {
    return std::fabs(static_cast<double>(now) + r * t_self - t_slow);
  };
  return static_cast<uint64_t>(cost(hi) < cost(lo) ? hi : lo);
}

bool BarrierCore::EvaluateSampled(uint64_t my_step, TimeMs now, Rng& rng) {
  if (config_.sample == 0 || view_.empty()) return true;  // β = 0 is asp; alone passes
  const uint64_t bound = SampledBound();
  if (!round_active_) {
    NewRound(rng);
  } else if (now >= round_deadline_ && !SampleWithin(my_step)) {
    // Probe timeout of a sample that still blocks (one that passes by now, e.g. a prefetched
    // sample whose answers came in while the step computed, is kept: a new sample would only
    // cost another round of queries and could block where this one passes): peers that never
    // answered and still block are replaced (marked silent, sampled last), and a fresh sample is
    // drawn. With peers_watch a peer below need answers only when it gets there, so no answer says
    // nothing: nobody is marked.
    ++stats_.timeouts;
    if (!config_.peers_watch) {
      stats_.sample_visits += slots_.size();
      for (Slot& slot : slots_) {
        const PeerProgress* p = view_.FindId(slot.id, &slot.pos);
        if (slot.seq != 0 && !slot.answered && p && !Within(my_step, p->step, bound)) {
          silent_.insert(view_.name_of_id(slot.id));
        }
      }
    }
    NewRound(rng);
  }
  // Keep the sample at min(β, live): replace removed peers, and take in peers that joined
  // mid-round while the sample is short (with β ≥ live peers everyone must be in it).
  if (slots_.size() < std::min(config_.sample, view_.size())) Refill(rng);

  requery_at_ = kNoDeadline;
  bool pass = true;
  if (slots_asked_ && SampleIsView()) {
    // Every peer is sampled and every one that blocks has been asked since the sample last
    // changed, so the walk below would only re-ask those due (none with peers_watch: each
    // watches for our need, or the probe timeout's new round asks afresh), which due_ holds in
    // order. A peer within the bound stays within (steps only grow), so passing is the view's
    // minimum within it: O(log N) per answer instead of a walk over every peer (bsp, ssp, wbsp
    // and dssp in a mesh of thousands).
    RequeryDue(my_step, now);
    pass = Within(my_step, *view_.MinStep(), bound);
  } else {
    pass = WalkSample(my_step, now);
  }
  if (!pass && config_.policy == Policy::kDssp) {
    uint64_t min = std::numeric_limits<uint64_t>::max(), max = 0;
    bool any = false;
    if (SampleIsView()) {  // the sample's slowest and fastest are the view's
      min = *view_.MinStep();
      max = *view_.MaxStep();
      any = true;
    } else {
      stats_.sample_visits += slots_.size();
      for (Slot& slot : slots_) {
        if (const PeerProgress* p = view_.FindId(slot.id, &slot.pos)) {
          min = std::min(min, p->step);
          max = std::max(max, p->step);
          any = true;
        }
      }
    }
    if (any) pass = DsspGrant(my_step, min, max, now);
  }
  return pass;
}

// Re-asks the sampled peers whose re-query is due, in sample order as the walk would, and sets
// requery_at_ to the next one's time.
void BarrierCore::RequeryDue(uint64_t my_step, TimeMs now) {
  const uint64_t bound = SampledBound();
  // Still due to be re-asked: the slot answered query `seq` (its latest), nothing newer is out,
  // and the peer still blocks.
  const auto live = [&](const Due& d) -> Slot* {
    Slot* slot = FindSlot(d.id);
    if (slot == nullptr || slot->seq != d.seq || slot->awaiting || slot->watching) return nullptr;
    const PeerProgress* p = view_.FindId(slot->id, &slot->pos);
    return p && !Within(my_step, p->step, bound) ? slot : nullptr;
  };
  std::vector<Slot*> ask;
  while (!due_.empty()) {
    ++stats_.sample_visits;
    const Due top = due_.front();
    Slot* slot = live(top);
    if (slot != nullptr && top.at > now) {
      requery_at_ = top.at;
      break;
    }
    std::pop_heap(due_.begin(), due_.end(), Due::Later);
    due_.pop_back();
    if (slot != nullptr) ask.push_back(slot);
  }
  std::sort(ask.begin(), ask.end());  // slots_ order
  for (Slot* slot : ask) {
    Query(*slot, now);
    ++stats_.requeries;
  }
}

bool BarrierCore::WalkSample(uint64_t my_step, TimeMs now) {
  const uint64_t bound = SampledBound();
  bool pass = true;
  // The sampled peers' entries, requested together (no effect on behaviour): with thousands of
  // simulated nodes each is a cache miss, and the loop below would take them one at a time.
  for (const Slot& slot : slots_) view_.PrefetchAt(slot.pos);
  stats_.sample_visits += slots_.size();
  for (Slot& slot : slots_) {
    const PeerProgress* p = view_.FindId(slot.id, &slot.pos);
    if (!p || Within(my_step, p->step, bound)) continue;
    pass = false;
    if (slot.seq == 0) {
      // First query of this peer in the round: the round lasts until it had a probe timeout
      // to answer.
      Query(slot, now);
      const TimeMs deadline = now + config_.probe_timeout;
      round_deadline_ =
          round_deadline_ == kNoDeadline ? deadline : std::max(round_deadline_, deadline);
      continue;
    }
    if (slot.awaiting) continue;  // its answer is due; silence is handled at the timeout
    if (slot.watching) continue;  // it answers again when it reaches our need
    // It answered and still blocks: ask again once the re-query interval has passed, since
    // nothing else may tell us when it catches up. The round deadline stays put, so the node
    // still re-samples at the probe timeout.
    const TimeMs due = slot.asked_at + config_.requery_interval;
    if (now >= due) {
      Query(slot, now);
      ++stats_.requeries;
    } else {
      requery_at_ = std::min(requery_at_, due);
    }
  }
  slots_asked_ = true;  // every sampled peer that blocks has been asked
  return pass;
}

void BarrierCore::Query(Slot& slot, TimeMs now) {
  slot.seq = next_seq_++;
  if (next_seq_ == 0) next_seq_ = 1;  // 0 means "not queried"
  slot.awaiting = true;
  slot.watching = false;
  slot.asked_at = now;
  queries_.push_back(ProgressQuery{view_.name_of_id(slot.id), slot.seq});
  ++stats_.queries;
}

void BarrierCore::NewRound(Rng& rng) {
  ++stats_.rounds;
  round_active_ = true;
  round_deadline_ = kNoDeadline;
  requery_at_ = kNoDeadline;
  slots_.clear();
  due_.clear();

  const std::vector<ProgressView::Entry>& entries = view_.entries();
  const size_t k = std::min(config_.sample, entries.size());
  std::vector<size_t> picked;
  if (silent_.empty()) {
    picked = SampleIndices(entries.size(), k, rng);
  } else {
    // Silent peers are replaced by others; they fill the sample only when too few others live.
    std::vector<size_t> fresh, silent;
    stats_.visited += entries.size();
    for (size_t i = 0; i < entries.size(); ++i) {
      (silent_.count(view_.name(entries[i])) ? silent : fresh).push_back(i);
    }
    for (size_t i : SampleIndices(fresh.size(), k, rng)) picked.push_back(fresh[i]);
    if (picked.size() < k) {
      for (size_t i : SampleIndices(silent.size(), k - picked.size(), rng)) {
        picked.push_back(silent[i]);
      }
    }
  }
  stats_.visited += picked.size();
  for (size_t i : picked) {
    Slot slot;
    slot.id = entries[i].name;
    slot.pos = i;
    slots_.push_back(slot);
  }
  IndexSlots();
  slots_asked_ = false;  // new peers: the next Check walks them
}

void BarrierCore::IndexSlots() {
  slot_of_.clear();
  if (slots_.size() <= kSlotIndexMin) return;
  slot_of_.reserve(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) slot_of_.emplace(slots_[i].id, i);
}

BarrierCore::Slot* BarrierCore::FindSlot(uint32_t id) {
  if (slots_.size() <= kSlotIndexMin) {
    stats_.sample_visits += slots_.size();
    for (Slot& slot : slots_) {
      if (slot.id == id) return &slot;
    }
    return nullptr;
  }
  ++stats_.sample_visits;
  const auto it = slot_of_.find(id);
  return it == slot_of_.end() ? nullptr : &slots_[it->second];
}

void BarrierCore::Refill(Rng& rng) {
  const size_t want = std::min(config_.sample, view_.size());
  if (slots_.size() >= want) return;
  // Replacements come from live peers not yet sampled in this round, non-silent ones first.
  // Sampled in this round: the peers in the sample (a removed peer leaves it, so it may be
  // sampled again should it rejoin).
  std::unordered_set<uint32_t> tried;
  for (const Slot& slot : slots_) tried.insert(slot.id);
  std::vector<uint32_t> fresh, silent;
  stats_.visited += view_.size();
  for (const ProgressView::Entry& e : view_.entries()) {
    if (tried.count(e.name)) continue;
    (silent_.count(view_.name(e)) ? silent : fresh).push_back(e.name);
  }
  for (std::vector<uint32_t>* pool : {&fresh, &silent}) {
    const size_t need = want - slots_.size();
    for (size_t i : SampleIndices(pool->size(), need, rng)) {
      Slot slot;
      slot.id = (*pool)[i];
      slots_.push_back(slot);
    }
  }
  IndexSlots();
  slots_asked_ = false;  // new peers: the next Check walks them
}

void BarrierCore::Observe(const std::string& name, uint64_t step, TimeMs now) {
  for (Observer& o : observers_) {
    if (o.name == name) {
      if (step > o.step) o = Observer{name, step, now};
      return;
    }
  }
  if (name != view_.self()) observers_.push_back(Observer{name, step, now});
}

std::vector<std::string> BarrierCore::observers() const {
  std::vector<std::string> out;
  for (const Observer& o : observers_) out.push_back(o.name);
  return out;
}

bool BarrierCore::OnProgress(const std::string& name, uint64_t step, TimeMs now) {
  if (Full() && !view_.Contains(name)) {
    Observe(name, step, now);
    return false;  // nobody waits for an observer
  }
  bool added = false;
  const bool changed = view_.Update(name, step, now, &added);
  if (changed && !added) silent_.erase(name);  // its step advanced: it is making progress
  return changed;
}

bool BarrierCore::OnKnownProgress(const std::string& name, uint64_t step, TimeMs now) {
  for (Observer& o : observers_) {
    if (o.name == name && step > o.step) o = Observer{name, step, now};
  }
  const bool changed = view_.UpdateKnown(name, step, now);
  if (changed) silent_.erase(name);  // its step advanced: it is making progress
  return changed;
}

bool BarrierCore::OnReply(const std::string& name, uint32_t seq, uint64_t step, TimeMs now,
                          bool round_trip) {
  bool matched = false;
  // Sampled peers are in the view (a peer leaving it leaves the sample), so a name the view does
  // not hold matches no slot.
  const size_t pos = view_.Position(name);
  Slot* found = pos == NameIndex::kNone ? nullptr : FindSlot(view_.entries()[pos].name);
  if (found != nullptr) {
    Slot& slot = *found;
    if (slot.seq == seq && seq != 0 && slot.awaiting) {
      slot.awaiting = false;
      slot.answered = true;
      // The query asked for the episode's need: below it, the peer holds a watcher for us.
      const uint64_t bound = SampledBound();
      const uint64_t need = episode_step_ > bound ? episode_step_ - bound : 0;
      slot.watching = config_.peers_watch && step < need;
      if (!config_.peers_watch) {
        // Re-asked at asked_at + requery_interval should it still block then (RequeryDue).
        // (With peers_watch an answer at need is within the bound: never asked again.)
        due_.push_back(Due{slot.asked_at + config_.requery_interval, slot.id, slot.seq});
        std::push_heap(due_.begin(), due_.end(), Due::Later);
      }
      matched = true;
      ++stats_.replies;
      // Query round trip (EWMA), for Prefetch's look-ahead.
      const double rtt = static_cast<double>(std::max<TimeMs>(0, now - slot.asked_at));
      if (round_trip) rtt_ms_ = rtt_ms_ > 0 ? 0.8 * rtt_ms_ + 0.2 * rtt : rtt;
    }
  }
  silent_.erase(name);
  // Never re-add a peer that left the view (it departed, or finished training).
  const bool changed = pos != NameIndex::kNone && view_.UpdateAt(pos, step, now);
  return matched || changed;
}

bool BarrierCore::OnPeerRemoved(const std::string& name) {
  observers_.erase(std::remove_if(observers_.begin(), observers_.end(),
                                  [&](const Observer& o) { return o.name == name; }),
                   observers_.end());
  const size_t pos = view_.Position(name);
  const uint32_t id = pos == NameIndex::kNone ? 0 : view_.entries()[pos].name;
  const bool removed = view_.Remove(name);
  if (removed && !observers_.empty() && !Full()) {
    // The earliest observer takes the free place: from now on barriers wait for it.
    const Observer o = observers_.front();
    observers_.erase(observers_.begin());
    view_.Update(o.name, o.step, o.learned);
  }
  silent_.erase(name);
  // Sampled peers are in the view, so a name it did not hold has no slot.
  if (Slot* slot = removed ? FindSlot(id) : nullptr) {
    // Replaced at the next Check, which has the RNG. The sample stays the view if it was one
    // (both lost the peer), and every remaining peer that blocks is still asked.
    slots_.erase(slots_.begin() + (slot - slots_.data()));
    IndexSlots();
  }
  return removed;
}

TimeMs BarrierCore::NextDeadline() const {
  if (!waiting_ || !round_active_) return kNoDeadline;
  return std::min(round_deadline_, requery_at_);
}

std::vector<ProgressQuery> BarrierCore::TakeQueries() {
  std::vector<ProgressQuery> out;
  out.swap(queries_);
  return out;
}

double BarrierCore::WaitSeconds(TimeMs now) const {
  int64_t ms = wait_ms_;
  if (waiting_) ms += std::max<TimeMs>(0, now - wait_start_);
  return static_cast<double>(ms) / 1000.0;
}

std::vector<std::string> BarrierCore::sample() const {
  std::vector<std::string> out;
  out.reserve(slots_.size());
  for (const Slot& s : slots_) out.push_back(view_.name_of_id(s.id));
  return out;
}

}  // namespace meshtrain::sync
