// The daemon's node::Endpoint over the real libuv transports: a connect that fails inside
// TcpHub::Connect (EMFILE here) must come back as a queued ConnClosed input, never re-enter the
// caller, and leave no mapping behind (a round reset inside a synchronous close would leave
// the caller writing through an empty optional).
#include "daemon/net_endpoint.h"

#include <sys/resource.h>
#include <uv.h>

#include <catch2/catch.hpp>
#include <variant>
#include <vector>

#include "transport/transport.h"
#include "wire/codec.h"

using meshtrain::daemon::NetEndpoint;
namespace node = meshtrain::node;
namespace wire = meshtrain::wire;
namespace transport = meshtrain::transport;

TEST_CASE("a connect that fails at once is reported as a later ConnClosed", "[daemon][endpoint]") {
  uv_loop_t loop;
  uv_loop_init(&loop);
  wire::Codec codec("default", nullptr);
  transport::UdpEndpoint udp(&loop);
  transport::TcpHub tcp(&loop, transport::TcpOptions{});
  std::vector<node::Input> fed;
  bool inside = false;  // true while the endpoint call is running
  int fed_inside = 0;
  NetEndpoint ep(
      &codec, &udp, &tcp,
      [&](node::Input in) {
        if (inside) fed_inside++;
        fed.push_back(std::move(in));
      },
      [](node::ConnId, const transport::Bytes&) {});

  const node::ConnId id = node::kFirstOutgoingConn + 1;
  // clang's UBSan checks the dynamic type of every object whose members are called below; a type
  // it has not seen yet is checked by probing memory through a pipe, which fails without a file
  // descriptor and reads as an "invalid vptr". Calls without effect (nothing is connected yet)
  // let it see the endpoint and the hub first.
  ep.SendFrame(id, wire::Frame{"self", wire::ParamAckMsg{1, 1}, 0});
  REQUIRE(tcp.num_connections() == 0);
  REQUIRE(fed.empty());

  // Leave no file descriptor for the socket: socket() fails with EMFILE inside uv_tcp_connect.
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
  rlimit tight = old;
  tight.rlim_cur = 0;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &tight) == 0);
  inside = true;
  ep.Connect(id, "127.0.0.1:9");
  // Frames and closes on the failed connection are dropped, not sent somewhere else.
  ep.SendFrame(id, wire::Frame{"self", wire::ParamAckMsg{1, 1}, 0});
  ep.Close(id, false);
  inside = false;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &old) == 0);

  // The close was handed to the driver's queue (the driver feeds it after the current batch).
  REQUIRE(fed.size() == 1);
  const auto* closed = std::get_if<node::ConnClosed>(&fed[0]);
  REQUIRE(closed != nullptr);
  CHECK(closed->conn == id);
  CHECK_FALSE(closed->clean);
  CHECK(fed_inside == 1);  // delivered to the queue, which the driver drains later
  CHECK(tcp.num_connections() == 0);

  // A normal connect afterwards works and reports its own close later.
  ep.Connect(id + 1, "127.0.0.1:9");
  ep.Close(id + 1, true);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(fed.size() == 2);
  udp.Close();
  tcp.CloseAll();
  CHECK(transport::DrainAndCloseLoop(&loop) == 0);
}
