// Cluster encryption (docs/contract.md "Wire format", `--encrypt`): a keyring of 32-byte keys and
// the sealed datagram / frame layout, built on libsodium's XChaCha20-Poly1305 IETF AEAD with the
// cluster label as associated data, so a buffer sealed for one cluster never opens in another.
//
// Sealed layout:    kSealedMarker | 24-byte random nonce | ciphertext | 16-byte tag
// Plaintext layout: kPlainMarker  | payload
// The marker lets each side reject the other mode outright: an encrypted agent refuses
// plaintext and a plaintext agent refuses sealed traffic (both are authentication failures).
//
// Like memberlist's keyring, several keys may be installed at once so a cluster can rotate keys
// without downtime: install the new key everywhere, make it primary everywhere, then remove the
// old one. Seal always uses the primary key; Open tries every installed key.
//
// Thread-safety: Keyring is internally synchronized (the RPC thread may rotate keys while the
// loop thread seals and opens). The free functions are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::wire {

constexpr size_t kKeyBytes = 32;
constexpr size_t kNonceBytes = 24;       // crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
constexpr size_t kTagBytes = 16;         // crypto_aead_xchacha20poly1305_ietf_ABYTES
constexpr uint8_t kPlainMarker = 0x4D;   // 'M': plaintext envelope follows
constexpr uint8_t kSealedMarker = 0xA1;  // XChaCha20-Poly1305 sealed envelope follows
// Bytes a sealed buffer adds to its payload, and a plaintext one.
constexpr size_t kSealOverhead = 1 + kNonceBytes + kTagBytes;
constexpr size_t kPlainOverhead = 1;

using Key = std::array<uint8_t, kKeyBytes>;

// Initializes libsodium once per process; false if it cannot be used (then nothing seals).
bool InitSodium();

// A fresh random key, standard base64 (sodium_base64_VARIANT_ORIGINAL, 44 characters).
std::string GenerateKeyBase64();
// Parses a standard base64 key; nullopt unless it decodes to exactly 32 bytes.
std::optional<Key> ParseKeyBase64(const std::string& text);
std::string KeyToBase64(const Key& key);
// Standard base64 of arbitrary bytes, and back (nullopt on any invalid or trailing character).
std::string BytesToBase64(const uint8_t* data, size_t len);
std::optional<std::vector<uint8_t>> Base64ToBytes(const std::string& text);
// A short public name for a key: the first 8 bytes of its BLAKE2b-128 hash
// (crypto_generichash), as 16 lowercase hex characters. One-way, so it may be printed, logged
// and sent in KeyOp replies; 64 bits tell a handful of installed keys apart.
std::string KeyFingerprint(const Key& key);
constexpr size_t kFingerprintChars = 16;

class Keyring {
 public:
  // The keyring starts with one installed key, which is primary.
  explicit Keyring(const Key& primary);
  ~Keyring();  // wipes the keys from memory
  Keyring(const Keyring&) = delete;
  Keyring& operator=(const Keyring&) = delete;

  // Adds a key (no-op if already installed). It is used for opening only until Use().
  void Install(const Key& key);
  // Makes an installed key primary. False if it is not installed.
  bool Use(const Key& key);
  // Uninstalls a key. False if it is the primary or not installed.
  bool Remove(const Key& key);
  // Installed keys, primary first.
  std::vector<Key> Keys() const;
  Key Primary() const;

  // Seals `plaintext` with the primary key into the sealed layout (marker, nonce, ciphertext).
  std::vector<uint8_t> Seal(const uint8_t* plaintext, size_t len, const std::string& ad) const;
  // Opens a buffer in the sealed layout with any installed key, primary first. Nullopt when the
  // marker is wrong, the buffer is too short, or no key authenticates it.
  std::optional<std::vector<uint8_t>> Open(const uint8_t* sealed, size_t len,
                                           const std::string& ad) const;

 private:
  mutable std::mutex mu_;
  // Guarded by mu_. keys_[0] is the primary; never empty.
  std::vector<Key> keys_;
};

}  // namespace meshtrain::wire
