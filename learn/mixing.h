// Parameter mixing and fingerprints for the flat parameter vectors nodes exchange.
//
// MixAverage implements the receiver-side gossip averaging rule of SPEC §6: after k parameter
// vectors x_1..x_k arrived since the last step, x <- (x + sum_j x_j) / (1 + k).
// ParamsCrc32 is a fingerprint of the exact float bytes, for tests and logs that compare models.
//
// Thread-safety: pure functions; the caller makes sure nobody writes the vectors meanwhile.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshtrain::learn {

// x <- (x + sum_j others[j][0..n)) / (1 + k), n = x.size(), k = others.size(). Each pointer must
// address n floats (a received vector already checked against the local model size). With no
// others, x is unchanged. Accumulates in double to keep the mean independent of arrival order up
// to float rounding of the final result.
void MixAverage(Eigen::VectorXf& x, const std::vector<const float*>& others);

// True when all n values are finite: a receiver's last semantic check before mixing, so one
// diverged or malicious peer cannot poison the average with NaN/Inf.
bool ParamsFinite(const float* data, size_t n);

// CRC32 (zlib) of the float bytes as stored in memory (little-endian on supported hosts).
uint32_t ParamsCrc32(const float* data, size_t n);
inline uint32_t ParamsCrc32(const Eigen::VectorXf& x) {
  return ParamsCrc32(x.data(), static_cast<size_t>(x.size()));
}

}  // namespace meshtrain::learn
