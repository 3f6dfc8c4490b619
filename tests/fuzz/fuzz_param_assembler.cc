// libFuzzer target: ParamAssembler, fed sequences of parameter chunks in any order, geometry and
// repetition (what a peer can send once each chunk has passed DecodeFrame, and more).
// Input: 7-byte records: round (bit 7: Reset() first), step, chunk, chunks, total, offset, len.
// Chunk data are positions: element i of a chunk is offset + i + 1.
// Oracle: a model is returned only when every float of [0, total) was written by some chunk of
// that round, so each element must equal its index + 1, never a default zero or a stale value.
#include "tests/fuzz/fuzz_common.h"

namespace g = meshtrain::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kRecord = 7;
  g::ParamAssembler assembler;
  for (size_t pos = 0; pos + kRecord <= size; pos += kRecord) {
    const uint8_t* r = data + pos;
    if (r[0] & 0x80) assembler.Reset();
    g::ParamChunk c;
    c.round = r[0] & 0x7F;
    c.step = r[1];
    c.chunk = r[2];
    c.chunks = r[3];
    c.total = r[4];
    c.offset = r[5];
    c.data.resize(r[6]);
    for (size_t i = 0; i < c.data.size(); ++i) c.data[i] = static_cast<float>(c.offset + i + 1);
    const auto model = assembler.Add(c);
    if (!model) continue;
    FUZZ_CHECK(model->round == c.round);
    FUZZ_CHECK(model->step == c.step);
    FUZZ_CHECK(model->params.size() == c.total);
    for (size_t i = 0; i < model->params.size(); ++i) {
      FUZZ_CHECK(model->params[i] == static_cast<float>(i + 1));
    }
    FUZZ_CHECK(!assembler.in_progress());
  }
  return 0;
}
