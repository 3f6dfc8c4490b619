#include "cli/rpc_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "daemon/json_text.h"
#include "gossip/framing.h"
#include "gossip/net_addr.h"

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

 private:
  int fd_;
};

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

}  // namespace

RpcResult CallAgent(const std::string& rpc_addr, const nlohmann::json& request, int timeout_ms) {
  RpcResult r;
  auto addr = gossip::NetAddr::Parse(rpc_addr);
  if (!addr) {
    r.error = "invalid --rpc address '" + rpc_addr + "' (expected IP:PORT)";
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    r.error = std::string("socket: ") + std::strerror(errno);
    return r;
  }
  const std::string unreachable = "cannot reach the meshtrain agent at " + rpc_addr + ": ";
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr->sa), sizeof(addr->sa)) != 0) {
    if (errno != EINPROGRESS) {
      r.error = unreachable + std::strerror(errno) + " (is `meshtrain agent` running?)";
      return r;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    if (poll(&p, 1, std::min(3000, RemainingMs(deadline))) != 1) {
      r.error = unreachable + "connection timed out";
      return r;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      r.error = unreachable + std::strerror(err) + " (is `meshtrain agent` running?)";
      return r;
    }
  }
  const std::string body = meshtrain::daemon::JsonText(request);
  const auto framed = gossip::EncodeFramed(std::vector<uint8_t>(body.begin(), body.end()));
  size_t off = 0;
  while (off < framed.size()) {
    pollfd p{fd.get(), POLLOUT, 0};
    if (poll(&p, 1, RemainingMs(deadline)) != 1) {
      r.error = unreachable + "timed out sending the request";
      return r;
    }
    ssize_t n = send(fd.get(), framed.data() + off, framed.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      r.error = unreachable + std::strerror(errno);
      return r;
    }
    if (n > 0) off += static_cast<size_t>(n);
  }
  gossip::FrameDecoder decoder(kMaxReply);
  uint8_t buf[65536];
  while (true) {
    if (auto frame = decoder.Next()) {
      r.reply = nlohmann::json::parse(frame->begin(), frame->end(), nullptr, false);
      if (r.reply.is_discarded() || !r.reply.is_object()) {
        r.error = "the agent at " + rpc_addr + " sent a malformed reply";
        return r;
      }
      r.ok = true;
      return r;
    }
    if (decoder.error()) {
      r.error = "the agent at " + rpc_addr + " sent a malformed reply";
      return r;
    }
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, RemainingMs(deadline)) != 1) {
      r.error = "timed out waiting for the agent at " + rpc_addr;
      return r;
    }
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) {
      r.error = "the agent at " + rpc_addr + " closed the connection without replying";
      return r;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      r.error = unreachable + std::strerror(errno);
      return r;
    }
    decoder.Feed(buf, static_cast<size_t>(n));
  }
}

}  // namespace meshtrain::cli
