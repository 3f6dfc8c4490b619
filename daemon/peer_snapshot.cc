#include "daemon/peer_snapshot.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "daemon/ops/json_text.h"
#include "wire/net_addr.h"

namespace meshtrain::daemon {

namespace {
std::string SnapshotPath(const std::string& dir) { return dir + "/peers.json"; }
}  // namespace

std::vector<std::string> LoadPeerSnapshot(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in(SnapshotPath(dir));
  if (!in) return out;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("peers") || !j["peers"].is_array()) {
    spdlog::warn("ignoring unreadable peer snapshot {}", SnapshotPath(dir));
    return out;
  }
  for (const auto& p : j["peers"]) {
    if (!p.is_string()) continue;
    auto a = wire::NetAddr::Parse(p.get<std::string>());
    if (a && out.size() < 64) out.push_back(a->ToString());
  }
  if (!out.empty()) spdlog::info("peer snapshot: will rejoin {}", fmt::join(out, ", "));
  return out;
}

PeerSnapshotWriter::PeerSnapshotWriter(std::string dir) : dir_(std::move(dir)) {
  if (!dir_.empty()) thread_ = std::thread([this] { Run(); });
}

PeerSnapshotWriter::~PeerSnapshotWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeerSnapshotWriter::Save(std::vector<std::string> peers) {
  if (dir_.empty() || peers.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = std::move(peers);
  }
  cv_.notify_all();
}

void PeerSnapshotWriter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || pending_.has_value(); });
    if (!pending_) return;  // stopping with nothing left to write
    const std::vector<std::string> peers = std::move(*pending_);
    pending_.reset();
    lock.unlock();
    const std::string path = SnapshotPath(dir_);
    const std::string tmp = path + ".tmp";
    const std::string body = JsonText(nlohmann::json{{"peers", peers}}) + "\n";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      bool ok = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
      ok = ::fsync(fd) == 0 && ok;
      ::close(fd);
      if (ok) std::rename(tmp.c_str(), path.c_str());
    }
    lock.lock();
  }
}

}  // namespace meshtrain::daemon
