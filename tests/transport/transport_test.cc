// libuv transports on real loopback sockets, and the token bucket in virtual time.
#include "transport/transport.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/rate_limit.h"

using namespace meshtrain::transport;
using meshtrain::wire::NetAddr;

namespace {

// A loop plus helpers to run it until a predicate holds (bounded by count and time).
struct LoopFixture {
  uv_loop_t loop{};
  LoopFixture() { uv_loop_init(&loop); }
  ~LoopFixture() { REQUIRE(DrainAndCloseLoop(&loop) == 0); }

  template <typename Pred>
  bool RunUntil(Pred pred, double max_seconds) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(max_seconds);
    Timer tick(&loop);  // keeps the loop alive and bounds each iteration
    tick.Start(
        5, [] {}, 5);
    for (int i = 0; i < 1000000 && !pred(); ++i) {
      if (std::chrono::steady_clock::now() > deadline) break;
      uv_run(&loop, UV_RUN_ONCE);
    }
    tick.Close();
    return pred();
  }
};

NetAddr Loopback(uint16_t port) { return *NetAddr::Parse("127.0.0.1:" + std::to_string(port)); }

// Binds a listener on an OS-chosen port by trying a range (libuv has no "port 0 + query" for
// our wrapper); returns the port.
uint16_t ListenSomewhere(TcpHub& hub, TcpHub::FrameFn fn) {
  for (uint16_t port = 23000; port < 23400; ++port) {
    if (hub.Listen(Loopback(port), fn).ok()) return port;
  }
  FAIL("no free port");
  return 0;
}

}  // namespace

TEST_CASE("token bucket holds its rate in virtual time", "[rate]") {
  const double rate = 5e6;  // 5 MB/s
  TokenBucket b(rate, rate * 0.1);
  double now = 0, sent = 0;
  const double frame = 256 * 1024;
  while (now < 10.0) {
    const double wait = b.Delay(now);
    if (wait > 0) {
      now += wait;
      continue;
    }
    b.Charge(now, frame);
    sent += frame;
  }
  const double achieved = sent / now;
  INFO("achieved " << achieved / 1e6 << " MB/s");
  CHECK(achieved == Approx(rate).epsilon(0.03));
  TokenBucket unlimited(0, 0);
  CHECK(unlimited.Delay(1) == 0);
}

TEST_CASE("bandwidth estimate: EWMA bounded by the cap, tiny transfers ignored", "[rate]") {
  BandwidthEstimate e;
  CHECK(e.Mbps(0) == 0);
  CHECK(e.Mbps(20) == 20);
  e.Add(100, 1.0);  // too small to mean anything
  CHECK(e.samples() == 0);
  e.Add(10e6, 1.0);
  CHECK(e.Mbps(0) == Approx(10));
  CHECK(e.Mbps(5) == Approx(5));
  e.Add(20e6, 1.0);
  CHECK(e.Mbps(0) == Approx(13));
  // Capacity: the recent peak (a slow transfer does not say the link is slow), aged by Decay,
  // never below the EWMA, bounded by the cap.
  CHECK(e.CapacityMbps(0) == Approx(20));
  CHECK(e.CapacityMbps(15) == Approx(15));
  e.Add(1e6, 1.0);  // one slow transfer: the mean drops, the capacity does not
  CHECK(e.Mbps(0) == Approx(0.7 * 13 + 0.3 * 1));
  CHECK(e.CapacityMbps(0) == Approx(20));
  for (int i = 0; i < 200; ++i) e.Decay(0.9);
  CHECK(e.CapacityMbps(0) == Approx(e.Mbps(0)));
  BandwidthEstimate none;
  CHECK(none.CapacityMbps(0) == 0);
  CHECK(none.CapacityMbps(8) == 8);
}

