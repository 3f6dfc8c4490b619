#include "node/link_probes.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <utility>

namespace meshtrain::node {

double LinkProbes::With(const sync::BandwidthEstimate& e, const Rates& probes, double cap) {
  std::vector<double> all;
  for (const auto& [who, rates] : probes) {
    for (const Rate& r : rates) all.push_back(r.mbps);
  }
  if (all.empty()) return e.CapacityMbps(cap);
  const double probed = sync::ConfirmedRate(std::move(all));  // see the comment at Send
  return cap > 0 ? std::min(probed, cap) : probed;
}

bool LinkProbes::Due(TimeMs now, bool leaving, bool round_active) {
  next_at_ = now + 1000;
  if (leaving || (id_ != 0 && now - sent_at_ < kTimeoutMs)) return false;
  // Our own parameter transfer would queue in front of the train on our uplink (and make the
  // receiver see it late: wire/link_probe.h, queued trains): wait for the round to end, up
  // to a second.
  if (round_active) {
    if (defer_from_ < 0) defer_from_ = now;
    if (now - defer_from_ < 1000) {
      next_at_ = now + 20;
      return false;
    }
  }
  defer_from_ = -1;
  id_ = 0;
  return true;
}

// A transfer's rate says little about the link (TCP's window, the receiver's loop, a short
// transfer hold it back; a burst read after a busy spell inflates it); a probe train measures
// the path's capacity (wire/link_probe.h): the smaller of our uplink and the receiver's
// downlink, or less while other traffic shares the link; more only when a backlog in front of
// the receiver's downlink drains while the train queues behind it and the train leaves at the
// receiver's rate (a 40 Mbit/s sender once read 160 on the bed). The receiver answers such a
// train "queued" when its first datagram came much later than that sender's quickest of the
// last 8 (wire/link_probe.h), and "contended" when it arrived at about its own downlink rate
// while other traffic came in; what slips through is rare, so the estimate is the largest
// recent figure that a second probe confirms within 25 % (the same squeeze twice is rarer
// still), and transfers count only until the first probe result. The first
// probes go to peers not probed yet; then every other probe goes to a peer publishing about the
// largest downlink (the one most likely not to be the narrower end), the others to a random live
// peer.
std::optional<ProbeLink> LinkProbes::Send(std::vector<Peer> peers, double uplink_mbps,
                                          uint64_t sent, sync::Rng& rng, TimeMs now) {
  // The order SWIM's sorted member list gave (the shuffle below draws the same numbers).
  std::sort(peers.begin(), peers.end(),
            [](const Peer& a, const Peer& b) { return *a.name < *b.name; });
  if (peers.empty()) return std::nullopt;
  std::shuffle(peers.begin(), peers.end(), rng);
  const size_t pick = Pick(peers, sent);
  // Long enough to span ~20 ms at the largest rate this path might show (the estimate, or a
  // higher figure awaiting confirmation), so that timer and scheduling noise stay small beside
  // it: 256 to 1024 datagrams (0.3 to 1.3 MB). (Sized by a low estimate alone, a fast host's
  // trains lasted 1 ms and mostly measured noise.)
  const double size_mbps = std::max(uplink_mbps, LargestUp().first);
  const int packets =
      static_cast<int>(std::clamp(std::ceil(size_mbps * 1e6 * 0.020 / 1242.0), 256.0, 1024.0));
  id_ = rng() | 1;
  peer_ = *peers[pick].name;
  confirm_.clear();
  probed_.insert(peer_);
  if (probed_.size() > 4096) probed_.clear();
  sent_at_ = now;
  const TimeMs base = sent + 1 <= static_cast<uint64_t>(kFastProbes) ? 2000 : interval_ms_;
  ProbeLink link{id_, *peers[pick].to, packets};
  next_at_ = now + base + static_cast<TimeMs>(rng() % static_cast<uint64_t>(base / 10 + 1));
  return link;
}

size_t LinkProbes::Pick(const std::vector<Peer>& peers, uint64_t sent) const {
  const auto unprobed = std::find_if(peers.begin(), peers.end(),
                                     [&](const Peer& p) { return probed_.count(*p.name) == 0; });
  const auto recheck =
      std::find_if(peers.begin(), peers.end(), [&](const Peer& p) { return *p.name == confirm_; });
  if (recheck != peers.end()) {
    // Our highest figure is unconfirmed: probe that path again to confirm or refute it.
    return static_cast<size_t>(recheck - peers.begin());
  }
  if (sent < static_cast<uint64_t>(kFastProbes) && unprobed != peers.end()) {
    // The first probes go to peers not probed yet: on a small mesh every path is measured
    // within the first seconds (the fast peer that confirms a fast uplink is among them).
    return static_cast<size_t>(unprobed - peers.begin());
  }
  if (sent % 2 != 0) return 0;
  // Peers within 20 % of the largest published downlink count as equal (the first of them in
  // the shuffled order): downlink figures carry noise, and the strict largest kept a peer out
  // for good (on the bed a 640 Mbit/s host whose only 640 Mbit/s peer published about 160, as
  // two 160 Mbit/s peers did, probed one of those every other time for a minute, never the
  // fast one again, and published 160).
  const auto usable = [&](size_t i) { return peers.size() == 1 || *peers[i].name != last_peer_; };
  double best = 0;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (usable(i)) best = std::max(best, static_cast<double>(peers[i].downlink_mbps));
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    if (usable(i) && peers[i].downlink_mbps >= 0.8 * best) return i;
  }
  return 0;
}

