#include "wire/source_rate_limiter.h"

#include <algorithm>

namespace meshtrain::wire {

SourceRateLimiter::SourceRateLimiter(SourceRateLimiterConfig config) : config_(config) {
  config_.burst = std::max(config_.burst, 1.0);
  config_.max_sources = std::max<size_t>(config_.max_sources, 1);
}

bool SourceRateLimiter::Allow(const std::string& source, double now_s) {
  if (config_.rate <= 0) {
    ++stats_.allowed;
    return true;
  }
  auto it = buckets_.find(source);
  if (it == buckets_.end()) {
    if (buckets_.size() >= config_.max_sources) {
      buckets_.erase(lru_.back());
      lru_.pop_back();
      ++stats_.evicted;
    }
    lru_.push_front(source);
    it = buckets_.emplace(source, Bucket{config_.burst, now_s, lru_.begin()}).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  Bucket& b = it->second;
  if (now_s > b.last_s) {
    b.tokens = std::min(config_.burst, b.tokens + (now_s - b.last_s) * config_.rate);
    b.last_s = now_s;
  }
  if (b.tokens < 1.0) {
    ++stats_.dropped;
    return false;
  }
  b.tokens -= 1.0;
  ++stats_.allowed;
  return true;
}

}  // namespace meshtrain::wire
