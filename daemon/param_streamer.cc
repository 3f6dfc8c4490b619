#include "daemon/param_streamer.h"

#include <algorithm>
#include <set>

#include "daemon/offload.h"
#include "wire/compress.h"

namespace meshtrain::daemon {

using transport::Bytes;
using transport::TcpHub;

// One round's snapshot as streamed to all its receivers, with the chunks encoded so far.
struct ParamStreamer::Round {
  node::SendParams s;  // holds the snapshot
  uint32_t chunks = 0;
  uint32_t keep = kMaxCached;  // chunks a stream keeps cached ahead of it (kCacheBytes of them)
  std::map<uint32_t, transport::OutFrame> cache;  // encoded chunks not yet sent by all
  std::set<uint32_t> encoding;                    // chunks being encoded
  std::set<TcpHub::ConnId> streams;
};

namespace {

// Chunk `index` of a round's snapshot as a frame (a plain chunk points into the snapshot).
wire::Frame ChunkFrame(const node::SendParams& s, uint32_t index) {
  wire::ParamChunk c =
      wire::EncodeStreamChunk(s.params->data(), static_cast<uint32_t>(s.params->size()), index,
                              s.spec, s.round, s.step, s.chunk_floats, s.span);
  c.final = s.final;
  c.consensus = s.consensus;
  c.covers = s.covers;
  wire::Frame f;
  f.sender = s.sender;
  f.body = std::move(c);
  return f;
}

}  // namespace

ParamStreamer::ParamStreamer(uv_loop_t* loop, const wire::Codec* codec, TcpHub* tcp)
    : loop_(loop), codec_(codec), tcp_(tcp) {
  tcp_->SetDrainObserver([this](TcpHub::ConnId hid) {
    if (Streaming(hid)) Pump(hid);
  });
  tcp_->SetCloseObserver([this](TcpHub::ConnId hid) { Cancel(hid); });
}

ParamStreamer::~ParamStreamer() {
  tcp_->SetDrainObserver(nullptr);
  tcp_->SetCloseObserver(nullptr);
}

std::shared_ptr<ParamStreamer::Round> ParamStreamer::RoundFor(const node::SendParams& s) {
  rounds_.erase(std::remove_if(rounds_.begin(), rounds_.end(),
                               [](const std::weak_ptr<Round>& w) { return w.expired(); }),
                rounds_.end());
  for (const auto& w : rounds_) {
    auto r = w.lock();
    if (r && r->s.params == s.params && r->s.round == s.round && r->s.step == s.step &&
        r->s.final == s.final && r->s.consensus == s.consensus && r->s.covers == s.covers &&
        r->s.span.begin == s.span.begin && r->s.span.end == s.span.end &&
        r->s.spec.kind == s.spec.kind && r->s.chunk_floats == s.chunk_floats &&
        r->s.sender == s.sender) {
      return r;
    }
  }
  auto r = std::make_shared<Round>();
  r->s = s;
  const auto total = static_cast<uint32_t>(s.params->size());
  r->chunks = wire::StreamChunks(total, s.chunk_floats, s.span);
  const uint64_t per_chunk = std::max<uint64_t>(
      1, wire::StreamWireBytes(total, s.spec, s.chunk_floats, s.span) / r->chunks);
  r->keep = static_cast<uint32_t>(std::max<uint64_t>(kMaxCached, kCacheBytes / per_chunk));
  rounds_.push_back(r);
  return r;
}

void ParamStreamer::Start(TcpHub::ConnId hid, const node::SendParams& s) {
  if (hid == 0 || !s.params || s.params->empty() || s.params->size() > UINT32_MAX) return;
  Cancel(hid);
  Stream st;
  st.hid = hid;
  st.round = RoundFor(s);
  st.round->streams.insert(hid);
  streams_.emplace(hid, std::move(st));
  Pump(hid);
}

void ParamStreamer::After(TcpHub::ConnId hid, Bytes frame) {
  auto it = streams_.find(hid);
  if (it == streams_.end()) {
    tcp_->Send(hid, std::move(frame));
    return;
  }
  it->second.after.push_back(std::move(frame));
}

void ParamStreamer::CloseAfter(TcpHub::ConnId hid) {
  auto it = streams_.find(hid);
  if (it == streams_.end()) {
    tcp_->Close(hid);
    return;
  }
  it->second.close_after = true;
}

void ParamStreamer::Cancel(TcpHub::ConnId hid) {
  auto it = streams_.find(hid);
  if (it == streams_.end()) return;
  std::shared_ptr<Round> r = std::move(it->second.round);
  streams_.erase(it);
  r->streams.erase(hid);
  Evict(*r);
}

void ParamStreamer::Pump(TcpHub::ConnId hid) {
  auto it = streams_.find(hid);
  if (it == streams_.end()) return;
  Stream& st = it->second;
  std::shared_ptr<Round> r = st.round;
  // Twice at most: heads built on the loop (EncodeHead) are ready at once and go out in the
  // second pass.
  for (int pass = 0; pass < 2; ++pass) {
    while (st.next < r->chunks && tcp_->QueuedBytes(hid) < kHighWaterBytes) {
      auto c = r->cache.find(st.next);
      if (c == r->cache.end()) break;
      if (!tcp_->Send(hid, c->second)) return Cancel(hid);  // closing under us
      st.next++;
      sent_++;
    }
    if (st.next == r->chunks) {
      Finish(st);
      return;
    }
    // Ask for the chunks this stream needs next, up to kMaxCached ahead of what it queued (so
    // encoding runs ahead of the connection instead of one pool round trip per few chunks: that
    // held a loopback stream to ~100-170 MB/s); the encoders report back through OnEncoded.
    bool ready = false;
    for (uint32_t i = st.next;
         i < r->chunks && i < st.next + kMaxCached && r->encoding.size() < kEncodesInFlight; ++i) {
      if (r->cache.count(i) != 0 || r->encoding.count(i) != 0) continue;
      if (EncodeHead(r, i)) {
        ready = true;
      } else {
        Encode(r, i);
      }
    }
    Evict(*r);
    if (!ready || tcp_->QueuedBytes(hid) >= kHighWaterBytes) return;
  }
}

bool ParamStreamer::EncodeHead(const std::shared_ptr<Round>& r, uint32_t index) {
  const node::SendParams& s = r->s;
  if (codec_->encrypted() || s.spec.kind != wire::Encoding::kNone) return false;
  const wire::Frame frame = ChunkFrame(s, index);
  const auto& c = std::get<wire::ParamChunk>(frame.body);
  if (c.view == nullptr) return false;
  transport::OutFrame f;
  f.tail = reinterpret_cast<const uint8_t*>(c.view);
  f.tail_len = size_t{c.count} * sizeof(float);
  f.tail_owner = s.params;
  auto head = codec_->EncodeChunkHead(frame);
  if (head.empty()) return false;
  f.head = std::make_shared<const Bytes>(std::move(head));
  encoded_++;
  r->cache[index] = std::move(f);
  return true;
}

void ParamStreamer::Finish(Stream& st) {
  const TcpHub::ConnId hid = st.hid;
  std::vector<Bytes> after = std::move(st.after);
  const bool close = st.close_after;
  Cancel(hid);  // the stream is done; `st` is gone
  for (Bytes& b : after) tcp_->Send(hid, std::move(b));
  if (close) tcp_->Close(hid);
}

void ParamStreamer::Evict(Round& r) {
  // A chunk stays while some stream will queue it within its next r.keep chunks (about
  // kCacheBytes of them), so a receiver up to that far behind another sends the same encoding.
  // A chunk that a fast stream already passed and a slow one is not near yet is encoded again
  // when the slow one gets there: evicting by index instead (the lowest first) threw away the
  // slow stream's next chunk whenever the fast one's arrived, and both re-encoded each other's
  // chunks (13x the encodings at fanout 2); a window of 16 chunks still re-encoded 0.5-0.6 of
  // an int8 round's chunks at fanout 2, 32 MB about 0.04 (250 M parameters, model_size.py).
  std::vector<uint32_t> starts;
  for (TcpHub::ConnId hid : r.streams) {
    auto it = streams_.find(hid);
    if (it != streams_.end()) starts.push_back(it->second.next);
  }
  for (auto it = r.cache.begin(); it != r.cache.end();) {
    const uint32_t i = it->first;
    const bool wanted = std::any_of(starts.begin(), starts.end(),
                                    [&](uint32_t s) { return i >= s && i - s < r.keep; });
    it = wanted ? std::next(it) : r.cache.erase(it);
  }
}

void ParamStreamer::Encode(const std::shared_ptr<Round>& round, uint32_t index) {
  round->encoding.insert(index);
  auto out = std::make_shared<transport::OutFrame>();
  Offload(
      loop_,
      [round, index, codec = codec_, out] {
        out->head = std::make_shared<const Bytes>(codec->EncodeFrame(ChunkFrame(round->s, index)));
      },
      [this, life = std::weak_ptr<int>(life_), round, index, out] {
        if (life.expired()) return;
        OnEncoded(round, index, std::move(*out));
      });
}

void ParamStreamer::OnEncoded(const std::shared_ptr<Round>& round, uint32_t index,
                              transport::OutFrame frame) {
  round->encoding.erase(index);
  encoded_++;
  const std::vector<TcpHub::ConnId> hids(round->streams.begin(), round->streams.end());
  if (!frame.head || frame.head->empty()) {
    // Cannot happen for a model the codec accepts; end the transfers rather than stall them.
    failures_++;
    for (TcpHub::ConnId hid : hids) {
      Cancel(hid);
      tcp_->Abort(hid);
    }
    return;
  }
  if (round->streams.empty()) return;
  round->cache[index] = std::move(frame);
  for (TcpHub::ConnId hid : hids) Pump(hid);
}

}  // namespace meshtrain::daemon
