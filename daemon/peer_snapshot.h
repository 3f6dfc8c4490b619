// The peer snapshot (docs/contract.md "Training", --data-dir): the addresses of the live members,
// written whenever membership changes, so a restarted agent rejoins through them.
//
// Writes are atomic (temp file, fsync, rename) and happen on a thread of their own, never on the
// loop thread; only the newest pending view is written. Thread-safety: Save and the destructor on
// one thread (the loop thread); Load anywhere.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace meshtrain::daemon {

// Up to 64 valid "ip:port" addresses from DIR/peers.json; empty if there is none or it is
// unreadable (a warning says which).
std::vector<std::string> LoadPeerSnapshot(const std::string& dir);

class PeerSnapshotWriter {
 public:
  explicit PeerSnapshotWriter(std::string dir);  // empty dir: Save does nothing
  ~PeerSnapshotWriter();                         // writes what is pending, then joins
  PeerSnapshotWriter(const PeerSnapshotWriter&) = delete;
  PeerSnapshotWriter& operator=(const PeerSnapshotWriter&) = delete;

  // Queues `peers` to be written; an empty list keeps the last non-empty snapshot.
  void Save(std::vector<std::string> peers);

 private:
  void Run();

  const std::string dir_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  std::optional<std::vector<std::string>> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meshtrain::daemon
