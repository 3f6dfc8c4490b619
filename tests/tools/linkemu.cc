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
//
// What the links delivered: the agents' link-capacity probe trains (wire/link_probe.h: UDP
// datagrams of 1200 payload bytes starting with the marker 0x50, sent back to back) are timed
// here as the receiver's kernel sees them, so a test can judge an agent's capacity estimate
// against what the emulator actually delivered rather than against the configured rate (on a
// busy machine a sending agent short of CPU trickles its train, or the emulator falls behind).
// On stdin "trains" prints, one a line, the trains finished since the last "trains" (no
// datagram of their flow for 300 ms):
//   train FROM TO FLOW IN OUT IN_MBIT OUT_MBIT LATE_MS GAP_MS PAUSES AGE_MS
// (FROM/TO port names; FLOW src>dst; IN datagrams read from FROM, OUT written to TO; IN_MBIT
// the rate they were read at, OUT_MBIT the rate they were written at, both as bytes after the
// first over first-to-last, the receiver's arithmetic; LATE_MS the most any of them was written
// after its emulated arrival: how far the emulator ran behind; GAP_MS the longest pause between
// two of them as written and PAUSES the number of pauses of kPauseUs or more, which a receiver
// may take for the train's end; AGE_MS since the last one), then "end".
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
  uint64_t train = 0;  // the probe train it belongs to (0: none)
  bool operator>(const Pending& o) const {
    return at_us != o.at_us ? at_us > o.at_us : seq > o.seq;
  }
};

// A link-capacity probe train's datagrams (wire/link_probe.h, kProbeDatagramBytes and
// kProbeMarker; restated here so that the wire stays free of the code under test).
constexpr size_t kTrainPayloadBytes = 1200;
constexpr uint8_t kTrainMarker = 0x50;
// A flow's datagrams further apart than this start a new train (a node sends a train at most
// every second or so, its datagrams microseconds apart).
constexpr int64_t kTrainGapUs = 200000;
// A train is reported once its flow has been quiet this long.
constexpr int64_t kTrainDoneUs = 300000;
// A pause within a train this long may end it for the receiver (wire/link_probe.h: a train is
// finished when quiet for 200 ms), which then measures and reports its two parts apart.
constexpr int64_t kPauseUs = 100000;

// "src:port>dst:port" of an IPv4 UDP probe-train datagram in an Ethernet frame, else "".
std::string TrainFlow(const std::vector<uint8_t>& f) {
  if (f.size() < 14 + 20 + 8 || f[12] != 0x08 || f[13] != 0x00) return std::string();
  const size_t ip = 14;
  const size_t ihl = size_t{f[ip] & 0x0fu} * 4;
  if ((f[ip] >> 4) != 4 || ihl < 20 || f[ip + 9] != 17) return std::string();
  if (((f[ip + 6] & 0x3fu) | f[ip + 7]) != 0) return std::string();  // a fragment
  const size_t udp = ip + ihl;
  if (f.size() < udp + 8 + kTrainPayloadBytes) return std::string();
  const size_t udp_len = (size_t{f[udp + 4]} << 8) | f[udp + 5];
  if (udp_len != 8 + kTrainPayloadBytes || f[udp + 8] != kTrainMarker) return std::string();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%u.%u.%u.%u:%u>%u.%u.%u.%u:%u", f[ip + 12], f[ip + 13],
                f[ip + 14], f[ip + 15], (unsigned{f[udp]} << 8) | f[udp + 1], f[ip + 16],
                f[ip + 17], f[ip + 18], f[ip + 19], (unsigned{f[udp + 2]} << 8) | f[udp + 3]);
  return buf;
}

// One probe train as the emulator saw it: read from its sender's port, written to its
// receiver's.
struct Train {
  int from = -1, to = -1;
  std::string flow;
  uint64_t in = 0, out = 0;
  int64_t first_in_us = 0, last_in_us = 0, first_out_us = 0, last_out_us = 0;
  uint64_t in_bytes_after_first = 0, out_bytes_after_first = 0;
  int64_t late_us = 0;
  int64_t gap_us = 0;   // the longest pause between two written datagrams
  uint64_t pauses = 0;  // pauses of kPauseUs or more between two written datagrams
};

