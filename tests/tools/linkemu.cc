// linkemu: a user-space Ethernet switch with emulated links, for the network-namespace test bed
// (tests/netbed/bed.py). This machine's kernel has tbf and htb but no netem, so delay, jitter and
// loss cannot come from `tc`; linkemu provides them, and rates too, per host link and direction.
//
// Each --port creates a TAP device (in the namespace linkemu runs in; the bed then moves it into
// the host's namespace: the open file descriptor keeps it attached to linkemu). A frame a host
// sends crosses its link "up" (loss, rate, delay), the switch (MAC learning; broadcast and unknown
// destinations are flooded), then the receiver's link "down" (loss, rate, delay). Rates serialize
// frames (a frame of B bytes occupies a link of R Mbit/s for 8B/R us); a link's queue holds at
// most --queue-ms of transmission time, beyond that frames are dropped (tail drop, like tbf's
// latency). One-way delay A->B = delay(A) + delay(B) (+ jitter, uniform, order kept per link).
//
//   linkemu --port NAME:DELAY_MS:RATE_MBIT[:LOSS[:JITTER_MS]] ... [--queue-ms 200] [--seed N]
//   RATE_MBIT 0 = unlimited. Prints "ready" on stdout once every TAP exists; runs until SIGTERM
//   or SIGINT, then prints per-port counters on stderr and exits 0.
// Runtime changes on stdin, one per line: "set NAME DELAY_MS RATE_MBIT LOSS JITTER_MS"
// (e.g. loss 1 to cut a link: a partition).
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000 + ts.tv_nsec / 1000;
}

struct LinkParams {
  double delay_ms = 0;
  double rate_mbit = 0;  // 0 = unlimited
  double loss = 0;
  double jitter_ms = 0;
};

struct Direction {
  int64_t busy_until_us = 0;  // serialization: when the link is free again
  int64_t last_arrival_us = 0;
  uint64_t frames = 0, dropped_loss = 0, dropped_queue = 0;
};

struct Port {
  std::string name;
  int fd = -1;
  LinkParams p;
  Direction up, down;
};

struct Pending {
  int64_t at_us;
  uint64_t seq;
  int port;  // -1: at the switch (after the sender's uplink), else the output port
  int from;  // input port (for flooding)
  std::vector<uint8_t> frame;
  bool operator>(const Pending& o) const {
    return at_us != o.at_us ? at_us > o.at_us : seq > o.seq;
  }
};

bool ParseDouble(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && *out >= 0 && *out < 1e9;
}

bool ParsePort(const std::string& spec, Port* port) {
  std::vector<std::string> f;
  std::stringstream ss(spec);
  for (std::string part; std::getline(ss, part, ':');) f.push_back(part);
  if (f.size() < 3 || f.size() > 5 || f[0].empty() || f[0].size() >= IFNAMSIZ) return false;
  port->name = f[0];
  if (!ParseDouble(f[1], &port->p.delay_ms) || !ParseDouble(f[2], &port->p.rate_mbit)) return false;
  if (f.size() > 3 && (!ParseDouble(f[3], &port->p.loss) || port->p.loss > 1)) return false;
  if (f.size() > 4 && !ParseDouble(f[4], &port->p.jitter_ms)) return false;
  return true;
}