TEST_CASE("UDP endpoint sends and receives datagrams", "[transport]") {
  LoopFixture f;
  UdpEndpoint a(&f.loop), b(&f.loop);
  std::vector<Bytes> got;
  uint16_t port = 0;
  for (uint16_t p = 23500; p < 23600 && port == 0; ++p) {
    if (b.Bind(Loopback(p), [&](const uint8_t* d, size_t n, const NetAddr&) {
           got.emplace_back(d, d + n);
         }).ok()) {
      port = p;
    }
  }
  REQUIRE(port != 0);
  REQUIRE(a.Send(Loopback(port), Bytes{1, 2, 3}));
  REQUIRE(a.Send(Loopback(port), Bytes(1400, 7)));
  REQUIRE(f.RunUntil([&] { return got.size() == 2; }, 5));
  CHECK(got[0] == Bytes{1, 2, 3});
  CHECK(got[1].size() == 1400);
  a.Close();
  b.Close();
}

TEST_CASE("TCP hub: frames both ways, graceful close after flush", "[transport]") {
  LoopFixture f;
  TcpHub server(&f.loop, TcpOptions{});
  TcpHub client(&f.loop, TcpOptions{});
  std::vector<Bytes> at_server, at_client;
  const uint16_t port = ListenSomewhere(server, [&](TcpHub::ConnId id, Bytes&& b) {
    at_server.push_back(b);
    server.Send(id, Bytes(b.rbegin(), b.rend()));
    server.Close(id);
  });
  bool closed = false;
  int close_status = -1;
  auto id = client.Connect(
      Loopback(port), [&](TcpHub::ConnId, Bytes&& b) { at_client.push_back(b); },
      [&](TcpHub::ConnId, int st) {
        closed = true;
        close_status = st;
      });
  REQUIRE(client.Send(id, Bytes{1, 2, 3, 4}));
  REQUIRE(f.RunUntil([&] { return closed; }, 5));
  CHECK(close_status == 0);
  REQUIRE(at_server.size() == 1);
  REQUIRE(at_client.size() == 1);
  CHECK(at_client[0] == Bytes({4, 3, 2, 1}));
  server.CloseAll();
  client.CloseAll();
}

TEST_CASE("TCP hub: a frame in two pieces, and large frames taken as read", "[transport]") {
  // OutFrame: a head and a tail sent from where they lie (a plain chunk's floats in the
  // snapshot) make one frame; a listener with a BigFrameFn takes frames of kDirectBytes or more
  // in the buffer they were read into, smaller ones through its FrameFn.
  LoopFixture f;
  TcpHub server(&f.loop, TcpOptions{});
  TcpHub client(&f.loop, TcpOptions{});
  std::vector<Bytes> small, big;
  uint16_t port = 0;
  for (uint16_t p = 23400; p < 23800 && port == 0; ++p) {
    if (server
            .Listen(
                Loopback(p), [&](TcpHub::ConnId, Bytes&& b) { small.push_back(std::move(b)); },
                nullptr,
                [&](TcpHub::ConnId, BigFrame&& fr) {
                  CHECK(reinterpret_cast<uintptr_t>(fr.data() + 1) % 16 == 0);
                  big.emplace_back(fr.data(), fr.data() + fr.len);
                })
            .ok()) {
      port = p;
    }
  }
  REQUIRE(port != 0);
  auto id = client.Connect(Loopback(port), nullptr, nullptr);
  auto tail = std::make_shared<Bytes>(300000);
  for (size_t i = 0; i < tail->size(); ++i) (*tail)[i] = static_cast<uint8_t>(i * 7);
  std::weak_ptr<Bytes> tail_alive = tail;
  Bytes whole = {9, 8, 7};
  whole.insert(whole.end(), tail->begin(), tail->end());
  OutFrame two;
  two.head = std::make_shared<const Bytes>(Bytes{9, 8, 7});
  two.tail = tail->data();
  two.tail_len = tail->size();
  two.tail_owner = tail;
  tail.reset();
  REQUIRE(client.Send(id, two));
  two = OutFrame{};
  REQUIRE(client.Send(id, Bytes{1, 2, 3}));
  REQUIRE(client.Send(id, whole));
  REQUIRE(f.RunUntil([&] { return small.size() + big.size() == 3; }, 10));
  CHECK(small == std::vector<Bytes>{Bytes{1, 2, 3}});
  CHECK(big == std::vector<Bytes>{whole, whole});
  CHECK(tail_alive.expired());  // written, then let go
  OutFrame bad;
  bad.head = std::make_shared<const Bytes>(Bytes{1});
  bad.tail_len = 5;  // a length without bytes
  CHECK_FALSE(client.Send(id, bad));
  server.CloseAll();
  client.CloseAll();
}

