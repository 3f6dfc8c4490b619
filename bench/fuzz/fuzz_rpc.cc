// libFuzzer target: the agent's RPC request parser (daemon/rpc.h: ParseRpcRequest), which turns
// the JSON of one RPC frame into a plain request or a one-line error without throwing.
// Input: the frame payload as received on the --rpc endpoint.
// Oracles: the sanitizers and no escaping exception; a rejection has a reason; an accepted
// request has a known command, the fields that command needs, and bounded strings.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/fuzz/fuzz_common.h"
#include "daemon/rpc.h"

namespace d = meshtrain::daemon;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string error;
  const auto r = d::ParseRpcRequest(data, size, &error);
  if (!r) {
    FUZZ_CHECK(!error.empty());
    return 0;
  }
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
  } else {
    FUZZ_CHECK(r->cmd == "members" || r->cmd == "status" || r->cmd == "leave");
  }
  return 0;
}
