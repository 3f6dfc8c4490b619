// Cluster key rotation (`meshtrain keys`, Serf-style): applies a KeyOp to this agent's keyring,
// sends it to every live member over its own TCP connection, gathers the answers and reports
// one JSON result; and answers the KeyOps peers send to this agent.
//
// This is daemon plumbing around the keyring, not protocol state: the node core never sees
// KeyOp frames (the driver hands them here). Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"
#include "wire/codec.h"
#include "wire/inbound.h"

namespace meshtrain::daemon {

class KeyRotation {
 public:
  using Done = std::function<void(nlohmann::json)>;

  // `keyring` may be null (encryption off: every operation is refused). Replies pass `inbound`
  // (which counts what it rejects). All pointers must outlive this object.
  KeyRotation(std::string self, std::shared_ptr<wire::Keyring> keyring, const wire::Codec* codec,
              transport::TcpHub* hub, wire::Inbound* inbound);

  // Persist the keyring to this file after every change (daemon/keyring_file.h); "" = never.
  void set_keyring_file(std::string path) { keyring_file_ = std::move(path); }

  // A KeyOp a peer sent: applied here, answered with the reply to send back.
  wire::KeyOpReplyMsg Apply(const wire::KeyOpMsg& m);

  // `meshtrain keys`: op is install | use | remove | list, key the base64 key (not for list).
  // `peers` are the live members (name, "ip:port"). `done` gets the RPC reply.
  void Run(const std::string& op, const std::string& key,
           const std::vector<std::pair<std::string, std::string>>& peers, Done done);

 private:
  struct Round {
    Done done;
    int outstanding = 0;
    int nodes = 0;
    nlohmann::json failed = nlohmann::json::object();
    std::map<std::string, int> keys;       // fingerprint -> nodes holding it
    std::map<std::string, int> primaries;  // fingerprint -> nodes using it as primary
  };
  void Record(uint32_t seq, const std::string& node, const wire::KeyOpReplyMsg* r);

  std::string self_;
  std::shared_ptr<wire::Keyring> keyring_;
  const wire::Codec* codec_;
  transport::TcpHub* hub_;
  wire::Inbound* inbound_;
  std::map<uint32_t, Round> rounds_;
  std::string keyring_file_;
  uint32_t next_seq_ = 1;
};

}  // namespace meshtrain::daemon
