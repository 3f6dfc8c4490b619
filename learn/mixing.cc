#include "learn/mixing.h"

#include <zlib.h>

#include <algorithm>

namespace meshtrain::learn {

void MixAverage(Eigen::VectorXf& x, const std::vector<const float*>& others) {
  if (others.empty()) return;
  const Eigen::Index n = x.size();
  const double scale = 1.0 / (1.0 + static_cast<double>(others.size()));
  // Blocked so the double accumulator stays in cache while every input streams once.
  constexpr Eigen::Index kBlock = 4096;
  Eigen::VectorXd acc(std::min(n, kBlock));
  for (Eigen::Index start = 0; start < n; start += kBlock) {
    const Eigen::Index len = std::min(kBlock, n - start);
    auto a = acc.head(len);
    a = x.segment(start, len).cast<double>();
    for (const float* other : others) {
      a += Eigen::Map<const Eigen::VectorXf>(other + start, len).cast<double>();
    }
    x.segment(start, len) = (a * scale).cast<float>();
  }
}

bool ParamsFinite(const float* data, size_t n) {
  return Eigen::Map<const Eigen::VectorXf>(data, static_cast<Eigen::Index>(n)).allFinite();
}

uint32_t ParamsCrc32(const float* data, size_t n) {
  static_assert(sizeof(float) == 4, "IEEE-754 single precision expected");
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(data);
  size_t left = n * sizeof(float);
  while (left > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, bytes, chunk);
    bytes += chunk;
    left -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace meshtrain::learn
