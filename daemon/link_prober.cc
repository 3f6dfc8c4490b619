#include "daemon/link_prober.h"

#include <time.h>

#include <utility>

#include "wire/crypto.h"

namespace meshtrain::daemon {
namespace {

constexpr int64_t kReportWaitNs = 5'000'000'000;  // a report later than this is not matched
constexpr int64_t kSourceGapNs = 500'000'000;     // one new train per source this often
constexpr int64_t kPollMs = 50;

}  // namespace

LinkProber::LinkProber(uv_loop_t* loop, transport::UdpEndpoint* udp,
                       std::shared_ptr<const wire::Keyring> keyring, std::string cluster,
                       std::function<uint64_t()> bytes_in, std::function<double()> downlink_mbps,
                       OnMeasured on_measured, OnReceived on_received)
    : udp_(udp),
      keyring_(std::move(keyring)),
      cluster_(std::move(cluster)),
      bytes_in_(std::move(bytes_in)),
      downlink_mbps_(std::move(downlink_mbps)),
      on_measured_(std::move(on_measured)),
      on_received_(std::move(on_received)),
      timer_(loop) {}

LinkProber::~LinkProber() { Close(); }

void LinkProber::Close() { timer_.Close(); }

int64_t LinkProber::MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void LinkProber::Arm() {
  if (armed_) return;
  armed_ = true;
  timer_.Start(
      kPollMs, [this] { Poll(); }, kPollMs);
}

void LinkProber::Send(const node::ProbeLink& probe) {
  const auto to = wire::NetAddr::Parse(probe.to);
  if (!to || probe.packets < 2 || probe.packets > wire::kProbeMaxCount) return;
  wire::ProbeHeader h;
  h.kind = wire::ProbeHeader::Kind::kTrain;
  h.cluster = cluster_;
  h.id = probe.id;
  h.count = static_cast<uint16_t>(probe.packets);
  timespec wall{};
  clock_gettime(CLOCK_REALTIME, &wall);
  h.sent_ns = static_cast<int64_t>(wall.tv_sec) * 1'000'000'000 + wall.tv_nsec;
  // Encoded first, sent after: the datagrams leave back to back, at the socket's pace.
  std::vector<transport::Bytes> train;
  train.reserve(h.count);
  for (uint16_t seq = 0; seq < h.count; ++seq) {
    h.seq = seq;
    train.push_back(wire::EncodeProbe(h, keyring_.get(), wire::kProbeDatagramBytes));
  }
  for (auto& d : train) udp_->Send(*to, std::move(d));
  pending_[probe.id] = Pending{to->ToString(), MonoNs(), probe.packets};
  stats_.trains_sent++;
  Arm();
}

void LinkProber::OnDatagram(const uint8_t* data, size_t len, const wire::NetAddr& from,
                            int64_t arrival_ns) {
  const auto h = wire::DecodeProbe(data, len, keyring_.get(), cluster_);
  if (!h) {
    stats_.rejected++;
    return;
  }
  const std::string who = from.ToString();
  const int64_t now = MonoNs();
  if (h->kind == wire::ProbeHeader::Kind::kReport) {
    auto it = pending_.find(h->id);
    if (it == pending_.end() || it->second.to != who) {
      stats_.rejected++;
      return;
    }
    const Pending sent = it->second;
    pending_.erase(it);
    stats_.reports_received++;
    on_measured_(node::ProbeResult{h->id, static_cast<double>(h->rate_bps) / 1e6, h->received},
                 sent.to, sent.sent);
    return;
  }
  auto src = sources_.find(who);
  if (src == sources_.end() || src->second.id != h->id) {
    if (src != sources_.end() && now - src->second.started_ns < kSourceGapNs) {
      stats_.rejected++;
      return;
    }
    sources_[who] = Source{h->id, now, from};
  }
  const size_t wire =
      len + (from.family() == AF_INET6 ? wire::kProbeIpUdpOverheadV6 : wire::kProbeIpUdpOverheadV4);
  if (!meter_.Add(who, h->id, h->seq, h->count, wire, arrival_ns, now, h->sent_ns)) {
    stats_.rejected++;
    return;
  }
  const uint64_t in = bytes_in_ ? bytes_in_() : 0;
  auto [o, fresh] = other_in_.try_emplace({who, h->id}, in, in);
  o->second.second = in;
  Arm();
  // The train's last datagram finishes it at once: report without waiting for the timer.
  if (h->seq == h->count - 1) Poll();
}

void LinkProber::Poll() {
  const int64_t now = MonoNs();
  for (auto& r : meter_.Take(now)) {
    // Contended: a backlog of other traffic (parameter transfers) in front of our downlink,
    // draining while the train queues behind it, squeezes the train's datagrams together: the
    // train then shows up to our downlink's rate, not the sender's uplink (a 40 Mbit/s sender
    // read as 160 on the bed). So a train that came in at about our downlink's rate (>= 0.75 of
    // it, or with no downlink estimate yet) while other traffic worth more than a quarter of it
    // arrived is answered as unmeasurable. (Also flagging trains that came in while the downlink
    // was merely busy, rate + other traffic >= 0.8 of it, left the fast hosts of a training
    // mesh almost no valid probe: they read 45-100 Mbit/s for 640.) Partial squeezes (a 40
    // Mbit/s sender read as 57-117 by a busy 160 Mbit/s receiver) are the meter's "queued"
    // trains (the first datagram came late: TrainMeter::Add); the node's confirmation rule
    // (sync::ConfirmedRate) and re-probing keep out what gets past both.
    const auto key = std::make_pair(r.from, r.id);
    if (auto o = other_in_.find(key); o != other_in_.end()) {
      const double other = static_cast<double>(o->second.second - o->second.first);
      const double train = static_cast<double>(r.received) * wire::kProbeDatagramBytes;
      const double down = downlink_mbps_ ? downlink_mbps_() * 1e6 : 0;
      if (r.rate_bps > 0 && other > 0.25 * train && (down <= 0 || r.rate_bps >= 0.75 * down)) {
        r.rate_bps = 0;
        stats_.trains_contended++;
      }
      other_in_.erase(o);
    }
    if (r.queued) stats_.trains_queued++;
    auto src = sources_.find(r.from);
    if (src == sources_.end()) continue;
    wire::ProbeHeader rep;
    rep.kind = wire::ProbeHeader::Kind::kReport;
    rep.cluster = cluster_;
    rep.id = r.id;
    rep.count = r.count;
    rep.received = r.received;
    rep.rate_bps = static_cast<uint64_t>(r.rate_bps);
    udp_->Send(src->second.addr, wire::EncodeProbe(rep, keyring_.get(), 0));
    stats_.trains_measured++;
    if (r.rate_bps > 0) {
      on_received_(node::ProbeReceived{r.from, r.rate_bps / 1e6}, r.received, r.count);
    }
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = now - it->second.at_ns > kReportWaitNs ? pending_.erase(it) : std::next(it);
  }
  for (auto it = sources_.begin(); it != sources_.end();) {
    it = now - it->second.started_ns > 10 * kReportWaitNs ? sources_.erase(it) : std::next(it);
  }
  if (meter_.idle() && pending_.empty() && armed_) {
    armed_ = false;
    timer_.Stop();
  }
}

}  // namespace meshtrain::daemon
