#include "daemon/key_rotation.h"

#include <spdlog/spdlog.h>

#include "daemon/json_text.h"
#include "daemon/keyring_file.h"
#include "gossip/net_addr.h"

namespace meshtrain::daemon {

using nlohmann::json;

KeyRotation::KeyRotation(std::string self, std::shared_ptr<gossip::Keyring> keyring,
                         const gossip::Codec* codec, gossip::TcpHub* hub, gossip::Inbound* inbound)
    : self_(std::move(self)),
      keyring_(std::move(keyring)),
      codec_(codec),
      hub_(hub),
      inbound_(inbound) {}

gossip::KeyOpReplyMsg KeyRotation::Apply(const gossip::KeyOpMsg& m) {
  gossip::KeyOpReplyMsg r;
  r.seq = m.seq;
  if (!keyring_) {
    r.error = "encryption is off on this agent";
    return r;
  }
  r.ok = true;
  switch (m.op) {
    case gossip::KeyOpKind::kInstall:
      keyring_->Install(*m.key);
      break;
    case gossip::KeyOpKind::kUse:
      if (!keyring_->Use(*m.key)) r = {m.seq, false, "key is not installed", {}, {}};
      break;
    case gossip::KeyOpKind::kRemove:
      if (!keyring_->Remove(*m.key)) {
        r = {m.seq, false, "key is the primary key or not installed", {}, {}};
      }
      break;
    case gossip::KeyOpKind::kList:
      break;
  }
  for (const auto& k : keyring_->Keys()) r.keys.push_back(gossip::KeyFingerprint(k));
  r.primary = gossip::KeyFingerprint(keyring_->Primary());
  if (m.op != gossip::KeyOpKind::kList && r.ok && !keyring_file_.empty()) {
    if (auto st = SaveKeyring(keyring_file_, *keyring_); !st.ok()) {
      spdlog::error("keys: the change is in effect but not persisted: {}", st.message());
    }
  }
  if (m.op != gossip::KeyOpKind::kList) {
    spdlog::info("keys: {} {} -> {}", gossip::KeyOpName(m.op),
                 m.key ? gossip::KeyFingerprint(*m.key) : "", r.ok ? "ok" : r.error);
  }
  return r;
}

void KeyRotation::Record(uint32_t seq, const std::string& node, const gossip::KeyOpReplyMsg* r) {
  auto it = rounds_.find(seq);
  if (it == rounds_.end()) return;
  Round& kr = it->second;
  if (r == nullptr) {
    kr.failed[node] = "no reply";
  } else {
    if (!r->ok) kr.failed[node] = r->error;
    for (const auto& k : r->keys) kr.keys[k]++;
    if (!r->primary.empty()) kr.primaries[r->primary]++;
  }
  if (--kr.outstanding > 0) return;
  json out = {{"ok", kr.failed.empty()},
              {"nodes", kr.nodes},
              {"keys", kr.keys},
              {"primary", kr.primaries},
              {"failed", kr.failed}};
  if (!kr.failed.empty()) {
    out["error"] = std::to_string(kr.failed.size()) + " of " + std::to_string(kr.nodes) +
                   " nodes failed: " + JsonText(kr.failed);
  }
  Done done = std::move(kr.done);
  rounds_.erase(it);
  done(std::move(out));
}

void KeyRotation::Run(const std::string& op_name, const std::string& key,
                      const std::vector<std::pair<std::string, std::string>>& peers, Done done) {
  if (!keyring_) {
    done({{"ok", false}, {"error", "encryption is off on this agent (start it with --encrypt)"}});
    return;
  }
  gossip::KeyOpMsg op;
  op.seq = next_seq_++;
  if (op_name == "install") op.op = gossip::KeyOpKind::kInstall;
  if (op_name == "use") op.op = gossip::KeyOpKind::kUse;
  if (op_name == "remove") op.op = gossip::KeyOpKind::kRemove;
  if (op_name == "list") op.op = gossip::KeyOpKind::kList;
  if (op.op != gossip::KeyOpKind::kList) {
    auto parsed = gossip::ParseKeyBase64(key);
    if (!parsed) {
      done({{"ok", false}, {"error", "invalid key: expected base64 of 32 bytes"}});
      return;
    }
    op.key = *parsed;
  }
  Round& kr = rounds_[op.seq];
  kr.done = std::move(done);
  kr.nodes = static_cast<int>(peers.size()) + 1;
  kr.outstanding = kr.nodes;
  const gossip::KeyOpReplyMsg local = Apply(op);
  gossip::Frame frame;
  frame.sender = self_;
  frame.body = op;
  const gossip::Bytes bytes = codec_->EncodeFrame(frame);
  const uint32_t seq = op.seq;
  for (const auto& [name, addr] : peers) {
    auto to = gossip::NetAddr::Parse(addr);
    auto got = std::make_shared<bool>(false);
    if (!to) {
      *got = true;
      Record(seq, name, nullptr);
      continue;
    }
    const std::string peer = name;
    gossip::TcpHub::ConnId cid = hub_->Connect(
        *to,
        [this, seq, peer, got](gossip::TcpHub::ConnId c, gossip::Bytes&& payload) {
          auto f = inbound_->OnFrame(payload.data(), payload.size());
          auto* r = f ? std::get_if<gossip::KeyOpReplyMsg>(&f->body) : nullptr;
          if (r == nullptr || r->seq != seq || *got) {
            if (f) inbound_->Count(gossip::Reject::kSemantic);
            hub_->Abort(c);
            return;
          }
          *got = true;
          Record(seq, peer, r);
          hub_->Close(c);
        },
        [this, seq, peer, got](gossip::TcpHub::ConnId, int) {
          if (!*got) {
            *got = true;
            Record(seq, peer, nullptr);
          }
        });
    hub_->Send(cid, bytes);
  }
  Record(seq, self_, &local);
}

}  // namespace meshtrain::daemon
