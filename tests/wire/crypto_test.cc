// Keys, keyring rotation and the sealed layout (wire/crypto.h).
#include "wire/crypto.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/wire/test_keys.h"

namespace meshtrain::wire {
namespace {

using testing::NewKey;

std::vector<uint8_t> BytesOf(const std::string& s) { return {s.begin(), s.end()}; }

TEST_CASE("crypto: base64 keys", "[gossip][crypto]") {
  const std::string text = GenerateKeyBase64();
  CHECK(text.size() == 44);
  CHECK(text.back() == '=');
  const auto key = ParseKeyBase64(text);
  REQUIRE(key);
  CHECK(KeyToBase64(*key) == text);
  CHECK(GenerateKeyBase64() != text);

  // A known vector: 32 zero bytes.
  const auto zero = ParseKeyBase64("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
  REQUIRE(zero);
  CHECK(*zero == Key{});

  CHECK_FALSE(ParseKeyBase64(""));
  CHECK_FALSE(ParseKeyBase64("not base64!"));
  CHECK_FALSE(ParseKeyBase64("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="));      // 31 bytes
  CHECK_FALSE(ParseKeyBase64("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="));  // 34 bytes
  CHECK_FALSE(ParseKeyBase64(text + " "));
  // URL-safe alphabet is a different variant.
  CHECK_FALSE(ParseKeyBase64("________________________________________888="));
}

TEST_CASE("crypto: seal and open", "[gossip][crypto]") {
  Keyring ring(NewKey());
  const auto msg = BytesOf("hello, mesh");
  const auto sealed = ring.Seal(msg.data(), msg.size(), "default");
  REQUIRE(sealed.size() == msg.size() + kSealOverhead);
  CHECK(sealed[0] == kSealedMarker);
  const auto opened = ring.Open(sealed.data(), sealed.size(), "default");
  REQUIRE(opened);
  CHECK(*opened == msg);

  // Fresh nonce every time.
  CHECK(ring.Seal(msg.data(), msg.size(), "default") != sealed);
  // The cluster label is authenticated.
  CHECK_FALSE(ring.Open(sealed.data(), sealed.size(), "other"));
  // Any flipped bit fails authentication, including in the nonce and the marker.
  for (size_t i = 0; i < sealed.size(); ++i) {
    auto bad = sealed;
    bad[i] ^= 0x10;
    CHECK_FALSE(ring.Open(bad.data(), bad.size(), "default"));
  }
  // Truncations.
  for (size_t n = 0; n < sealed.size(); ++n) {
    CHECK_FALSE(ring.Open(sealed.data(), n, "default"));
  }
  // A different key.
  Keyring other(NewKey());
  CHECK_FALSE(other.Open(sealed.data(), sealed.size(), "default"));
  // Empty plaintext is legal at this layer.
  const auto empty = ring.Seal(nullptr, 0, "default");
  CHECK(empty.size() == kSealOverhead);
  const auto empty_opened = ring.Open(empty.data(), empty.size(), "default");
  REQUIRE(empty_opened);
  CHECK(empty_opened->empty());
}

TEST_CASE("crypto: keyring install, use, remove and rotation", "[gossip][crypto]") {
  const Key k1 = NewKey(), k2 = NewKey(), k3 = NewKey();
  Keyring ring(k1);
  CHECK(ring.Primary() == k1);
  CHECK(ring.Keys() == std::vector<Key>{k1});

  CHECK_FALSE(ring.Use(k2));  // not installed
  CHECK_FALSE(ring.Remove(k2));
  CHECK_FALSE(ring.Remove(k1));  // the primary cannot be removed

  const auto msg = BytesOf("rotate me");
  const auto old_sealed = ring.Seal(msg.data(), msg.size(), "c");

  ring.Install(k2);
  ring.Install(k2);  // idempotent
  CHECK(ring.Keys() == std::vector<Key>{k1, k2});
  CHECK(ring.Primary() == k1);

  // A peer that already switched to k2 is understood before we switch.
  Keyring peer(k2);
  const auto peer_sealed = peer.Seal(msg.data(), msg.size(), "c");
  CHECK(ring.Open(peer_sealed.data(), peer_sealed.size(), "c"));

  REQUIRE(ring.Use(k2));
  CHECK(ring.Primary() == k2);
  CHECK(ring.Keys().front() == k2);
  // New traffic uses k2: a k1-only node cannot read it.
  const auto new_sealed = ring.Seal(msg.data(), msg.size(), "c");
  CHECK(peer.Open(new_sealed.data(), new_sealed.size(), "c"));
  Keyring k1_only(k1);
  CHECK_FALSE(k1_only.Open(new_sealed.data(), new_sealed.size(), "c"));
  // Traffic sealed with the old key still opens while it is installed...
  CHECK(ring.Open(old_sealed.data(), old_sealed.size(), "c"));
  CHECK_FALSE(ring.Remove(k2));
  CHECK_FALSE(ring.Remove(k3));
  // ...and no longer once it is removed.
  REQUIRE(ring.Remove(k1));
  CHECK(ring.Keys() == std::vector<Key>{k2});
  CHECK_FALSE(ring.Open(old_sealed.data(), old_sealed.size(), "c"));
  CHECK(ring.Open(new_sealed.data(), new_sealed.size(), "c"));
}

}  // namespace
}  // namespace meshtrain::wire
