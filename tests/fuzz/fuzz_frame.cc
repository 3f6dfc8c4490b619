// libFuzzer target: Codec::DecodeFrame (plaintext codec, or the sealed one when FUZZ_SEALED):
// push-pull, parameter chunks and their acknowledgements, key operations and their replies.
// Input: as fuzz_datagram.cc, for one frame payload (no length prefix).
// Oracles: the in-place decoding the agent uses for large frames (DecodeFrameHeld) agrees with
// the copying one; a rejection names a valid reason; an accepted frame satisfies the semantic rules
// the decoder promises (a parameter chunk's values, dense or int8, all finite) and re-encodes to
// one that decodes to the same sender, time and body kind.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <variant>

#include "tests/fuzz/fuzz_common.h"
#include "wire/compress.h"
#include "wire/framing.h"

namespace g = meshtrain::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const g::Codec& codec = meshtrain::fuzz::TargetCodec(FUZZ_SEALED);
  const std::vector<uint8_t> wire = meshtrain::fuzz::TargetWire(FUZZ_SEALED, data, size);
  auto why = static_cast<g::Reject>(0xFF);
  const auto f = codec.DecodeFrame(wire.data(), wire.size(), &why);
  {
    // The agent's path for large frames (Codec::DecodeFrameHeld, read in place in the buffer
    // TcpHub read it into): the same verdict, and for a parameter chunk the same values.
    std::shared_ptr<uint8_t[]> buf(new uint8_t[g::BigFrame::kLead + wire.size() + 1]);
    std::copy(wire.begin(), wire.end(), buf.get() + g::BigFrame::kLead);
    auto held_why = static_cast<g::Reject>(0xFF);
    auto h = codec.DecodeFrameHeld(buf, buf.get() + g::BigFrame::kLead, wire.size(), &held_why);
    FUZZ_CHECK(h.has_value() == f.has_value());
    if (!f) FUZZ_CHECK(held_why == why);
    const auto* hc = h ? std::get_if<g::ParamChunk>(&h->body) : nullptr;
    const auto* fc = f ? std::get_if<g::ParamChunk>(&f->body) : nullptr;
    FUZZ_CHECK((hc == nullptr) == (fc == nullptr));
    if (hc != nullptr) {
      g::ParamChunk a = *hc, b = *fc;
      FUZZ_CHECK(g::ExpandChunk(&a) && g::ExpandChunk(&b));
      FUZZ_CHECK(a.data.size() == b.data.size() &&
                 std::equal(a.data.begin(), a.data.end(), b.data.begin(),
                            [](float x, float y) { return std::memcmp(&x, &y, 4) == 0; }));
    }
  }
  if (!f) {
    FUZZ_CHECK(static_cast<size_t>(why) < g::kNumRejects);
    return 0;
  }
  FUZZ_CHECK(g::ValidNodeName(f->sender));
  if (const auto* c = std::get_if<g::ParamChunk>(&f->body)) {
    // Dense floats, or an int8 chunk kept compact whose every value is finite.
    const size_t n = c->q.empty() ? c->data.size() : c->q.size();
    FUZZ_CHECK(n == c->count && n != 0 && c->chunk < c->chunks);
    FUZZ_CHECK(c->q.empty() || c->data.empty());
    FUZZ_CHECK(uint64_t{c->offset} + n <= c->total);
    g::ParamChunk dense = *c;
    FUZZ_CHECK(g::ExpandChunk(&dense) && dense.data.size() == n);
    for (float v : dense.data) FUZZ_CHECK(std::isfinite(v));
  } else if (const auto* op = std::get_if<g::KeyOpMsg>(&f->body)) {
    FUZZ_CHECK(g::ValidKeyOp(*op));
  } else if (const auto* r = std::get_if<g::KeyOpReplyMsg>(&f->body)) {
    FUZZ_CHECK(g::ValidKeyOpReply(*r));
  } else if (const auto* a = std::get_if<g::ParamAckMsg>(&f->body)) {
    FUZZ_CHECK(a->round != 0);
  }
  const auto again = codec.EncodeFrame(*f);
  if (!again.empty()) {
    const auto f2 = codec.DecodeFrame(again.data(), again.size(), nullptr);
    FUZZ_CHECK(f2.has_value());
    FUZZ_CHECK(f2->sender == f->sender);
    FUZZ_CHECK(f2->sent_ms == f->sent_ms);
    FUZZ_CHECK(f2->body.index() == f->body.index());
  }
  return 0;
}
