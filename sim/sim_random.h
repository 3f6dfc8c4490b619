// Seeded draws shared by the simulators: independent sub-seeds, the gamma compute-time model and
// distinct samples. Everything is computed from learn::Rng so that a seed gives the same numbers
// on every standard library (std::gamma_distribution's algorithm is unspecified).
//
// Thread-safety: pure functions; an Rng has one owner.
#pragma once

#include <cstdint>
#include <vector>

#include "learn/rng.h"

namespace meshtrain::sim {

// SplitMix64 finalizer of (seed, stream, index): independent, reproducible sub-seeds.
uint64_t SubSeed(uint64_t seed, uint64_t stream, uint64_t index = 0);
// The SplitMix64 finalizer: a well-mixed 64-bit value from any input.
uint64_t SplitMix(uint64_t x);

// Gamma(shape, 1) by Marsaglia & Tsang (2000).
double Gamma(learn::Rng& rng, double shape);

// A draw with mean 1 and coefficient of variation `cv` (exactly 1 when cv <= 0).
double UnitGamma(learn::Rng& rng, double cv);

// k distinct values of [0, n) (all of them when k >= n), ascending. Floyd's algorithm.
std::vector<uint32_t> SampleDistinct(learn::Rng& rng, uint32_t n, uint32_t k);

// The q-quantile (0..1) of an ascending vector by the nearest lower rank; 0 when empty.
uint64_t Quantile(const std::vector<uint64_t>& sorted, double q);

}  // namespace meshtrain::sim
