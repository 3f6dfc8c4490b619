// Multi-host addressing: HOST:PORT syntax, resolution, the advertised address and
// durations. Name resolution uses only "localhost" (in every /etc/hosts) and literals.
#include "daemon/addressing.h"

#include <unistd.h>

#include <catch2/catch.hpp>

#include "daemon/config.h"

namespace meshtrain::daemon {
namespace {

using wire::NetAddr;

NetAddr Addr(const std::string& s) { return *NetAddr::Parse(s); }

// CI containers may run without IPv6 on loopback.
bool HaveIpv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_DGRAM, 0);
  if (fd < 0) return false;
  const NetAddr a = *NetAddr::Parse("[::1]:0");
  const bool ok = bind(fd, &a.sa.base, a.len()) == 0;
  close(fd);
  return ok;
}

std::string Error(AgentConfig c) {
  c.name = "n";
  if (auto st = c.Finalize(); !st.ok()) return st.message();
  return c.ResolveAddresses().message();
}

}  // namespace

TEST_CASE("ParseHostPort: names, IPv4 and bracketed IPv6 literals", "[addressing]") {
  auto v4 = ParseHostPort("10.0.0.2:7950");
  REQUIRE(v4.ok());
  CHECK(v4->host == "10.0.0.2");
  CHECK(v4->port == 7950);
  CHECK(v4->literal);
  auto v6 = ParseHostPort("[::1]:7950");
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(v6->literal);
  auto name = ParseHostPort("node-1.example.org:7950");
  REQUIRE(name.ok());
  CHECK(name->host == "node-1.example.org");
  CHECK_FALSE(name->literal);
  for (const char* bad :
       {"", "host", ":7950", "host:", "host:0", "host:65536", "host:12a", "::1:7950", "[::1]7950",
        "[nonsense]:7950", "[]:1", "a b:1", "-x:1", ".x:1", "h\xc3\xa9:1", "host:123456"}) {
    INFO(bad);
    CHECK_FALSE(ParseHostPort(bad).ok());
  }
  CHECK(ParseHostPort("::1:7950").status().message().find("brackets") != std::string::npos);
}

TEST_CASE("NetAddr: IPv6 literals round-trip; mapped IPv4 becomes IPv4", "[addressing]") {
  auto a = NetAddr::Parse("[::1]:7950");
  REQUIRE(a);
  CHECK(a->family() == AF_INET6);
  CHECK(a->ToString() == "[::1]:7950");
  CHECK(a->IsLoopback());
  CHECK(NetAddr::Parse("[::]:1")->IsAny());
  CHECK(NetAddr::Parse("[fe80::1:2]:80")->ToString() == "[fe80::1:2]:80");
  CHECK_FALSE(NetAddr::Parse("::1:7950"));
  const NetAddr v4 = Addr("10.1.2.3:99");
  const NetAddr mapped = v4.MappedV6();
  CHECK(mapped.family() == AF_INET6);
  CHECK(mapped.ToString() == "[::ffff:10.1.2.3]:99");
  CHECK(NetAddr::FromSockaddr(&mapped.sa.base)->ToString() == "10.1.2.3:99");
}

TEST_CASE("ResolveBlocking: literals and localhost, family by bind", "[addressing]") {
  CHECK(ResolveFamily(Addr("0.0.0.0:1")) == AF_INET);
  CHECK(ResolveFamily(Addr("[::]:1")) == AF_UNSPEC);
  CHECK(ResolveFamily(Addr("[::1]:1")) == AF_INET6);
  auto lit = ResolveBlocking(*ParseHostPort("[::1]:5"), AF_UNSPEC);
  REQUIRE(lit.ok());
  CHECK(lit->ToString() == "[::1]:5");
  auto local = ResolveBlocking(*ParseHostPort("localhost:7950"), AF_INET);
  REQUIRE(local.ok());
  CHECK(local->ToString() == "127.0.0.1:7950");
  auto missing = ResolveBlocking(*ParseHostPort("no-such-host.invalid:7950"), AF_INET);
  CHECK_FALSE(missing.ok());
  CHECK(missing.status().message().find("no-such-host.invalid") != std::string::npos);
}

TEST_CASE("ChooseAdvertise: given, bind, route to the join peer; loopback refused",
          "[addressing]") {
  std::string how;
  auto given = ChooseAdvertise(Addr("0.0.0.0:7950"), Addr("10.0.0.5:7000"), {}, &how);
  REQUIRE(given.ok());
  CHECK(given->ToString() == "10.0.0.5:7000");
  CHECK(how == "given");
  auto bound = ChooseAdvertise(Addr("127.0.0.3:7950"), std::nullopt, {Addr("127.0.0.1:1")}, &how);
  REQUIRE(bound.ok());
  CHECK(bound->ToString() == "127.0.0.3:7950");
  // A wildcard bind: the source address of the route to the first join peer, our port.
  auto routed = ChooseAdvertise(Addr("0.0.0.0:7950"), std::nullopt, {Addr("127.0.0.9:1")}, &how);
  REQUIRE(routed.ok());
  CHECK(routed->ToString() == "127.0.0.1:7950");
  CHECK(how == "route to 127.0.0.9:1");
  if (HaveIpv6Loopback()) {
    auto routed6 = ChooseAdvertise(Addr("[::]:7950"), std::nullopt, {Addr("[::1]:1")}, &how);
    REQUIRE(routed6.ok());
    CHECK(routed6->ToString() == "[::1]:7950");
  }
  // Without a join peer: some non-loopback interface, else loopback; never the wildcard.
  auto alone = ChooseAdvertise(Addr("0.0.0.0:7950"), std::nullopt, {}, &how);
  REQUIRE(alone.ok());
  CHECK_FALSE(alone->IsAny());
  CHECK(alone->port() == 7950);
  CHECK(alone->IsLoopback() == (how == "no other interface: loopback"));
  // Loopback to a remote peer: refused with a clear line.
  auto refused =
      ChooseAdvertise(Addr("127.0.0.1:7950"), std::nullopt, {Addr("10.9.9.9:7950")}, &how);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().IsInvalidArgument());
  CHECK(refused.status().message().find("loopback") != std::string::npos);
  CHECK(refused.status().message().find('\n') == std::string::npos);
  CHECK_FALSE(ChooseAdvertise(Addr("0.0.0.0:7950"), Addr("127.0.0.1:1"),
                              {Addr("127.0.0.1:2"), Addr("192.0.2.1:2")}, &how)
                  .ok());
}