bool LinkProbes::OnResult(const ProbeResult& r, const sync::BandwidthEstimate& up, TimeMs now) {
  if (id_ == 0 || r.id != id_) return false;  // given up, or not ours: nothing to learn
  id_ = 0;
  last_peer_ = peer_;
  if (!(r.mbps > 0) || !std::isfinite(r.mbps) || r.mbps > 1e6) return false;
  const double before = With(up, up_, 0);
  auto& rates = up_[peer_];
  rates.push_back(Rate{r.mbps, now});
  if (rates.size() > kRatesPerPeer) rates.erase(rates.begin());
  // A figure well above the estimate that nothing confirms yet: check that path again soon
  // (once per such figure), rather than wait for chance to pick it. The very first figure is
  // the estimate on its own, confirmed by nothing: it is checked too (unchecked, a 640 Mbit/s
  // host's first train, 638, was confirmed only 47 s later, by chance).
  size_t figures = 0;
  for (const auto& [who, rs] : up_) figures += rs.size();
  if (r.mbps > 1.33 * before && (figures == 1 || With(up, up_, 0) < r.mbps)) {
    confirm_ = peer_;
    next_at_ = std::min(next_at_, now + 2000);
    return true;
  }
  // Our largest recent figure still unconfirmed, well above the estimate: its path is probed again
  // every other turn (not hurried) until a figure confirms it or it ages out. Checked only once, a
  // fast path whose receiver read two trains slowly while short of CPU was not probed again, and
  // a 640 Mbit/s host published 168 until its fast figures aged out.
  const auto [top, top_peer] = LargestUp();
  if (top_peer != nullptr && top > 1.33 * With(up, up_, 0) && *top_peer != peer_) {
    confirm_ = *top_peer;
  }
  return true;
}

std::pair<double, const std::string*> LinkProbes::LargestUp() const {
  std::pair<double, const std::string*> top{0, nullptr};
  for (const auto& [who, rates] : up_) {
    for (const Rate& r : rates) {
      if (r.mbps > top.first) top = {r.mbps, &who};
    }
  }
  return top;
}

void LinkProbes::OnReceived(const ProbeReceived& r, TimeMs now) {
  if (!(r.mbps > 0) || !std::isfinite(r.mbps) || r.mbps > 1e6 || r.from.empty()) return;
  auto& rates = down_[r.from];
  rates.push_back(Rate{r.mbps, now});
  if (rates.size() > kRatesPerPeer) rates.erase(rates.begin());
  if (down_.size() > 64) {  // senders are addresses: bounded against churn and spoofing
    auto oldest = std::min_element(down_.begin(), down_.end(), [](const auto& a, const auto& b) {
      return a.second.back().at < b.second.back().at;
    });
    down_.erase(oldest);
  }
}

void LinkProbes::Age(TimeMs now) {
  const TimeMs keep = std::max<TimeMs>(kKeepIntervals * interval_ms_, 60000);
  for (Rates* m : {&up_, &down_}) {
    for (auto it = m->begin(); it != m->end();) {
      auto& rates = it->second;
      rates.erase(std::remove_if(rates.begin(), rates.end(),
                                 [&](const Rate& r) { return now - r.at > keep; }),
                  rates.end());
      it = rates.empty() ? m->erase(it) : std::next(it);
    }
  }
}

}  // namespace meshtrain::node
