#include "wire/crypto.h"

#include <sodium.h>

#include <algorithm>

namespace meshtrain::wire {

static_assert(kKeyBytes == crypto_aead_xchacha20poly1305_ietf_KEYBYTES);
static_assert(kNonceBytes == crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
static_assert(kTagBytes == crypto_aead_xchacha20poly1305_ietf_ABYTES);

bool InitSodium() {
  // sodium_init is itself idempotent and thread-safe; caching the result keeps it off hot paths.
  static const bool ok = sodium_init() >= 0;
  return ok;
}

std::string GenerateKeyBase64() {
  Key key;
  InitSodium();
  randombytes_buf(key.data(), key.size());
  std::string out = KeyToBase64(key);
  sodium_memzero(key.data(), key.size());
  return out;
}

std::string KeyToBase64(const Key& key) {
  constexpr size_t kLen = sodium_base64_ENCODED_LEN(kKeyBytes, sodium_base64_VARIANT_ORIGINAL);
  char buf[kLen];
  sodium_bin2base64(buf, kLen, key.data(), key.size(), sodium_base64_VARIANT_ORIGINAL);
  return std::string(buf);
}

std::string BytesToBase64(const uint8_t* data, size_t len) {
  std::string out(sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), data, len, sodium_base64_VARIANT_ORIGINAL);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

std::optional<std::vector<uint8_t>> Base64ToBytes(const std::string& text) {
  InitSodium();
  std::vector<uint8_t> out(text.size() / 4 * 3 + 3);
  size_t bin_len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(out.data(), out.size(), text.data(), text.size(), /*ignore=*/nullptr,
                        &bin_len, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
      end != text.data() + text.size()) {
    return std::nullopt;
  }
  out.resize(bin_len);
  return out;
}

std::optional<Key> ParseKeyBase64(const std::string& text) {
  InitSodium();
  Key key;
  size_t bin_len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(key.data(), key.size(), text.data(), text.size(), /*ignore=*/nullptr,
                        &bin_len, &end, sodium_base64_VARIANT_ORIGINAL) != 0) {
    return std::nullopt;
  }
  // Trailing characters (or a longer key, which fails above) are not a key.
  if (bin_len != kKeyBytes || end != text.data() + text.size()) return std::nullopt;
  return key;
}

std::string KeyFingerprint(const Key& key) {
  InitSodium();
  uint8_t hash[crypto_generichash_BYTES_MIN];
  static_assert(crypto_generichash_BYTES_MIN * 2 >= kFingerprintChars);
  crypto_generichash(hash, sizeof(hash), key.data(), key.size(), /*key=*/nullptr, 0);
  char hex[sizeof(hash) * 2 + 1];
  sodium_bin2hex(hex, sizeof(hex), hash, sizeof(hash));
  return std::string(hex, kFingerprintChars);
}

Keyring::Keyring(const Key& primary) : keys_{primary} { InitSodium(); }

Keyring::~Keyring() {
  for (Key& k : keys_) sodium_memzero(k.data(), k.size());
}

void Keyring::Install(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) keys_.push_back(key);
}

bool Keyring::Use(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(keys_.begin(), keys_.end(), key);
  if (it == keys_.end()) return false;
  std::iter_swap(keys_.begin(), it);
  return true;
}

bool Keyring::Remove(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(keys_.begin(), keys_.end(), key);
  if (it == keys_.end() || it == keys_.begin()) return false;
  sodium_memzero(it->data(), it->size());
  keys_.erase(it);
  return true;
}

std::vector<Key> Keyring::Keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_;
}

Key Keyring::Primary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.front();
}

std::vector<uint8_t> Keyring::Seal(const uint8_t* plaintext, size_t len,
                                   const std::string& ad) const {
  std::vector<uint8_t> out(kSealOverhead + len);
  out[0] = kSealedMarker;
  uint8_t* nonce = out.data() + 1;
  // Random 192-bit nonces never repeat in practice, which is why XChaCha20 is used: no nonce
  // state has to survive restarts or be shared between threads.
  randombytes_buf(nonce, kNonceBytes);
  unsigned long long clen = 0;
  std::lock_guard<std::mutex> lock(mu_);
  crypto_aead_xchacha20poly1305_ietf_encrypt(nonce + kNonceBytes, &clen, plaintext, len,
                                             reinterpret_cast<const uint8_t*>(ad.data()), ad.size(),
                                             /*nsec=*/nullptr, nonce, keys_.front().data());
  out.resize(1 + kNonceBytes + clen);
  return out;
}

std::optional<std::vector<uint8_t>> Keyring::Open(const uint8_t* sealed, size_t len,
                                                  const std::string& ad) const {
  if (len < kSealOverhead || sealed[0] != kSealedMarker) return std::nullopt;
  const uint8_t* nonce = sealed + 1;
  const uint8_t* cipher = nonce + kNonceBytes;
  const size_t clen = len - 1 - kNonceBytes;
  std::vector<uint8_t> out(clen - kTagBytes);
  unsigned long long plen = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Key& key : keys_) {
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            out.data(), &plen, /*nsec=*/nullptr, cipher, clen,
            reinterpret_cast<const uint8_t*>(ad.data()), ad.size(), nonce, key.data()) == 0) {
      out.resize(plen);
      return out;
    }
  }
  return std::nullopt;
}

}  // namespace meshtrain::wire
