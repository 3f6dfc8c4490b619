// Agent configuration, config files and the RPC request parser: every bad input gives a clear
// error, never a crash.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/config_file.h"
#include "daemon/ops/rpc.h"
#include "wire/messages.h"

using namespace meshtrain::daemon;

namespace {
std::string WriteTemp(const std::string& body) {
  char path[] = "/tmp/meshtrain-cfg-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  FILE* f = fdopen(fd, "w");
  std::fputs(body.c_str(), f);
  std::fclose(f);
  return path;
}
std::optional<RpcRequest> Parse(const std::string& s, std::string* err) {
  return ParseRpcRequest(reinterpret_cast<const uint8_t*>(s.data()), s.size(), err);
}
}  // namespace

TEST_CASE("AgentConfig::Finalize fills defaults and rejects bad values", "[config]") {
  AgentConfig c;
  c.bind = "127.0.0.2:7000";
  c.name = "n1";
  CHECK(c.Finalize().ok());
  CHECK(c.ResolveAddresses().ok());
  CHECK(c.advertise == "127.0.0.2:7000");

  AgentConfig any;  // 0.0.0.0 is not an address to give peers: the route to the join peer is
  any.name = "n1";
  any.join = {"localhost:7960"};
  CHECK(any.Finalize().ok());
  CHECK(any.ResolveAddresses().ok());
  CHECK(any.advertise == "127.0.0.1:7950");
  CHECK(any.join_resolved == std::vector<std::string>{"127.0.0.1:7960"});
  CHECK(any.advertise_how == "route to 127.0.0.1:7960");

  auto err = [](auto mutate) {
    AgentConfig x;
    x.name = "n";
    mutate(x);
    return x.Finalize().message();
  };
  CHECK(err([](AgentConfig& x) { x.bind = "nonsense"; }).find("--bind") != std::string::npos);
  CHECK(err([](AgentConfig& x) { x.join = {"1.2.3.4"}; }).find("--join") != std::string::npos);
  CHECK(err([](AgentConfig& x) { x.task = "mnist"; }).find("--task") != std::string::npos);
  CHECK(err([](AgentConfig& x) {
          x.relay_mode = meshtrain::membership::Config::RelayMode::kNamed;
          x.relay_name = "bad\nname";
        }).find("--relay") != std::string::npos);
  CHECK(err([](AgentConfig& x) { x.shard = "4/4"; }).find("--shard") != std::string::npos);
  CHECK(err([](AgentConfig& x) { x.name = "bad name"; }).find("--name") != std::string::npos);
  CHECK(err([](AgentConfig& x) { x.slowdown = 0.5; }).find("--slowdown") != std::string::npos);
  CHECK(err([](AgentConfig& x) { x.momentum = 1.0; }).find("--momentum") != std::string::npos);

  AgentConfig t;
  t.name = "n";
  t.profile = meshtrain::membership::TimingProfile::kLocal;
  t.probe_interval_ms = 300;
  REQUIRE(t.Finalize().ok());
  auto m = t.MembershipConfig();
  CHECK(m.probe_interval == 300);
  CHECK(m.probe_timeout == 200);  // the local profile's
  CHECK(m.name == "n");
}

TEST_CASE("config files become arguments; the command line wins", "[config]") {
  const std::string path = WriteTemp(
      "# a comment\n[agent]\nname = \"n1\"\nbind = \"127.0.0.1:7950\" # trailing\n"
      "join = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nretry_join = true\nverbose = false\n"
      "fanout = 3\n");
  std::vector<std::string> out;
  std::string error;
  REQUIRE(
      ExpandAgentConfig({"meshtrain", "agent", "--config", path, "--fanout", "5"}, &out, &error));
  const std::vector<std::string> want = {
      "meshtrain", "agent",       "--name", "n1",          "--bind",       "127.0.0.1:7950",
      "--join",    "127.0.0.1:1", "--join", "127.0.0.1:2", "--retry-join", "--fanout",
      "5"};
  CHECK(out == want);

  std::vector<std::string> same;
  REQUIRE(ExpandAgentConfig({"meshtrain", "members"}, &same, &error));
  CHECK(same == std::vector<std::string>{"meshtrain", "members"});

  CHECK_FALSE(ExpandAgentConfig({"meshtrain", "agent", "--config", "/nonexistent"}, &out, &error));
  CHECK(error.find("/nonexistent") != std::string::npos);
  const std::string bad = WriteTemp("name \"x\"\n");
  CHECK_FALSE(ExpandAgentConfig({"meshtrain", "agent", "--config", bad}, &out, &error));
  CHECK(error.find(":1:") != std::string::npos);
  const std::string bad2 = WriteTemp("Weird Key = 1\n");
  CHECK_FALSE(ExpandAgentConfig({"meshtrain", "agent", "--config=" + bad2}, &out, &error));
  std::remove(path.c_str());
  std::remove(bad.c_str());
  std::remove(bad2.c_str());
}

