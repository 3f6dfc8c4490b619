#include "daemon/stamp_clock.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace meshtrain::daemon {

Status StampClock::Start(uint64_t wall_ms, uint64_t mono_ms) {
  uint64_t floor = 0;
  if (!path_.empty()) {
    std::ifstream in(path_);
    std::string text;
    if (in && std::getline(in, text)) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
      // Anything else than a plain number is ignored (the wall clock then decides).
      if (end != text.c_str() && *end == '\0' && v < (uint64_t{1} << 62)) floor = v;
    }
  }
  base_ = std::max(wall_ms, floor + 1);
  mono0_ = mono_ms;
  return path_.empty() ? Status::OK() : Reserve(base_ + kReserveMs);
}

Status StampClock::Renew(uint64_t mono_ms) {
  if (path_.empty()) return Status::OK();
  const uint64_t now = Now(mono_ms);
  if (now + kReserveMs / 2 < reserved_.load()) return Status::OK();
  return Reserve(now + kReserveMs);
}

Status StampClock::Reserve(uint64_t until) {
  const std::string tmp = path_ + ".tmp";
  const std::string text = std::to_string(until) + "\n";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            fsync(fd) == 0;
  if (fd >= 0) close(fd);
  ok = ok && rename(tmp.c_str(), path_.c_str()) == 0;
  if (!ok) {
    const std::string err = std::strerror(errno);
    unlink(tmp.c_str());
    return Status::IOError("cannot write " + path_ + ": " + err);
  }
  reserved_.store(until);
  return Status::OK();
}

}  // namespace meshtrain::daemon
