#include "sim/sim_network.h"

namespace meshtrain::sim {

SimNetwork::SimNetwork(VirtualClock* clock, uint64_t seed) : clock_(clock), rng_(seed) {}

void SimNetwork::set_link_latency(const std::string& from, const std::string& to, LinkLatency l) {
  link_latency_[{from, to}] = l;
}

void SimNetwork::set_link_loss(const std::string& from, const std::string& to, double rate) {
  link_loss_[{from, to}] = rate;
}

void SimNetwork::block(const std::string& from, const std::string& to) {
  blocked_.insert({from, to});
}

void SimNetwork::unblock(const std::string& from, const std::string& to) {
  blocked_.erase({from, to});
}

void SimNetwork::partition(const std::vector<std::vector<std::string>>& groups) {
  group_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const std::string& e : groups[g]) group_[e] = static_cast<int>(g);
  }
}

void SimNetwork::set_down(const std::string& endpoint, bool down) {
  if (down) {
    down_.insert(endpoint);
  } else {
    down_.erase(endpoint);
  }
}

bool SimNetwork::reachable(const std::string& from, const std::string& to) const {
  if (is_down(from) || is_down(to)) return false;
  if (!blocked_.empty() && blocked_.count({from, to}) > 0) return false;
  if (!group_.empty()) {
    auto a = group_.find(from);
    auto b = group_.find(to);
    if (a != group_.end() && b != group_.end() && a->second != b->second) return false;
  }
  return true;
}

double SimNetwork::loss_for(const std::string& from, const std::string& to) const {
  if (!link_loss_.empty()) {
    auto it = link_loss_.find({from, to});
    if (it != link_loss_.end()) return it->second;
  }
  return loss_;
}

TimeMs SimNetwork::sample_latency(const std::string& from, const std::string& to) {
  LinkLatency l = default_latency_;
  if (!link_latency_.empty()) {
    auto it = link_latency_.find({from, to});
    if (it != link_latency_.end()) l = it->second;
  }
  TimeMs jitter = 0;
  if (l.jitter > 0) jitter = static_cast<TimeMs>(rng_() % static_cast<uint64_t>(l.jitter + 1));
  return l.base + jitter;
}

bool SimNetwork::send_datagram(const std::string& from, const std::string& to, size_t bytes,
                               Deliver deliver) {
  ++stats_.datagrams_sent;
  stats_.bytes_sent += bytes;
  const double loss = loss_for(from, to);
  // Draw for loss on every datagram (even unreachable ones) so that the random sequence, and
  // hence the run, does not depend on the order of unrelated fault injections.
  const bool lost = loss > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < loss;
  const TimeMs latency = sample_latency(from, to);
  if (lost || !reachable(from, to)) {
    ++stats_.datagrams_dropped;
    return false;
  }
  clock_->schedule_after(latency, [this, from, to, deliver = std::move(deliver)] {
    // A host that went down (or a link that broke) while the datagram was in flight loses it.
    if (!reachable(from, to)) {
      ++stats_.datagrams_dropped;
      return;
    }
    ++stats_.datagrams_delivered;
    deliver();
  });
  return true;
}

void SimNetwork::send_stream(const std::string& from, const std::string& to, size_t bytes,
                             Deliver deliver, Deliver fail) {
  ++stats_.streams_opened;
  stats_.bytes_sent += bytes;
  const TimeMs latency = sample_latency(from, to);
  if (!reachable(from, to) || !reachable(to, from)) {
    ++stats_.streams_failed;
    clock_->schedule_after(stream_failure_delay_, std::move(fail));
    return;
  }
  clock_->schedule_after(latency,
                         [this, from, to, deliver = std::move(deliver), fail = std::move(fail)] {
                           if (!reachable(from, to) || !reachable(to, from)) {
                             ++stats_.streams_failed;
                             fail();
                             return;
                           }
                           deliver();
                         });
}

}  // namespace meshtrain::sim