// Mbit/s of `bytes` over [first, last] us; 0 when the span is empty.
double Mbit(uint64_t bytes, int64_t first_us, int64_t last_us) {
  return last_us > first_us
             ? static_cast<double>(bytes) * 8.0 / static_cast<double>(last_us - first_us)
             : 0.0;
}

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
      : ports_(std::move(ports)), queue_us_(static_cast<int64_t>(queue_ms * 1000)), rng_(seed) {
    port_trains_.resize(ports_.size());
  }

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
    const uint64_t train = NoteTrainIn(from, frame, now);
    queue_.push(Pending{at, seq_++, -1, from, std::move(frame), train});
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
                          k + 1 == outs.size() ? std::move(p.frame) : p.frame, p.train});
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
          if (p.train != 0) NoteTrainOut(p, NowUs());
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

  // Counts a frame read from port `from` towards its probe train; the train's id, 0 if none.
  uint64_t NoteTrainIn(int from, const std::vector<uint8_t>& frame, int64_t now) {
    std::string flow = TrainFlow(frame);
    if (flow.empty()) return 0;
    uint64_t& id = flows_[flow];
    auto it = trains_.find(id);
    if (it == trains_.end() || now - it->second.last_in_us > kTrainGapUs) {
      id = next_train_++;
      Train t;
      t.from = from;
      t.flow = flow;
      t.first_in_us = now;
      it = trains_.emplace(id, std::move(t)).first;
    } else {
      it->second.in_bytes_after_first += frame.size();
    }
    it->second.in++;
    it->second.last_in_us = now;
    return id;
  }

  // A train's frame written to its receiver's port at `now` (the first port it was written to:
  // a flooded frame counts once).
  void NoteTrainOut(const Pending& p, int64_t now) {
    auto it = trains_.find(p.train);
    if (it == trains_.end()) return;
    Train& t = it->second;
    if (t.to < 0) t.to = p.port;
    if (t.to != p.port) return;
    if (t.out == 0) {
      t.first_out_us = now;
    } else {
      t.out_bytes_after_first += p.frame.size();
      t.gap_us = std::max(t.gap_us, now - t.last_out_us);
      if (now - t.last_out_us >= kPauseUs) t.pauses++;
    }
    t.out++;
    t.last_out_us = now;
    t.late_us = std::max(t.late_us, now - p.at_us);
  }

  void PrintTrain(FILE* f, const Train& t, int64_t now) const {
    auto name = [&](int i) {
      return i < 0 ? std::string("-") : ports_[static_cast<size_t>(i)].name;
    };
    std::fprintf(f, "train %s %s %s %llu %llu %.1f %.1f %.1f %.1f %llu %.0f\n",
                 name(t.from).c_str(), name(t.to).c_str(), t.flow.c_str(),
                 static_cast<unsigned long long>(t.in), static_cast<unsigned long long>(t.out),
                 Mbit(t.in_bytes_after_first, t.first_in_us, t.last_in_us),
                 Mbit(t.out_bytes_after_first, t.first_out_us, t.last_out_us),
                 static_cast<double>(t.late_us) / 1e3, static_cast<double>(t.gap_us) / 1e3,
                 static_cast<unsigned long long>(t.pauses),
                 static_cast<double>(now - std::max(t.last_in_us, t.last_out_us)) / 1e3);
  }

  // "trains": the finished trains not printed yet, then "end"; they are forgotten (the test
  // keeps them), the best rate per port stays for the report at exit.
  void PrintTrains() {
    const int64_t now = NowUs();
    for (auto it = trains_.begin(); it != trains_.end();) {
      const Train& t = it->second;
      if (now - std::max(t.last_in_us, t.last_out_us) < kTrainDoneUs) {
        ++it;
        continue;
      }
      PrintTrain(stdout, t, now);
      Remember(t);
      it = trains_.erase(it);
    }
    std::printf("end\n");
    std::fflush(stdout);
  }

  void Remember(const Train& t) {
    PortTrains& s = port_trains_[static_cast<size_t>(t.from)];
    s.trains++;
    s.best_out_mbit =
        std::max(s.best_out_mbit, Mbit(t.out_bytes_after_first, t.first_out_us, t.last_out_us));
    s.best_in_mbit =
        std::max(s.best_in_mbit, Mbit(t.in_bytes_after_first, t.first_in_us, t.last_in_us));
    s.late_us = std::max(s.late_us, t.late_us);
  }

  void Command(const std::string& cmd) {
    if (cmd == "trains") {
      PrintTrains();
      return;
    }
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

  void Report() {
    for (const auto& [id, t] : trains_) Remember(t);
    for (size_t i = 0; i < ports_.size(); ++i) {
      const PortTrains& s = port_trains_[i];
      if (s.trains == 0) continue;
      std::fprintf(stderr,
                   "linkemu %s: %llu probe trains sent, best read at %.0f and written at %.0f "
                   "Mbit/s (configured %.0f), written up to %.1f ms late\n",
                   ports_[i].name.c_str(), static_cast<unsigned long long>(s.trains),
                   s.best_in_mbit, s.best_out_mbit, ports_[i].p.rate_mbit,
                   static_cast<double>(s.late_us) / 1e3);
    }
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
  struct PortTrains {
    uint64_t trains = 0;
    double best_in_mbit = 0, best_out_mbit = 0;
    int64_t late_us = 0;
  };
  std::map<std::string, uint64_t> flows_;  // flow -> its latest train
  std::map<uint64_t, Train> trains_;       // not printed yet
  uint64_t next_train_ = 1;
  std::vector<PortTrains> port_trains_;  // per sending port, for the report at exit
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