int OpenTap(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

class Switch {
 public:
  Switch(std::vector<Port> ports, double queue_ms, uint64_t seed)
      : ports_(std::move(ports)), queue_us_(static_cast<int64_t>(queue_ms * 1000)), rng_(seed) {}

  // A link direction accepts a frame arriving at `now`: false = dropped. Sets *at to when its
  // last bit has crossed (serialization + queueing + delay + jitter, order kept).
  bool Cross(const LinkParams& p, Direction* d, size_t bytes, int64_t now, int64_t* at) {
    if (p.loss > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p.loss) {
      d->dropped_loss++;
      return false;
    }
    int64_t done = now;
    if (p.rate_mbit > 0) {
      const int64_t start = std::max(now, d->busy_until_us);
      if (start - now > queue_us_) {
        d->dropped_queue++;
        return false;
      }
      done = start + static_cast<int64_t>(static_cast<double>(bytes) * 8.0 / p.rate_mbit);
      d->busy_until_us = done;
    }
    int64_t arrive = done + static_cast<int64_t>(p.delay_ms * 1000);
    if (p.jitter_ms > 0) {
      arrive +=
          static_cast<int64_t>(std::uniform_real_distribution<double>(0, p.jitter_ms * 1000)(rng_));
    }
    arrive = std::max(arrive, d->last_arrival_us);  // a link does not reorder
    d->last_arrival_us = arrive;
    d->frames++;
    *at = arrive;
    return true;
  }

  void Ingress(int from, std::vector<uint8_t> frame, int64_t now) {
    if (frame.size() < 14) return;
    Port& in = ports_[static_cast<size_t>(from)];
    int64_t at = 0;
    if (!Cross(in.p, &in.up, frame.size(), now, &at)) return;
    std::array<uint8_t, 6> src;
    std::copy(frame.begin() + 6, frame.begin() + 12, src.begin());
    if (!(src[0] & 1)) macs_[src] = from;
    queue_.push(Pending{at, seq_++, -1, from, std::move(frame)});
  }

  // At the switch: pick output ports and cross their down links.
  void Forward(Pending&& p, int64_t now) {
    std::array<uint8_t, 6> dst;
    std::copy(p.frame.begin(), p.frame.begin() + 6, dst.begin());
    std::vector<int> outs;
    auto it = (dst[0] & 1) ? macs_.end() : macs_.find(dst);
    if (it != macs_.end()) {
      if (it->second != p.from) outs.push_back(it->second);
    } else {
      for (int i = 0; i < static_cast<int>(ports_.size()); ++i) {
        if (i != p.from) outs.push_back(i);
      }
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      Port& out = ports_[static_cast<size_t>(outs[k])];
      int64_t at = 0;
      if (!Cross(out.p, &out.down, p.frame.size(), now, &at)) continue;
      queue_.push(Pending{at, seq_++, outs[k], p.from,
                          k + 1 == outs.size() ? std::move(p.frame) : p.frame});
    }
  }

  void Run() {
    std::vector<pollfd> fds;
    for (const Port& p : ports_) fds.push_back(pollfd{p.fd, POLLIN, 0});
    fds.push_back(pollfd{STDIN_FILENO, POLLIN, 0});
    std::vector<uint8_t> buf(65536);
    std::string line;
    while (!g_stop) {
      int64_t now = NowUs();
      while (!queue_.empty() && queue_.top().at_us <= now) {
        // Moved out, then popped: the heap compares only at_us/seq, which a move leaves.
        Pending p = std::move(const_cast<Pending&>(queue_.top()));
        queue_.pop();
        if (p.port < 0) {
          // At the switch when its up link delivered it, not when this loop got to it: a late
          // loop would otherwise squeeze the frames it caught up on onto the down link.
          const int64_t at_switch = p.at_us;
          Forward(std::move(p), at_switch);
        } else {
          // A full TAP queue (host not reading) drops the frame, as a NIC would.
          (void)!write(ports_[static_cast<size_t>(p.port)].fd, p.frame.data(), p.frame.size());
        }
      }
      int64_t wait_us = 100000;
      if (!queue_.empty()) wait_us = std::max<int64_t>(0, queue_.top().at_us - now);
      const timespec ts{static_cast<time_t>(wait_us / 1000000),
                        static_cast<long>(wait_us % 1000000) * 1000};
      if (ppoll(fds.data(), fds.size(), &ts, nullptr) < 0 && errno != EINTR) break;
      now = NowUs();
      for (size_t i = 0; i < ports_.size(); ++i) {
        if (!(fds[i].revents & POLLIN)) continue;
        for (int n = 0; n < 64; ++n) {  // drain a burst, then look at the others
          const ssize_t r = read(fds[i].fd, buf.data(), buf.size());
          if (r <= 0) break;
          Ingress(static_cast<int>(i), std::vector<uint8_t>(buf.begin(), buf.begin() + r), now);
        }
      }
      if (fds.back().revents & (POLLIN | POLLHUP)) {
        char c[512];
        const ssize_t r = read(STDIN_FILENO, c, sizeof(c));
        if (r <= 0) {
          fds.back().fd = -1;  // stdin closed: keep running
        } else {
          line.append(c, static_cast<size_t>(r));
          for (size_t nl; (nl = line.find('\n')) != std::string::npos; line.erase(0, nl + 1)) {
            Command(line.substr(0, nl));
          }
        }
      }
    }
  }

  void Command(const std::string& cmd) {
    std::stringstream ss(cmd);
    std::string verb, name;
    LinkParams p;
    if (!(ss >> verb >> name >> p.delay_ms >> p.rate_mbit >> p.loss >> p.jitter_ms) ||
        verb != "set") {
      std::fprintf(stderr, "linkemu: ignoring command \"%s\"\n", cmd.c_str());
      return;
    }
    for (Port& port : ports_) {
      if (port.name == name) {
        port.p = p;
        std::printf("ok %s\n", name.c_str());
        std::fflush(stdout);
        return;
      }
    }
    std::fprintf(stderr, "linkemu: no port %s\n", name.c_str());
  }

  void Report() const {
    for (const Port& p : ports_) {
      std::fprintf(stderr,
                   "linkemu %s: up %llu frames (%llu lost, %llu queue drops), down %llu frames "
                   "(%llu lost, %llu queue drops)\n",
                   p.name.c_str(), static_cast<unsigned long long>(p.up.frames),
                   static_cast<unsigned long long>(p.up.dropped_loss),
                   static_cast<unsigned long long>(p.up.dropped_queue),
                   static_cast<unsigned long long>(p.down.frames),
                   static_cast<unsigned long long>(p.down.dropped_loss),
                   static_cast<unsigned long long>(p.down.dropped_queue));
    }
  }

 private:
  std::vector<Port> ports_;
  int64_t queue_us_;
  std::mt19937_64 rng_;
  std::map<std::array<uint8_t, 6>, int> macs_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> queue_;
  uint64_t seq_ = 0;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "linkemu: %s\nusage: linkemu --port NAME:DELAY_MS:RATE_MBIT[:LOSS[:JITTER_MS]] "
               "... [--queue-ms 200] [--seed N]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Port> ports;
  double queue_ms = 200;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      Usage("a user-space switch with emulated links (see tests/tools/linkemu.cc)");
      return 0;
    }
    if (i + 1 >= argc) return Usage(("missing value after " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--port") {
      Port p;
      if (!ParsePort(v, &p)) return Usage(("bad --port " + v).c_str());
      ports.push_back(p);
    } else if (a == "--queue-ms") {
      if (!ParseDouble(v, &queue_ms)) return Usage("bad --queue-ms");
    } else if (a == "--seed") {
      seed = std::strtoull(v.c_str(), nullptr, 10);
    } else {
      return Usage(("unknown option " + a).c_str());
    }
  }
  if (ports.size() < 2) return Usage("need at least two --port");
  for (Port& p : ports) {
    p.fd = OpenTap(p.name);
    if (p.fd < 0) {
      std::fprintf(stderr, "linkemu: cannot create TAP %s: %s\n", p.name.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::printf("ready\n");
  std::fflush(stdout);
  Switch sw(std::move(ports), queue_ms, seed);
  sw.Run();
  sw.Report();
  return 0;
}
