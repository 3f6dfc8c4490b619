// A small deterministic random number generator (xoshiro256**, seeded through SplitMix64) with the
// few distributions learn/ needs. Unlike std::normal_distribution and friends, whose algorithms
// differ between standard libraries, every draw here is specified bit for bit, so nodes built
// anywhere that share an init seed start from identical parameters (gossip averaging assumes it).
//
// Thread-safety: none; one Rng per thread/owner.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::learn {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& word : s_) word = SplitMix64(&seed);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), n > 0, without modulo bias (rejection sampling).
  uint64_t UniformInt(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = Next();
    } while (x >= limit);
    return x % n;
  }

  // Standard normal via Box-Muller; the second value of each pair is cached.
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1;
    do {
      u1 = Uniform();
    } while (u1 <= 0.0);
    const double u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * M_PI * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

  // Fisher-Yates shuffle.
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(UniformInt(i));
      std::swap((*v)[i - 1], (*v)[j]);
    }
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix64(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// A 64-bit seed from a string (FNV-1a), e.g. the per-node data-order seed from the node name
// (docs/contract.md "Command line": --seed defaults to a hash of the name). Stable across platforms
// and builds.
inline uint64_t SeedFromString(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace meshtrain::learn
