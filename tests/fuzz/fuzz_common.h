// Shared by the libFuzzer targets in tests/fuzz and by make_corpus: the codecs under test, the
// way the sealed targets turn fuzz input into sealed buffers, and a crash-on-failure check.
// Each target's input format is documented in its own file; make_corpus writes seeds in it.
// Thread-safety: libFuzzer runs one input at a time; the static codecs are const.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "wire/codec.h"
#include "wire/crypto.h"

namespace meshtrain::fuzz {

constexpr const char* kCluster = "default";

// A fixed key, so seeds written by make_corpus open in the targets.
inline wire::Key FuzzKey() {
  wire::Key k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(0x40 + i);
  return k;
}

inline const wire::Codec& PlainCodec() {
  static const wire::Codec codec(kCluster, nullptr);
  return codec;
}

inline const wire::Codec& SealedCodec() {
  static const wire::Codec codec(kCluster, std::make_shared<wire::Keyring>(FuzzKey()));
  return codec;
}

// Sealed targets: a first byte that is even means "the rest is a plaintext envelope: seal it
// with the cluster key", so the fuzzer reaches the verifier and the semantic checks behind the
// AEAD; odd means "the rest is the wire buffer as received" (marker, nonce, tag, size checks).
constexpr uint8_t kSealRest = 0x00;
constexpr uint8_t kRawWire = 0x01;

inline std::vector<uint8_t> SealedInput(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  if ((data[0] & 1) == kRawWire) return std::vector<uint8_t>(data + 1, data + size);
  return SealedCodec().keyring()->Seal(data + 1, size - 1, kCluster);
}

// The codec a codec target decodes with (sealed when FUZZ_SEALED), and the wire bytes it gets
// for a fuzz input.
inline const wire::Codec& TargetCodec(bool sealed) { return sealed ? SealedCodec() : PlainCodec(); }
inline std::vector<uint8_t> TargetWire(bool sealed, const uint8_t* data, size_t size) {
  return sealed ? SealedInput(data, size) : std::vector<uint8_t>(data, data + size);
}

[[noreturn]] inline void Fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz check failed: %s at %s:%d\n", what, file, line);
  std::abort();
}

}  // namespace meshtrain::fuzz

// An oracle violation: abort, so libFuzzer saves the input as a crash.
#define FUZZ_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::meshtrain::fuzz::Fail(#cond, __FILE__, __LINE__))
