// Per-source datagram rate limit: a token bucket per source address ("ip:port" as the transport
// reports it), checked before a datagram is decoded, so a flooding source costs a hash lookup per
// datagram instead of an AEAD open and a FlatBuffers verification. Over-limit datagrams are
// dropped and counted as Reject::kRateLimited.
//
// Each source may send `burst` datagrams at once and `rate` per second on average. The table of
// sources is bounded (max_sources); when full, the least recently seen source is forgotten and
// comes back, if it ever does, with a full bucket. A spoofer cycling through more than
// max_sources addresses therefore gets `burst` datagrams per address: this bounds memory, not the
// aggregate rate of many sources.
//
// Pure: time is an input (seconds on any monotonic clock; a clock going backwards refills
// nothing). Thread-safety: none; one owner (the loop thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>

namespace meshtrain::wire {

struct SourceRateLimiterConfig {
  double rate = 2000;         // datagrams per second per source; <= 0: unlimited
  double burst = 500;         // bucket size in datagrams (at least 1)
  size_t max_sources = 4096;  // sources tracked at once (at least 1)
};

class SourceRateLimiter {
 public:
  struct Stats {
    uint64_t allowed = 0;
    uint64_t dropped = 0;
    uint64_t evicted = 0;  // sources forgotten because the table was full
  };

  explicit SourceRateLimiter(SourceRateLimiterConfig config = {});
  SourceRateLimiter(const SourceRateLimiter&) = delete;
  SourceRateLimiter& operator=(const SourceRateLimiter&) = delete;

  // True if a datagram from `source` arriving at `now_s` is within its budget (and charges it).
  bool Allow(const std::string& source, double now_s);

  const Stats& stats() const { return stats_; }
  size_t sources() const { return buckets_.size(); }
  const SourceRateLimiterConfig& config() const { return config_; }

 private:
  struct Bucket {
    double tokens = 0;
    double last_s = 0;
    std::list<std::string>::iterator lru;  // position in lru_
  };

  SourceRateLimiterConfig config_;
  Stats stats_;
  std::unordered_map<std::string, Bucket> buckets_;
  std::list<std::string> lru_;  // most recently seen first
};

}  // namespace meshtrain::wire
