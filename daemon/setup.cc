#include "daemon/setup.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "daemon/keyring_file.h"
#include "daemon/peer_snapshot.h"

namespace meshtrain::daemon {

learn::Status PrepareAgent(AgentConfig* config, MetricsLog* metrics,
                           std::shared_ptr<wire::Keyring>* keyring) {
  if (auto st = metrics->Open(config->metrics_file); !st.ok()) return st;
  std::optional<wire::Key> given;
  if (!config->encrypt.empty()) {
    given = wire::ParseKeyBase64(config->encrypt);
    if (!given) {
      return learn::Status::InvalidArgument(
          "invalid --encrypt key: expected base64 of 32 bytes (see `meshtrain keygen`)");
    }
  }
  if (config->data_dir.empty()) {
    if (given) *keyring = std::make_shared<wire::Keyring>(*given);
    return learn::Status::OK();
  }
  std::error_code ec;
  std::filesystem::create_directories(config->data_dir, ec);
  if (ec) {
    return learn::Status::IOError("cannot create --data-dir " + config->data_dir + ": " +
                                  ec.message());
  }
  // The persisted keyring (a rotation survives restarts) takes precedence over --encrypt.
  const std::string path = KeyringPath(config->data_dir);
  auto loaded = LoadKeyring(path);
  if (loaded.ok()) {
    *keyring = std::move(loaded).value();
    if (given && (*keyring)->Primary() != *given) {
      spdlog::warn("using the keyring in {} (primary {}); --encrypt {} is not its primary key",
                   path, wire::KeyFingerprint((*keyring)->Primary()), wire::KeyFingerprint(*given));
    }
  } else if (!loaded.status().IsNotFound()) {
    return learn::Status::InvalidArgument(loaded.status().message());
  } else if (given) {
    *keyring = std::make_shared<wire::Keyring>(*given);
    if (auto st = SaveKeyring(path, **keyring); !st.ok()) return st;
  }
  for (const auto& addr : LoadPeerSnapshot(config->data_dir)) {
    if (addr != config->advertise &&
        std::find(config->join.begin(), config->join.end(), addr) == config->join.end()) {
      config->join.push_back(addr);
      config->join_resolved.push_back(addr);
    }
  }
  return learn::Status::OK();
}

}  // namespace meshtrain::daemon