TEST_CASE("TCP hub: connect failure and oversized frames close the connection", "[transport]") {
  LoopFixture f;
  TcpOptions small;
  small.max_frame_bytes = 1000;
  TcpHub server(&f.loop, small);
  TcpHub client(&f.loop, TcpOptions{});
  int frames = 0;
  const uint16_t port = ListenSomewhere(server, [&](TcpHub::ConnId, Bytes&&) { frames++; });
  bool closed = false;
  auto id = client.Connect(
      Loopback(port), [](TcpHub::ConnId, Bytes&&) {}, [&](TcpHub::ConnId, int) { closed = true; });
  client.Send(id, Bytes(5000, 1));
  REQUIRE(f.RunUntil([&] { return closed && server.framing_errors() == 1; }, 5));
  CHECK(frames == 0);
  server.CloseAll();

  bool refused = false;
  int status = 0;
  client.Connect(
      Loopback(port), [](TcpHub::ConnId, Bytes&&) {},
      [&](TcpHub::ConnId, int st) {
        refused = true;
        status = st;
      });
  REQUIRE(f.RunUntil([&] { return refused; }, 5));
  CHECK(status != 0);
  client.CloseAll();
}

TEST_CASE("TCP hub: idle connections time out, excess connections are refused", "[transport]") {
  LoopFixture f;
  TcpOptions opts;
  opts.idle_timeout_ms = 200;
  opts.max_connections = 2;
  TcpHub server(&f.loop, opts);
  TcpHub client(&f.loop, TcpOptions{});
  const uint16_t port = ListenSomewhere(server, [](TcpHub::ConnId, Bytes&&) {});
  int closed = 0;
  for (int i = 0; i < 4; ++i) {
    client.Connect(
        Loopback(port), [](TcpHub::ConnId, Bytes&&) {}, [&](TcpHub::ConnId, int) { closed++; });
  }
  REQUIRE(f.RunUntil([&] { return closed == 4; }, 5));
  CHECK(server.refused_connections() >= 2);
  CHECK(server.num_connections() == 0);
  server.CloseAll();
  client.CloseAll();
}

// Acceptance: achieved rate within 10 % of the limit over a few seconds on loopback.
TEST_CASE("TCP hub uplink and downlink limits hold within 10 % on loopback", "[transport][rate]") {
  for (const char* which : {"uplink", "downlink"}) {
    LoopFixture f;
    const double limit = 8e6;  // 8 MB/s
    TcpHub server(&f.loop, TcpOptions{});
    TcpHub client(&f.loop, TcpOptions{});
    if (std::string(which) == "uplink") {
      client.SetRateLimits(limit, 0);
    } else {
      server.SetRateLimits(0, limit);
    }
    uint64_t received = 0;
    std::chrono::steady_clock::time_point first, last;
    const uint16_t port = ListenSomewhere(server, [&](TcpHub::ConnId, Bytes&& b) {
      if (received == 0) first = std::chrono::steady_clock::now();
      received += b.size() + 4;
      last = std::chrono::steady_clock::now();
    });
    const size_t frame = 256 * 1024;
    const int frames = 96;  // 24 MiB: 3 s at the limit
    auto id = client.Connect(
        Loopback(port), [](TcpHub::ConnId, Bytes&&) {}, [](TcpHub::ConnId, int) {});
    for (int i = 0; i < frames; ++i) client.Send(id, Bytes(frame, static_cast<uint8_t>(i)));
    const uint64_t total = static_cast<uint64_t>(frames) * (frame + 4);
    REQUIRE(f.RunUntil([&] { return received >= total; }, 30));
    // The first frame passes on the initial burst; measure from its arrival.
    const double secs = std::chrono::duration<double>(last - first).count();
    const double rate = static_cast<double>(received - frame - 4) / secs;
    std::printf("%s limit %.1f MB/s: achieved %.2f MB/s over %.2f s (%.1f %% of the limit)\n",
                which, limit / 1e6, rate / 1e6, secs, 100.0 * rate / limit);
    CHECK(rate <= limit * 1.10);
    CHECK(rate >= limit * 0.90);
    client.CloseAll();
    server.CloseAll();
  }
}

