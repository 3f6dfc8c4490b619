// libFuzzer target: the agent's RPC request parser (daemon/ops/rpc.h: ParseRpcRequest), which turns
// the JSON of one RPC frame into a plain request or a one-line error without throwing.
// Input: the frame payload as received on the --rpc endpoint.
// Oracles: the sanitizers and no escaping exception; a rejection has a reason; an accepted
// request has a known command, the fields that command needs, and bounded strings that are all
// valid UTF-8; and the replies the agent builds from the request (the error text, or
// a reply echoing its strings) serialize with nlohmann's strict, throwing dump().
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/ops/json_text.h"
#include "daemon/ops/rpc.h"
#include "tests/fuzz/fuzz_common.h"
#include "wire/messages.h"

namespace d = meshtrain::daemon;
namespace g = meshtrain::wire;
using nlohmann::json;

namespace {

void MustSerialize(const json& reply) {
  try {
    FUZZ_CHECK(!reply.dump().empty());
  } catch (const json::exception&) {
    FUZZ_CHECK(!"a reply built from an RPC request does not serialize");
  }
  FUZZ_CHECK(!d::JsonText(reply).empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string error;
  const auto r = d::ParseRpcRequest(data, size, &error);
  if (!r) {
    FUZZ_CHECK(!error.empty());
    MustSerialize({{"ok", false}, {"error", error}});
    return 0;
  }
  for (const std::string* s : {&r->cmd, &r->token, &r->name, &r->key, &r->key_op, &r->log_level}) {
    FUZZ_CHECK(g::ValidUtf8(*s));
  }
  for (const auto& a : r->addrs) FUZZ_CHECK(g::NoControlChars(a));
  if (!r->name.empty()) FUZZ_CHECK(g::NoControlChars(r->name));
  MustSerialize({{"ok", false},
                 {"error", "no member named '" + r->name + "'"},
                 {"cmd", r->cmd},
                 {"addrs", r->addrs},
                 {"op", r->key_op}});
  constexpr size_t kMaxField = 256;
  FUZZ_CHECK(r->cmd.size() <= kMaxField && r->token.size() <= kMaxField);
  FUZZ_CHECK(r->name.size() <= kMaxField && r->key.size() <= kMaxField);
  FUZZ_CHECK(d::TokenMatches(r->token, r->token));
  if (r->cmd == "join") {
    FUZZ_CHECK(!r->addrs.empty() && r->addrs.size() <= 64);
    for (const auto& a : r->addrs) FUZZ_CHECK(a.size() <= kMaxField);
  } else if (r->cmd == "force-leave") {
    FUZZ_CHECK(!r->name.empty());
  } else if (r->cmd == "keys") {
    FUZZ_CHECK(r->key_op == "install" || r->key_op == "use" || r->key_op == "remove" ||
               r->key_op == "list");
  } else if (r->cmd == "monitor") {
    FUZZ_CHECK(d::ValidMonitorLevel(r->log_level));
  } else {
    FUZZ_CHECK(r->cmd == "members" || r->cmd == "status" || r->cmd == "leave" ||
               r->cmd == "export");
  }
  return 0;
}
