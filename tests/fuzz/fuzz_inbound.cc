// libFuzzer targets fuzz_inbound_datagram / fuzz_inbound_frame (FUZZ_FRAME): bytes through
// wire::Inbound, the agent's one inbound path, and every accepted message through the JSON
// writers, as the agent's events and replies would carry its strings.
// Input: a mode byte (mod 3: 0 = the rest is a plaintext wire buffer; 1 = seal the rest with the
// fuzz key; 2 = the rest is a sealed wire buffer as received), then the buffer.
// Oracles: every rejection is counted under a valid reason; an accepted message's strings are
// all valid UTF-8 and an event-like JSON of them serializes with nlohmann's strict (throwing)
// dump() as well as with JsonText; datagrams: the same bytes delivered again are refused as a
// replay (stamped) or as unstamped.
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "daemon/ops/json_text.h"
#include "tests/fuzz/fuzz_common.h"
#include "wire/inbound.h"

namespace g = meshtrain::wire;
namespace ms = meshtrain::membership;
using nlohmann::json;

namespace {

void Str(json* arr, const std::string& s) {
  FUZZ_CHECK(g::ValidUtf8(s));
  arr->push_back(s);
}

void Meta(json* arr, const ms::Meta& m) {
  Str(arr, m.data_addr);
  Str(arr, m.relay);
}

[[maybe_unused]] json Strings(const g::Datagram& d) {
  json a = json::array();
  Str(&a, d.sender);
  if (const auto* rf = std::get_if<g::RelayFrame>(&d.body)) Str(&a, rf->dest);
  if (const auto* p = std::get_if<ms::Packet>(&d.body)) {
    Str(&a, p->from);
    Str(&a, p->from_addr);
    if (const auto* ping = std::get_if<ms::PingMsg>(&p->primary)) Str(&a, ping->target);
    if (const auto* ip = std::get_if<ms::IndirectPingMsg>(&p->primary)) {
      Str(&a, ip->target);
      Str(&a, ip->target_addr);
    }
    for (const ms::Update& u : p->updates) {
      if (const auto* x = std::get_if<ms::AliveMsg>(&u)) {
        Str(&a, x->name);
        Str(&a, x->addr);
        Meta(&a, x->meta);
      } else if (const auto* y = std::get_if<ms::SuspectMsg>(&u)) {
        Str(&a, y->name);
        Str(&a, y->from);
      } else if (const auto* z = std::get_if<ms::DeadMsg>(&u)) {
        Str(&a, z->name);
        Str(&a, z->from);
      } else if (const auto* q = std::get_if<ms::ProgressMsg>(&u)) {
        Str(&a, q->name);
      }
    }
  }
  return a;
}

[[maybe_unused]] json Strings(const g::Frame& f) {
  json a = json::array();
  Str(&a, f.sender);
  if (const auto* pp = std::get_if<g::PushPullMsg>(&f.body)) {
    Str(&a, pp->state.from);
    for (const ms::MemberState& m : pp->state.members) {
      Str(&a, m.name);
      Str(&a, m.addr);
      Meta(&a, m.meta);
    }
  } else if (const auto* r = std::get_if<g::KeyOpReplyMsg>(&f.body)) {
    Str(&a, r->error);
    Str(&a, r->primary);
    for (const auto& k : r->keys) Str(&a, k);
  }
  return a;
}

void Serialize(const json& strings) {
  // The shapes the agent writes: a metrics event, an RPC reply.
  const json event = {{"t", 1.5}, {"event", "member"}, {"strings", strings}};
  try {
    const std::string strict = event.dump();
    FUZZ_CHECK(!strict.empty());
  } catch (const json::exception&) {
    FUZZ_CHECK(!"strict dump threw on an accepted message");
  }
  FUZZ_CHECK(!meshtrain::daemon::JsonText({{"ok", true}, {"members", strings}}).empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  const bool sealed = mode != 0;
  std::vector<uint8_t> wire;
  if (mode == 1) {
    wire = meshtrain::fuzz::SealedCodec().keyring()->Seal(data + 1, size - 1,
                                                          meshtrain::fuzz::kCluster);
  } else {
    wire.assign(data + 1, data + size);
  }
  g::Inbound inbound(&meshtrain::fuzz::TargetCodec(sealed));
#if FUZZ_FRAME
  const auto f = inbound.OnFrame(wire.data(), wire.size());
  FUZZ_CHECK(inbound.rejects().total() == (f ? 0u : 1u));
  if (f) Serialize(Strings(*f));
#else
  const auto d = inbound.OnDatagram(wire.data(), wire.size(), "127.0.0.1:7950", 1.0);
  FUZZ_CHECK(inbound.rejects().total() == (d ? 0u : 1u));
  if (!d) return 0;
  FUZZ_CHECK(d->session != 0 && d->counter != 0);  // the replay guard refuses unstamped ones
  Serialize(Strings(*d));
  FUZZ_CHECK(!inbound.OnDatagram(wire.data(), wire.size(), "127.0.0.1:7950", 2.0));
  FUZZ_CHECK(inbound.rejects().get(g::Reject::kReplay) == 1);
  if (const auto* rf = std::get_if<g::RelayFrame>(&d->body)) {
    // A relay frame: within its limits; its inner datagram as the receiver would
    // take it once delivered, counted when refused, never a relay frame again.
    FUZZ_CHECK(g::ValidNodeName(rf->dest) && rf->inner.size() <= g::kMaxRelayInnerBytes);
    const uint64_t before = inbound.rejects().total();
    const auto inner = inbound.OnRelayed(rf->inner.data(), rf->inner.size(), "127.0.0.1:7950", 3.0);
    FUZZ_CHECK(inbound.rejects().total() == before + (inner ? 0u : 1u));
    if (inner) {
      FUZZ_CHECK(!std::holds_alternative<g::RelayFrame>(inner->body));
      Serialize(Strings(*inner));
    }
  }
#endif
  return 0;
}