// A handler that throws must not unwind into libuv (which would abort the process);
// the boundary counts it, reports it through the hook, and the loop keeps serving.
TEST_CASE("a throwing handler does not stop the loop", "[transport][exceptions]") {
  LoopFixture f;
  std::vector<std::string> reported;
  SetCallbackErrorHook([&reported](const char* where, const char* what, uint64_t) {
    reported.push_back(std::string(where) + ": " + what);
  });
  const uint64_t before = CallbackExceptions();

  // UDP: every other datagram makes the handler throw; all are still received.
  UdpEndpoint rx(&f.loop), tx(&f.loop);
  int received = 0;
  uint16_t port = 0;
  for (uint16_t p = 24000; p < 24400 && port == 0; ++p) {
    if (rx.Bind(Loopback(p), [&received](const uint8_t* data, size_t len, const NetAddr&) {
            ++received;
            if (len > 0 && data[0] == 'x') throw std::runtime_error("bad datagram");
            if (len > 0 && data[0] == 'y') throw 42;  // not even a std::exception
          }).ok()) {
      port = p;
    }
  }
  REQUIRE(port != 0);
  for (const char* msg : {"x1", "ok", "y2", "ok"}) {
    tx.Send(Loopback(port), Bytes(msg, msg + 2));
  }
  REQUIRE(f.RunUntil([&] { return received == 4; }, 5));
  CHECK(rx.callback_exceptions() == 2);

  // Timer and async handlers that throw: the loop runs on, and a repeating timer keeps firing.
  Timer timer(&f.loop);
  int fired = 0;
  timer.Start(
      1,
      [&fired] {
        ++fired;
        throw std::logic_error("timer");
      },
      1);
  Async async(&f.loop, [] { throw std::runtime_error("async"); });
  async.Send();
  REQUIRE(f.RunUntil([&] { return fired >= 3; }, 5));
  timer.Close();
  async.Close();

  // TCP: a throwing frame handler aborts that connection only; the hub accepts the next one.
  TcpHub server(&f.loop, TcpOptions{}), client(&f.loop, TcpOptions{});
  int frames = 0;
  const uint16_t tcp_port = ListenSomewhere(server, [&frames](TcpHub::ConnId, Bytes&& b) {
    ++frames;
    if (!b.empty() && b[0] == 'x') throw std::runtime_error("bad frame");
  });
  int closed_with_error = 0;
  auto c1 = client.Connect(
      Loopback(tcp_port), [](TcpHub::ConnId, Bytes&&) {},
      [&closed_with_error](TcpHub::ConnId, int) {
        ++closed_with_error;
        throw std::runtime_error("close handler");  // caught too
      });
  client.Send(c1, Bytes{'x'});
  REQUIRE(f.RunUntil([&] { return frames == 1 && closed_with_error == 1; }, 5));
  CHECK(server.callback_exceptions() == 1);
  CHECK(client.callback_exceptions() == 1);
  auto c2 = client.Connect(
      Loopback(tcp_port), [](TcpHub::ConnId, Bytes&&) {}, nullptr);
  client.Send(c2, Bytes{'o', 'k'});
  REQUIRE(f.RunUntil([&] { return frames == 2; }, 5));

  // 2 udp + >= 3 timer + 1 async + 1 frame + 1 close.
  CHECK(CallbackExceptions() - before >= 8);
  if (before == 0) {  // the hook reports the 1st, 2nd, 4th, 8th, ... exception of the process
    REQUIRE(reported.size() >= 4);
    CHECK(reported[0] == "udp recv: bad datagram");
    CHECK(reported[1] == "udp recv: unknown exception");
  }
  SetCallbackErrorHook(nullptr);
  rx.Close();
  tx.Close();
  server.CloseAll();
  client.CloseAll();
}
