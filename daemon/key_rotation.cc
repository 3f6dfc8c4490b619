#include "daemon/key_rotation.h"

#include <spdlog/spdlog.h>

#include "daemon/keyring_file.h"
#include "daemon/ops/json_text.h"
#include "wire/net_addr.h"

namespace meshtrain::daemon {

using nlohmann::json;

KeyRotation::KeyRotation(std::string self, std::shared_ptr<wire::Keyring> keyring,
                         const wire::Codec* codec, transport::TcpHub* hub, wire::Inbound* inbound)
    : self_(std::move(self)),
      keyring_(std::move(keyring)),
      codec_(codec),
      hub_(hub),
      inbound_(inbound) {}

wire::KeyOpReplyMsg KeyRotation::Apply(const wire::KeyOpMsg& m) {
  wire::KeyOpReplyMsg r;
  r.seq = m.seq;
  if (!keyring_) {
    r.error = "encryption is off on this agent";
    return r;
  }
  r.ok = true;
  switch (m.op) {
    case wire::KeyOpKind::kInstall:
      keyring_->Install(*m.key);
      break;
    case wire::KeyOpKind::kUse:
      if (!keyring_->Use(*m.key)) r = {m.seq, false, "key is not installed", {}, {}};
      break;
    case wire::KeyOpKind::kRemove:
      if (!keyring_->Remove(*m.key)) {
        r = {m.seq, false, "key is the primary key or not installed", {}, {}};
      }
      break;
    case wire::KeyOpKind::kList:
      break;
  }
  for (const auto& k : keyring_->Keys()) r.keys.push_back(wire::KeyFingerprint(k));
  r.primary = wire::KeyFingerprint(keyring_->Primary());
  if (m.op != wire::KeyOpKind::kList && r.ok && !keyring_file_.empty()) {
    if (auto st = SaveKeyring(keyring_file_, *keyring_); !st.ok()) {
      spdlog::error("keys: the change is in effect but not persisted: {}", st.message());
    }
  }
  if (m.op != wire::KeyOpKind::kList) {
    spdlog::info("keys: {} {} -> {}", wire::KeyOpName(m.op),
                 m.key ? wire::KeyFingerprint(*m.key) : "", r.ok ? "ok" : r.error);
  }
  return r;
}

void KeyRotation::Record(uint32_t seq, const std::string& node, const wire::KeyOpReplyMsg* r) {
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
  wire::KeyOpMsg op;
  op.seq = next_seq_++;
  if (op_name == "install") op.op = wire::KeyOpKind::kInstall;
  if (op_name == "use") op.op = wire::KeyOpKind::kUse;
  if (op_name == "remove") op.op = wire::KeyOpKind::kRemove;
  if (op_name == "list") op.op = wire::KeyOpKind::kList;
  if (op.op != wire::KeyOpKind::kList) {
    auto parsed = wire::ParseKeyBase64(key);
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
  const wire::KeyOpReplyMsg local = Apply(op);
  wire::Frame frame;
  frame.sender = self_;
  frame.body = op;
  const transport::Bytes bytes = codec_->EncodeFrame(frame);
  const uint32_t seq = op.seq;
  for (const auto& [name, addr] : peers) {
    auto to = wire::NetAddr::Parse(addr);
    auto got = std::make_shared<bool>(false);
    if (!to) {
      *got = true;
      Record(seq, name, nullptr);
      continue;
    }
    const std::string peer = name;
    transport::TcpHub::ConnId cid = hub_->Connect(
        *to,
        [this, seq, peer, got](transport::TcpHub::ConnId c, transport::Bytes&& payload) {
          auto f = inbound_->OnFrame(payload.data(), payload.size());
          auto* r = f ? std::get_if<wire::KeyOpReplyMsg>(&f->body) : nullptr;
          if (r == nullptr || r->seq != seq || *got) {
            if (f) inbound_->Count(wire::Reject::kSemantic);
            hub_->Abort(c);
            return;
          }
          *got = true;
          Record(seq, peer, r);
          hub_->Close(c);
        },
        [this, seq, peer, got](transport::TcpHub::ConnId, int) {
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
