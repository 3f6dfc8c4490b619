// Key rotation messages (KeyOp / KeyOpReply frames), key fingerprints, and a rotation carried
// out over the codec: install, use and remove travel sealed with the keys in force at the time.
#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "tests/wire/messages.h"
#include "tests/wire/test_keys.h"
#include "wire/codec.h"
#include "wire/crypto.h"

namespace meshtrain::wire {
namespace {

using testing::CheckSame;

using testing::NewKey;

TEST_CASE("keys: fingerprints are short, stable and one-way", "[gossip][keys]") {
  const Key k = NewKey();
  const std::string f = KeyFingerprint(k);
  CHECK(f.size() == kFingerprintChars);
  CHECK(f.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(KeyFingerprint(k) == f);
  // Not a prefix of the key in any encoding we print.
  CHECK(KeyToBase64(k).find(f) == std::string::npos);
  char hex[3];
  std::string key_hex;
  for (uint8_t b : k) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    key_hex += hex;
  }
  CHECK(key_hex.find(f) == std::string::npos);
  // Distinct keys, distinct fingerprints (1000 keys, 64-bit fingerprints).
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(KeyFingerprint(NewKey()));
  CHECK(seen.size() == 1000);
  // A known value pins the algorithm: BLAKE2b-128 of 32 zero bytes, first 8 bytes (Python:
  // hashlib.blake2b(bytes(32), digest_size=16).hexdigest()[:16]).
  CHECK(KeyFingerprint(Key{}) == "ff0f22492f44bac4");
  Key one{};
  one[31] = 1;
  CHECK(KeyFingerprint(one) != KeyFingerprint(Key{}));
}

TEST_CASE("keys: every key op and reply round-trips, plaintext and sealed", "[gossip][keys]") {
  for (const bool sealed : {false, true}) {
    CAPTURE(sealed);
    Codec codec("default", sealed ? std::make_shared<Keyring>(NewKey()) : nullptr);
    for (const KeyOpKind op :
         {KeyOpKind::kInstall, KeyOpKind::kUse, KeyOpKind::kRemove, KeyOpKind::kList}) {
      KeyOpMsg m{op, std::nullopt, 77};
      if (op != KeyOpKind::kList) m.key = NewKey();
      const Frame f{"n1", m, 123};
      const auto bytes = codec.EncodeFrame(f);
      REQUIRE_FALSE(bytes.empty());
      const auto back = codec.DecodeFrame(bytes.data(), bytes.size(), nullptr);
      REQUIRE(back);
      CheckSame(f, *back);
      // Not a datagram body.
      Reject why{};
      CHECK_FALSE(codec.DecodeDatagram(bytes.data(), bytes.size(), &why));
    }
    KeyOpReplyMsg r;
    r.seq = 77;
    r.ok = true;
    for (int i = 0; i < 3; ++i) r.keys.push_back(KeyFingerprint(NewKey()));
    r.primary = r.keys[0];
    for (const auto& reply : {r, KeyOpReplyMsg{5, false, "no such key", {}, ""}}) {
      const Frame f{"n2", reply, 124};
      const auto bytes = codec.EncodeFrame(f);
      REQUIRE_FALSE(bytes.empty());
      const auto back = codec.DecodeFrame(bytes.data(), bytes.size(), nullptr);
      REQUIRE(back);
      CheckSame(f, *back);
    }
  }
}

TEST_CASE("keys: the encoder refuses what the decoder would reject", "[gossip][keys]") {
  Codec codec("default", nullptr);
  auto encodes = [&](const auto& body) { return !codec.EncodeFrame(Frame{"n1", body}).empty(); };
  CHECK_FALSE(encodes(KeyOpMsg{KeyOpKind::kInstall, std::nullopt, 1}));
  CHECK_FALSE(encodes(KeyOpMsg{KeyOpKind::kUse, std::nullopt, 1}));
  CHECK_FALSE(encodes(KeyOpMsg{KeyOpKind::kRemove, std::nullopt, 1}));
  CHECK_FALSE(encodes(KeyOpMsg{KeyOpKind::kList, NewKey(), 1}));
  CHECK_FALSE(encodes(KeyOpMsg{static_cast<KeyOpKind>(0), NewKey(), 1}));
  CHECK_FALSE(encodes(KeyOpMsg{static_cast<KeyOpKind>(5), std::nullopt, 1}));
  CHECK(encodes(KeyOpMsg{KeyOpKind::kList, std::nullopt, 1}));

  const std::string fp = KeyFingerprint(NewKey());
  CHECK(encodes(KeyOpReplyMsg{1, true, "", {fp}, fp}));
  CHECK(encodes(KeyOpReplyMsg{1, true, "", {fp}, ""}));
  CHECK_FALSE(encodes(KeyOpReplyMsg{1, true, "", {fp}, KeyFingerprint(NewKey())}));
  CHECK_FALSE(encodes(KeyOpReplyMsg{1, true, "", {fp, fp}, fp}));
  CHECK_FALSE(encodes(KeyOpReplyMsg{1, true, "", {"XYZ"}, ""}));
  CHECK_FALSE(encodes(KeyOpReplyMsg{1, false, "line\nbreak", {}, ""}));
  CHECK_FALSE(encodes(KeyOpReplyMsg{1, false, std::string(kMaxStringBytes + 1, 'e'), {}, ""}));
  KeyOpReplyMsg many{1, true, "", {}, ""};
  for (size_t i = 0; i <= kMaxKeysInReply; ++i) many.keys.push_back(KeyFingerprint(NewKey()));
  CHECK_FALSE(encodes(many));
  many.keys.pop_back();
  CHECK(encodes(many));
  CHECK(std::string(KeyOpName(KeyOpKind::kRemove)) == "remove");
}

// Serf's rotation sequence carried by KeyOp frames between two agents that share k1. Each op is
// applied by the receiver as the agent would; the point is which frames can be opened when.
TEST_CASE("keys: a rotation carried by key ops keeps both sides talking", "[gossip][keys]") {
  const Key k1 = NewKey(), k2 = NewKey();
  auto ring_a = std::make_shared<Keyring>(k1);
  auto ring_b = std::make_shared<Keyring>(k1);
  Codec a("default", ring_a), b("default", ring_b);
  auto apply = [](Keyring& ring, const KeyOpMsg& op) {
    KeyOpReplyMsg r{op.seq, true, "", {}, ""};
    switch (op.op) {
      case KeyOpKind::kInstall:
        ring.Install(*op.key);
        break;
      case KeyOpKind::kUse:
        r.ok = ring.Use(*op.key);
        break;
      case KeyOpKind::kRemove:
        r.ok = ring.Remove(*op.key);
        break;
      case KeyOpKind::kList:
        break;
    }
    if (!r.ok) r.error = "refused";
    for (const Key& k : ring.Keys()) r.keys.push_back(KeyFingerprint(k));
    r.primary = KeyFingerprint(ring.Primary());
    return r;
  };
  // a sends an op to b; b applies it and answers; a reads the answer.
  auto rpc = [&](KeyOpKind kind, const Key& key) {
    KeyOpMsg op{kind, key, static_cast<uint32_t>(kind)};
    const auto wire = a.EncodeFrame(Frame{"a", op});
    auto in = b.DecodeFrame(wire.data(), wire.size(), nullptr);
    REQUIRE(in);
    const auto reply = apply(*ring_b, std::get<KeyOpMsg>(in->body));
    const auto back_wire = b.EncodeFrame(Frame{"b", reply});
    auto back = a.DecodeFrame(back_wire.data(), back_wire.size(), nullptr);
    REQUIRE(back);
    return std::get<KeyOpReplyMsg>(back->body);
  };
  // 1. install k2 everywhere.
  ring_a->Install(k2);
  auto r = rpc(KeyOpKind::kInstall, k2);
  CHECK(r.ok);
  CHECK(r.keys == std::vector<std::string>{KeyFingerprint(k1), KeyFingerprint(k2)});
  CHECK(r.primary == KeyFingerprint(k1));
  // 2. use k2: a switches first; b still understands a because k2 is installed there.
  REQUIRE(ring_a->Use(k2));
  r = rpc(KeyOpKind::kUse, k2);
  CHECK(r.ok);
  CHECK(r.primary == KeyFingerprint(k2));
  // 3. remove k1 everywhere; removing the primary is refused.
  REQUIRE(ring_a->Remove(k1));
  r = rpc(KeyOpKind::kRemove, k1);
  CHECK(r.ok);
  CHECK(r.keys == std::vector<std::string>{KeyFingerprint(k2)});
  r = rpc(KeyOpKind::kRemove, k2);
  CHECK_FALSE(r.ok);
  CHECK(r.error == "refused");
  // A node that only knows k1 is now locked out.
  Codec old("default", std::make_shared<Keyring>(k1));
  const auto stale = old.EncodeFrame(Frame{"old", KeyOpMsg{KeyOpKind::kList, std::nullopt, 1}});
  Reject why{};
  CHECK_FALSE(b.DecodeFrame(stale.data(), stale.size(), &why));
  CHECK(why == Reject::kAuth);
}

}  // namespace
}  // namespace meshtrain::wire