TEST_CASE("RPC requests are parsed strictly", "[rpc]") {
  std::string err;
  auto r = Parse(R"({"cmd":"join","addrs":["127.0.0.1:1"],"token":"t"})", &err);
  REQUIRE(r);
  CHECK(r->cmd == "join");
  CHECK(r->addrs == std::vector<std::string>{"127.0.0.1:1"});
  CHECK(r->token == "t");
  CHECK(Parse(R"({"cmd":"members"})", &err));
  CHECK(Parse(R"({"cmd":"keys","op":"list"})", &err));
  CHECK(Parse(R"({"cmd":"keys","op":"install","key":"abc"})", &err));
  auto mon = Parse(R"({"cmd":"monitor"})", &err);
  REQUIRE(mon);
  CHECK(mon->log_level == "info");
  mon = Parse(R"({"cmd":"monitor","level":"trace"})", &err);
  REQUIRE(mon);
  CHECK(mon->log_level == "trace");

  for (const char* bad :
       {"", "null", "[]", "{", R"({"cmd":1})", R"({"cmd":"reboot"})", R"({"cmd":"join"})",
        R"({"cmd":"join","addrs":[]})", R"({"cmd":"join","addrs":[1]})", R"({"cmd":"force-leave"})",
        R"({"cmd":"force-leave","name":""})", R"({"cmd":"keys","op":"explode"})",
        R"({"cmd":"keys","op":"use"})", R"({"cmd":"members","token":5})",
        R"({"cmd":"monitor","level":"loud"})", R"({"cmd":"monitor","level":3})",
        R"({"cmd":"monitor","level":"critical"})"}) {
    err.clear();
    INFO(bad);
    CHECK_FALSE(Parse(bad, &err));
    CHECK_FALSE(err.empty());
  }
  std::string huge = R"({"cmd":"members","token":")" + std::string(300, 'x') + "\"}";
  CHECK_FALSE(Parse(huge, &err));
  std::string too_big(kMaxRpcRequestBytes + 1, ' ');
  CHECK_FALSE(Parse(too_big, &err));
}

TEST_CASE("RPC token comparison", "[rpc]") {
  CHECK(TokenMatches("abc", "abc"));
  CHECK_FALSE(TokenMatches("abc", "abd"));
  CHECK_FALSE(TokenMatches("abc", "ab"));
  CHECK_FALSE(TokenMatches("abc", ""));
}

// strings from the RPC, the command line and config files must be valid UTF-8.
TEST_CASE("UTF-8 at the edge: RPC, options, config files", "[config][rpc]") {
  std::string error;
  auto parse = [&error](const std::string& s) {
    error.clear();
    return meshtrain::daemon::ParseRpcRequest(reinterpret_cast<const uint8_t*>(s.data()), s.size(),
                                              &error);
  };
  CHECK_FALSE(parse("{\"cmd\":\"force-leave\",\"name\":\"\xff\xfe\xfd\"}"));
  CHECK_FALSE(parse(R"({"cmd":"force-leave","name":"\udcff"})"));
  CHECK_FALSE(parse(R"({"cmd":"force-leave","name":"a\u0007b"})"));
  CHECK_FALSE(parse("{\"cmd\":\"join\",\"addrs\":[\"\xc0\xaf:1\"]}"));
  CHECK(parse("{\"cmd\":\"force-leave\",\"name\":\"caf\xc3\xa9\"}"));
  // An unknown command's error echoes a prefix cut at a character boundary.
  std::string cmd;
  for (int i = 0; i < 40; ++i) cmd += "\xc3\xa9";
  CHECK_FALSE(parse("{\"cmd\":\"" + cmd + "\"}"));
  CHECK(meshtrain::wire::ValidUtf8(error));

  meshtrain::daemon::AgentConfig c;
  c.cluster = "\xff";
  CHECK(c.Finalize().message().find("--cluster") != std::string::npos);
  meshtrain::daemon::AgentConfig j;
  j.join = {"127.0.0.1:\xff"};
  const std::string e = j.Finalize().message();
  CHECK(e.find("--join") != std::string::npos);
  CHECK(meshtrain::wire::ValidUtf8(e));

  std::vector<std::string> args;
  CHECK_FALSE(meshtrain::daemon::ConfigTextArgs("name = \"n\xff\"\n", "f.toml", &args, &error));
  CHECK(error == "f.toml:1: not valid UTF-8 text");
  CHECK_FALSE(meshtrain::daemon::ConfigTextArgs("name = --config\n", "f.toml", &args, &error));
  CHECK(meshtrain::daemon::ConfigTextArgs("cluster = \"caf\xc3\xa9\"\n", "f.toml", &args, &error));
  CHECK(args == std::vector<std::string>{"--cluster", "caf\xc3\xa9"});
}
