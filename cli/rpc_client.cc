#include "cli/rpc_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>

#include "daemon/ops/json_text.h"
#include "wire/framing.h"
#include "wire/net_addr.h"

namespace meshtrain::cli {
namespace {

constexpr size_t kMaxReply = 16 << 20;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

}  // namespace

namespace {

// Connects to the agent and sends one request frame. -1 with *error set on failure.
int ConnectAndSend(const std::string& rpc_addr, const nlohmann::json& request,
                   std::chrono::steady_clock::time_point deadline, std::string* error) {
  auto addr = wire::NetAddr::Parse(rpc_addr);
  if (!addr) {
    *error = "invalid --rpc address '" + rpc_addr + "' (expected IP:PORT)";
    return -1;
  }
  Fd fd(socket(addr->family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const std::string unreachable = "cannot reach the meshtrain agent at " + rpc_addr + ": ";
  if (connect(fd.get(), &addr->sa.base, addr->len()) != 0) {
    if (errno != EINPROGRESS) {
      *error = unreachable + std::strerror(errno) + " (is `meshtrain agent` running?)";
      return -1;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    if (poll(&p, 1, std::min(3000, RemainingMs(deadline))) != 1) {
      *error = unreachable + "connection timed out";
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      *error = unreachable + std::strerror(err) + " (is `meshtrain agent` running?)";
      return -1;
    }
  }
  const std::string body = meshtrain::daemon::JsonText(request);
  const auto framed = wire::EncodeFramed(std::vector<uint8_t>(body.begin(), body.end()));
  size_t off = 0;
  while (off < framed.size()) {
    pollfd p{fd.get(), POLLOUT, 0};
    if (poll(&p, 1, RemainingMs(deadline)) != 1) {
      *error = unreachable + "timed out sending the request";
      return -1;
    }
    ssize_t n = send(fd.get(), framed.data() + off, framed.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      *error = unreachable + std::strerror(errno);
      return -1;
    }
    if (n > 0) off += static_cast<size_t>(n);
  }
  return fd.release();
}

// Reads reply frames and hands each (a JSON object) to `on_frame` until it returns false, the
// agent closes the connection (`eof_ok`: not an error), or `idle_ms` pass without a frame.
bool ReadFrames(int raw_fd, const std::string& rpc_addr, int idle_ms, bool eof_ok,
                const std::function<bool(nlohmann::json)>& on_frame, std::string* error) {
  Fd fd(raw_fd);
  wire::FrameDecoder decoder(kMaxReply);
  uint8_t buf[65536];
  while (true) {
    while (auto frame = decoder.Next()) {
      auto j = nlohmann::json::parse(frame->begin(), frame->end(), nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        *error = "the agent at " + rpc_addr + " sent a malformed reply";
        return false;
      }
      if (!on_frame(std::move(j))) return true;
    }
    if (decoder.error()) {
      *error = "the agent at " + rpc_addr + " sent a malformed reply";
      return false;
    }
    pollfd p{fd.get(), POLLIN, 0};
    const int rc = poll(&p, 1, idle_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc != 1) {
      *error = "timed out waiting for the agent at " + rpc_addr;
      return false;
    }
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) {
      if (eof_ok) return true;
      *error = "the agent at " + rpc_addr + " closed the connection without replying";
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      *error = "connection to the agent at " + rpc_addr + " failed: " + std::strerror(errno);
      return false;
    }
    decoder.Feed(buf, static_cast<size_t>(n));
  }
}

}  // namespace

RpcResult CallAgent(const std::string& rpc_addr, const nlohmann::json& request, int timeout_ms) {
  RpcResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  const int fd = ConnectAndSend(rpc_addr, request, deadline, &r.error);
  if (fd < 0) return r;
  r.ok = ReadFrames(
      fd, rpc_addr, std::max(1, RemainingMs(deadline)), false,
      [&r](nlohmann::json j) {
        r.reply = std::move(j);
        return false;
      },
      &r.error);
  return r;
}

std::string StreamAgent(const std::string& rpc_addr, const nlohmann::json& request,
                        int idle_timeout_ms, const std::function<bool(nlohmann::json)>& on_frame) {
  std::string error;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(15000);
  const int fd = ConnectAndSend(rpc_addr, request, deadline, &error);
  if (fd < 0) return error;
  if (!ReadFrames(fd, rpc_addr, idle_timeout_ms, true, on_frame, &error)) return error;
  return {};
}

}  // namespace meshtrain::cli
