#include "daemon/setup.h"

#include <algorithm>
#include <filesystem>

#include "daemon/peer_snapshot.h"

namespace meshtrain::daemon {

learn::Status PrepareAgent(AgentConfig* config, MetricsLog* metrics,
                           std::shared_ptr<gossip::Keyring>* keyring) {
  if (auto st = metrics->Open(config->metrics_file); !st.ok()) return st;
  if (!config->encrypt.empty()) {
    auto key = gossip::ParseKeyBase64(config->encrypt);
    if (!key) {
      return learn::Status::InvalidArgument(
          "invalid --encrypt key: expected base64 of 32 bytes (see `meshtrain keygen`)");
    }
    *keyring = std::make_shared<gossip::Keyring>(*key);
  }
  if (config->data_dir.empty()) return learn::Status::OK();
  std::error_code ec;
  std::filesystem::create_directories(config->data_dir, ec);
  if (ec) {
    return learn::Status::IOError("cannot create --data-dir " + config->data_dir + ": " +
                                  ec.message());
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
