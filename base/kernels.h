// Element-wise kernels over parameter vectors, on the parameter path of every model a node sends
// or receives (the running sum's fold and mix, int8 encode and decode). They are written the way
// base/finite.h is: an inner loop of a fixed trip count over lanes that do not depend on each
// other, so that GCC at -O2 (whose cost model does not vectorize a plain loop over n with an
// epilogue) and clang both emit vector instructions; the tail runs the same arithmetic one value
// at a time. Results are identical to the plain loops they replace: nothing is reassociated.
//
// Thread-safety: pure functions on caller-owned memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace meshtrain::kernels {

constexpr size_t kLanes = 16;

// s[i] += w * x[i] for i < n. s and x must not overlap.
inline void AddScaled(float* __restrict s, const float* __restrict x, float w, size_t n) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) s[i + k] += w * x[i + k];
  }
  for (; i < n; ++i) s[i] += w * x[i];
}

// s[i] = w * x[i] for i < n. s and x must not overlap.
inline void SetScaled(float* __restrict s, const float* __restrict x, float w, size_t n) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) s[i + k] = w * x[i + k];
  }
  for (; i < n; ++i) s[i] = w * x[i];
}

// x[i] = (x[i] + s[i]) * inv for i < n. x and s must not overlap.
inline void MixInto(float* __restrict x, const float* __restrict s, float inv, size_t n) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) x[i + k] = (x[i + k] + s[i + k]) * inv;
  }
  for (; i < n; ++i) x[i] = (x[i] + s[i]) * inv;
}

// s[i] = w * (q[i] * scale), or with kAdd s[i] += w * (q[i] * scale), for i < n: an int8 block
// folded as its dequantized values would be by SetScaled / AddScaled (the same expressions, so
// the same rounding, also where the compiler fuses a multiply and an add).
template <bool kAdd>
inline void FoldInt8(float* __restrict s, const int8_t* __restrict q, float scale, float w,
                     size_t n) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) {
      const float x = static_cast<float>(q[i + k]) * scale;
      if constexpr (kAdd) {
        s[i + k] += w * x;
      } else {
        s[i + k] = w * x;
      }
    }
  }
  for (; i < n; ++i) {
    const float x = static_cast<float>(q[i]) * scale;
    if constexpr (kAdd) {
      s[i] += w * x;
    } else {
      s[i] = w * x;
    }
  }
}

// The largest |v[i]| of n finite floats (0 for n == 0). On the bits: for non-negative finite
// floats the order of the bit patterns is the order of the values, and an integer maximum
// vectorizes where a float one (NaN rules) does not.
inline float MaxAbs(const float* v, size_t n) {
  uint32_t lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    uint32_t bits[kLanes];
    std::memcpy(bits, v + i, sizeof bits);
    for (size_t k = 0; k < kLanes; ++k) lanes[k] = std::max(lanes[k], bits[k] & 0x7FFFFFFFu);
  }
  uint32_t m = 0;
  for (size_t k = 0; k < kLanes; ++k) m = std::max(m, lanes[k]);
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof bits);
    m = std::max(m, bits & 0x7FFFFFFFu);
  }
  float out;
  std::memcpy(&out, &m, sizeof out);
  return out;
}

// round(x * inv) clamped to [-127, 127], for |x * inv| < 2^22. Adding 1.5 * 2^23 rounds to an
// integer (to nearest even, the current mode, as nearbyint) and leaves it in the low mantissa
// bits, so the integer comes from the bits without a float-to-int conversion, and the clamp is
// an integer one: both vectorize where the float forms did not. (The product may be fused into
// the addition where the target has FMA: the rounding is then of the exact product.)
inline int8_t QuantizeOne(float x, float inv) {
  constexpr float kMagic = 12582912.0f;       // 1.5 * 2^23
  constexpr int32_t kMagicBits = 0x4B400000;  // its bit pattern
  const float t = x * inv + kMagic;
  int32_t b;
  std::memcpy(&b, &t, sizeof b);
  b -= kMagicBits;
  b = std::min(127, std::max(-127, b));
  return static_cast<int8_t>(b);
}

// q[i] = QuantizeOne(v[i], inv), and with `decoded`, also decoded[i] = q[i] * scale. The caller
// picks inv = 127 / max|v| (or 0), so |v[i] * inv| <= 127 up to rounding. v, q and decoded must
// not overlap.
inline void QuantizeInt8(const float* __restrict v, size_t n, float inv, float scale,
                         int8_t* __restrict q, float* __restrict decoded) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) q[i + k] = QuantizeOne(v[i + k], inv);
  }
  for (; i < n; ++i) q[i] = QuantizeOne(v[i], inv);
  if (decoded != nullptr) {
    for (i = 0; i + kLanes <= n; i += kLanes) {
      for (size_t k = 0; k < kLanes; ++k) decoded[i + k] = static_cast<float>(q[i + k]) * scale;
    }
    for (; i < n; ++i) decoded[i] = static_cast<float>(q[i]) * scale;
  }
}

// True iff no q[i] (i < n) is -128, the one int8 value the encoder never makes.
inline bool NoInt8Min(const int8_t* q, size_t n) {
  uint8_t bad[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) bad[k] |= static_cast<uint8_t>(q[i + k] == -128);
  }
  uint8_t any = 0;
  for (size_t k = 0; k < kLanes; ++k) any |= bad[k];
  for (; i < n; ++i) any |= static_cast<uint8_t>(q[i] == -128);
  return any == 0;
}

// out[i] = q[i] * scale for i < n; false if some q[i] is -128 (outside what the encoder makes).
// q and out must not overlap.
inline bool DequantizeInt8(const int8_t* __restrict q, size_t n, float scale,
                           float* __restrict out) {
  uint32_t bad = 0;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) {
      bad |= static_cast<uint32_t>(q[i + k] == -128);
      out[i + k] = static_cast<float>(q[i + k]) * scale;
    }
  }
  for (; i < n; ++i) {
    bad |= static_cast<uint32_t>(q[i] == -128);
    out[i] = static_cast<float>(q[i]) * scale;
  }
  return bad == 0;
}

}  // namespace meshtrain::kernels
