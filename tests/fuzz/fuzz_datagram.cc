// libFuzzer target: Codec::DecodeDatagram (plaintext codec, or the sealed one when FUZZ_SEALED).
// Input: the datagram as received (plaintext), or a mode byte and a plaintext envelope to seal
// or a raw wire buffer (sealed; see fuzz_common.h).
// Oracles: a rejection always names a valid reason; an accepted datagram re-encodes to one that
// decodes to the same sender, time, session, counter and body kind; every string is valid UTF-8;
// and a ReplayGuard accepts it once (if stamped) and calls the second delivery a duplicate.
#include "tests/fuzz/fuzz_common.h"
#include "wire/replay_guard.h"

namespace g = meshtrain::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const g::Codec& codec = meshtrain::fuzz::TargetCodec(FUZZ_SEALED);
  const std::vector<uint8_t> wire = meshtrain::fuzz::TargetWire(FUZZ_SEALED, data, size);
  auto why = static_cast<g::Reject>(0xFF);
  const auto d = codec.DecodeDatagram(wire.data(), wire.size(), &why);
  if (!d) {
    FUZZ_CHECK(static_cast<size_t>(why) < g::kNumRejects);
    return 0;
  }
  FUZZ_CHECK(d->sealed == static_cast<bool>(FUZZ_SEALED));
  FUZZ_CHECK(g::ValidNodeName(d->sender) && g::ValidUtf8(d->sender));
  const auto again = codec.EncodeDatagram(*d);
  if (!again.empty()) {
    const auto d2 = codec.DecodeDatagram(again.data(), again.size(), nullptr);
    FUZZ_CHECK(d2.has_value());
    FUZZ_CHECK(d2->sender == d->sender);
    FUZZ_CHECK(d2->sent_ms == d->sent_ms);
    FUZZ_CHECK(d2->session == d->session && d2->counter == d->counter);
    FUZZ_CHECK(d2->body.index() == d->body.index());
  }
  g::ReplayGuard guard;
  if (d->session == 0 || d->counter == 0) {
    FUZZ_CHECK(guard.Admit(*d, 1.0) == g::ReplayGuard::Verdict::kUnstamped);
  } else {
    FUZZ_CHECK(guard.Admit(*d, 1.0) == g::ReplayGuard::Verdict::kFresh);
    FUZZ_CHECK(guard.Admit(*d, 1.0) == g::ReplayGuard::Verdict::kDuplicate);
  }
  return 0;
}
