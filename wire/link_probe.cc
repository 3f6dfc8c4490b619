#include "wire/link_probe.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>

#include "wire/crypto.h"
#include "wire/schema/probe_generated.h"

namespace meshtrain::wire {
namespace {

namespace fb = ::flatbuffers;
namespace wp = ::meshtrain::wire::schema::probe;

// Additional data of a sealed header: a probe header never opens as an envelope, or vice versa.
std::string SealAd(const std::string& cluster) { return "meshtrain-probe\n" + cluster; }

}  // namespace

std::vector<uint8_t> EncodeProbe(const ProbeHeader& h, const Keyring* keyring, size_t pad_to) {
  fb::FlatBufferBuilder b(128);
  const auto cluster = b.CreateString(h.cluster);
  wp::HeaderBuilder hb(b);
  hb.add_kind(static_cast<wp::Kind>(h.kind));
  hb.add_cluster(cluster);
  hb.add_id(h.id);
  hb.add_seq(h.seq);
  hb.add_count(h.count);
  hb.add_received(h.received);
  hb.add_rate_bps(h.rate_bps);
  hb.add_sent_ns(h.sent_ns);
  b.Finish(hb.Finish(), wp::HeaderIdentifier());
  std::vector<uint8_t> header(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  if (keyring != nullptr) header = keyring->Seal(header.data(), header.size(), SealAd(h.cluster));
  std::vector<uint8_t> out;
  out.reserve(std::max(pad_to, 3 + header.size()));
  out.push_back(kProbeMarker);
  out.push_back(static_cast<uint8_t>(header.size() >> 8));
  out.push_back(static_cast<uint8_t>(header.size() & 0xff));
  out.insert(out.end(), header.begin(), header.end());
  if (out.size() < pad_to) out.resize(pad_to, 0);
  return out;
}

std::optional<ProbeHeader> DecodeProbe(const uint8_t* data, size_t len, const Keyring* keyring,
                                       const std::string& cluster) {
  if (data == nullptr || len < 3 || len > 65535 || data[0] != kProbeMarker) return std::nullopt;
  const size_t n = (size_t{data[1]} << 8) | data[2];
  if (n == 0 || n > kProbeMaxHeaderBytes || n > len - 3) return std::nullopt;
  std::vector<uint8_t> buf;
  if (keyring != nullptr) {
    auto opened = keyring->Open(data + 3, n, SealAd(cluster));
    if (!opened) return std::nullopt;
    buf = std::move(*opened);
  } else {
    if (data[3] == kSealedMarker) return std::nullopt;  // sealed by a keyed agent: not ours
    buf.assign(data + 3, data + 3 + n);                 // copied: FlatBuffers reads scalars aligned
  }
  fb::Verifier::Options opts;
  opts.max_depth = 2;
  opts.max_tables = 4;
  fb::Verifier verifier(buf.data(), buf.size(), opts);
  if (!wp::VerifyHeaderBuffer(verifier)) return std::nullopt;
  const wp::Header* w = wp::GetHeader(buf.data());
  ProbeHeader h;
  const auto kind = static_cast<uint8_t>(w->kind());
  if (kind != static_cast<uint8_t>(ProbeHeader::Kind::kTrain) &&
      kind != static_cast<uint8_t>(ProbeHeader::Kind::kReport)) {
    return std::nullopt;
  }
  h.kind = static_cast<ProbeHeader::Kind>(kind);
  h.cluster = w->cluster() ? w->cluster()->str() : std::string();
  h.id = w->id();
  h.seq = w->seq();
  h.count = w->count();
  h.received = w->received();
  h.rate_bps = w->rate_bps();
  h.sent_ns = w->sent_ns();
  if (h.cluster != cluster || h.count < 2 || h.count > kProbeMaxCount) return std::nullopt;
  if (h.kind == ProbeHeader::Kind::kTrain && h.seq >= h.count) return std::nullopt;
  if (h.kind == ProbeHeader::Kind::kReport && h.received > h.count) return std::nullopt;
  return h;
}

bool TrainMeter::Add(const std::string& from, uint64_t id, uint16_t seq, uint16_t count,
                     size_t wire_bytes, int64_t arrival_ns, int64_t now_ns, int64_t sent_ns) {
  if (count < 2 || count > kProbeMaxCount || seq >= count) return false;
  auto key = std::make_pair(from, id);
  auto it = trains_.find(key);
  if (it == trains_.end()) {
    if (trains_.size() >= kMaxTrains) return false;
    it = trains_.emplace(std::move(key), Train{}).first;
    it->second.count = count;
    it->second.sent_ns = sent_ns;
    it->second.seen.assign(count, false);
    it->second.arrivals.reserve(count);
  }
  Train& t = it->second;
  if (t.count != count || t.seen[seq]) return false;
  t.seen[seq] = true;
  t.arrivals.emplace_back(arrival_ns, wire_bytes);
  t.last_seen_ns = now_ns;
  if (seq == count - 1 || t.arrivals.size() == count) {
    done_.push_back(Finish(it->first, t));
    trains_.erase(it);
  }
  return true;
}

std::vector<TrainMeter::Result> TrainMeter::Take(int64_t now_ns) {
  for (auto it = trains_.begin(); it != trains_.end();) {
    if (now_ns - it->second.last_seen_ns >= quiet_ns_) {
      done_.push_back(Finish(it->first, it->second));
      it = trains_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<Result> out;
  out.swap(done_);
  return out;
}

TrainMeter::Result TrainMeter::Finish(const std::pair<std::string, uint64_t>& key, Train& t) {
  Result r;
  r.from = key.first;
  r.id = key.second;
  r.count = t.count;
  r.received = static_cast<uint16_t>(t.arrivals.size());
  if (t.arrivals.size() < kMinPackets) return r;
  const auto [first, last] =
      std::minmax_element(t.arrivals.begin(), t.arrivals.end(),
                          [](const auto& a, const auto& b) { return a.first < b.first; });
  const int64_t span = last->first - first->first;
  const int64_t delay = first->first - t.sent_ns;
  int64_t held = 0;  // how much later than this path's quickest the first datagram came
  if (t.sent_ns != 0) {
    if (delays_.size() >= kMaxSources && delays_.count(r.from) == 0) delays_.erase(delays_.begin());
    auto& hist = delays_[r.from];
    hist.push_back(delay);
    if (hist.size() > kDelayHistory) hist.erase(hist.begin());
    held = delay - *std::min_element(hist.begin(), hist.end());
    if (held > std::max<int64_t>(2'000'000, span / 2)) {
      r.queued = true;
      return r;
    }
  }
  r.rate_bps = Rate(std::move(t.arrivals), held);
  return r;
}

double TrainMeter::Rate(std::vector<std::pair<int64_t, size_t>> arrivals, int64_t held_ns) {
  if (arrivals.size() < 2) return 0;
  const auto [first, last] =
      std::minmax_element(arrivals.begin(), arrivals.end(),
                          [](const auto& a, const auto& b) { return a.first < b.first; });
  const int64_t ns = last->first - first->first + std::max<int64_t>(0, held_ns);
  if (ns <= 0) return 0;
  double bytes = 0;
  for (const auto& a : arrivals) bytes += static_cast<double>(a.second);
  bytes -= static_cast<double>(first->second);  // it arrived at the start of the span
  return bytes * 1e9 / static_cast<double>(ns);
}

}  // namespace meshtrain::wire
