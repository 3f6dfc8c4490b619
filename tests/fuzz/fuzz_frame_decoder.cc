// libFuzzer target: FrameDecoder, the TCP stream reassembler.
// Input: byte 0 picks the frame limit (1 + 16 * byte), byte 1 seeds the read sizes (1..64 bytes
// per Feed), the rest is the stream.
// Oracle: however the stream is cut into reads, the decoder yields exactly the payloads, and
// the error verdict, of a one-shot reference parse of the whole stream.
#include <algorithm>
#include <optional>

#include "tests/fuzz/fuzz_common.h"
#include "wire/framing.h"

namespace g = meshtrain::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t max_frame = 1 + size_t{data[0]} * 16;
  uint32_t lcg = data[1];
  const uint8_t* stream = data + 2;
  const size_t len = size - 2;

  // Reference: parse the whole stream at once.
  std::vector<std::vector<uint8_t>> want;
  bool want_error = false;
  for (size_t pos = 0; len - pos >= g::kFrameHeaderBytes;) {
    const size_t n = (size_t{stream[pos]} << 24) | (size_t{stream[pos + 1]} << 16) |
                     (size_t{stream[pos + 2]} << 8) | stream[pos + 3];
    if (n == 0 || n > max_frame) {
      want_error = true;
      break;
    }
    if (len - pos - g::kFrameHeaderBytes < n) break;
    const uint8_t* p = stream + pos + g::kFrameHeaderBytes;
    want.emplace_back(p, p + n);
    pos += g::kFrameHeaderBytes + n;
  }

  g::FrameDecoder dec(max_frame);
  std::vector<std::vector<uint8_t>> got;
  for (size_t pos = 0; pos < len;) {
    lcg = lcg * 1103515245u + 12345u;
    const size_t step = std::min<size_t>(1 + (lcg >> 16) % 64, len - pos);
    dec.Feed(stream + pos, step);
    pos += step;
    while (auto payload = dec.Next()) {
      FUZZ_CHECK(!payload->empty() && payload->size() <= max_frame);
      got.push_back(std::move(*payload));
    }
  }
  FUZZ_CHECK(got == want);
  FUZZ_CHECK(dec.error() == want_error);
  if (dec.error()) FUZZ_CHECK(dec.buffered() == 0);
  return 0;
}