TEST_CASE("AgentConfig: --join/--advertise names, retry options, clock offset", "[addressing]") {
  AgentConfig c;
  c.name = "n";
  c.bind = "0.0.0.0:7950";
  c.join = {"localhost:7960", "127.0.0.1:7950"};  // the second one is ourselves: dropped
  c.advertise = "localhost:7950";
  c.retry_interval = "500ms";
  c.retry_max = 3;
  REQUIRE(c.Finalize().ok());
  CHECK(c.retry_join_interval_ms == 500);
  REQUIRE(c.ResolveAddresses().ok());
  CHECK(c.advertise == "127.0.0.1:7950");
  CHECK(c.join == std::vector<std::string>{"localhost:7960", "127.0.0.1:7950"});
  CHECK(c.join_resolved == std::vector<std::string>{"127.0.0.1:7960"});
  const node::NodeConfig n = c.NodeConfig(1, -1);
  CHECK(n.join == c.join_resolved);
  CHECK(n.retry_join_max == 3);
  CHECK(n.retry_join_interval_ms == 500);
  CHECK(c.Banner(false).find("127.0.0.1:7950 (given)") != std::string::npos);

  AgentConfig defaults;
  defaults.name = "n";
  REQUIRE(defaults.Finalize().ok());
  CHECK(defaults.retry_join_interval_ms == 30000);  // Serf's default
  CHECK(defaults.retry_max == 0);

  AgentConfig v6;
  v6.bind = "[::1]:7950";
  v6.join = {"[::1]:7960"};
  v6.name = "n";
  REQUIRE(v6.Finalize().ok());
  REQUIRE(v6.ResolveAddresses().ok());  // literals: no resolver or interface needed
  CHECK(v6.advertise == "[::1]:7950");
  CHECK(v6.join_resolved == std::vector<std::string>{"[::1]:7960"});

  auto bad = [](auto mutate) {
    AgentConfig x;
    mutate(x);
    return Error(x);
  };
  CHECK(bad([](AgentConfig& x) { x.retry_interval = "soon"; }).find("--retry-interval") !=
        std::string::npos);
  CHECK(bad([](AgentConfig& x) { x.retry_interval = "10ms"; }).find("--retry-interval") !=
        std::string::npos);
  CHECK(bad([](AgentConfig& x) { x.retry_max = -1; }).find("--retry-max") != std::string::npos);
  CHECK(bad([](AgentConfig& x) { x.advertise = "0.0.0.0:1"; }).find("--advertise") !=
        std::string::npos);
  CHECK(bad([](AgentConfig& x) { x.test_clock_offset_s = 1e9; }).find("--test-clock-offset") !=
        std::string::npos);
  CHECK(bad([](AgentConfig& x) {
          x.bind = "127.0.0.1:7950";
          x.join = {"192.0.2.1:7950"};
        }).find("loopback") != std::string::npos);
  // A name that does not resolve: an error at start, unless the retries will resolve it.
  CHECK(bad([](AgentConfig& x) { x.join = {"no-such-host.invalid:1"}; }).find("--retry-join") !=
        std::string::npos);
  AgentConfig later;
  later.name = "n";
  later.bind = "127.0.0.1:7950";
  later.join = {"no-such-host.invalid:1"};
  later.retry_join = true;
  REQUIRE(later.Finalize().ok());
  REQUIRE(later.ResolveAddresses().ok());
  CHECK(later.join_resolved.empty());
}

TEST_CASE("ParseDurationMs", "[addressing]") {
  CHECK(ParseDurationMs("30s") == 30000);
  CHECK(ParseDurationMs("30") == 30000);
  CHECK(ParseDurationMs("1.5s") == 1500);
  CHECK(ParseDurationMs("250ms") == 250);
  CHECK(ParseDurationMs("2m") == 120000);
  CHECK(ParseDurationMs("1h") == 3600000);
  for (const char* bad : {"", "s", "3x", "-1s", "1e3", "1..2s", "99999999999999h"}) {
    INFO(bad);
    CHECK_FALSE(ParseDurationMs(bad));
  }
}

TEST_CASE("ResolveAsync: literals and names on the loop, errors per text", "[addressing]") {
  uv_loop_t loop;
  uv_loop_init(&loop);
  std::vector<std::string> got, errors;
  int calls = 0;
  ResolveAsync(&loop, {"localhost:7", "10.0.0.1:8", "no-such-host.invalid:9", "bad"}, AF_INET,
               [&](std::vector<std::string> a, std::vector<std::string> e) {
                 calls++;
                 got = std::move(a);
                 errors = std::move(e);
               });
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  CHECK(calls == 1);
  CHECK(got == std::vector<std::string>{"127.0.0.1:7", "10.0.0.1:8"});
  CHECK(errors.size() == 2);
}

}  // namespace meshtrain::daemon
