// A deterministic test/simulation driver for a cluster of SWIM nodes: N membership::Swim state
// machines wired through a SimNetwork on a VirtualClock. It delivers each node's packets and
// push-pull streams, ticks each node at its NextDeadline(), and injects faults (crash, restart,
// pause/resume, graceful leave, plus anything the network supports: loss, partitions, blocked
// links). Same options and seed, same run.
//
// It is one user of the generic clock and network; the `meshtrain simulate` driver
// (docs/contract.md "Simulator") will add the sync/learn layers next to it.
//
// Thread-safety: none; everything runs on the thread that calls run_until()/run_for().
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "membership/swim.h"
#include "sim/sim_network.h"
#include "sim/virtual_clock.h"

namespace meshtrain::sim {

struct SwimClusterOptions {
  size_t nodes = 10;
  // Timing profile for every node; name and addr are filled in per node.
  membership::Config config = membership::Config::Local();
  uint64_t seed = 1;
  LinkLatency latency{1, 4};
};

class SwimCluster {
 public:
  using EventHook = std::function<void(size_t observer, TimeMs at, const membership::Event& event)>;
  // Sees every datagram handed to a running node, just before it is handled.
  using PacketTap = std::function<void(size_t from, size_t to, const membership::Packet& packet)>;

  struct RunResult {
    bool ok = false;      // the predicate held
    TimeMs at = 0;        // virtual time when it was seen to hold (or when the run stopped)
    uint64_t events = 0;  // clock events processed
  };

  // Creates the nodes' identities ("n<i>", "10.0.<i/256>.<i%256>:7950"); none runs yet.
  explicit SwimCluster(SwimClusterOptions opts);
  ~SwimCluster();
  SwimCluster(const SwimCluster&) = delete;
  SwimCluster& operator=(const SwimCluster&) = delete;

  size_t size() const { return procs_.size(); }
  const std::string& name(size_t i) const { return procs_[i].name; }
  const std::string& addr(size_t i) const { return procs_[i].addr; }
  VirtualClock& clock() { return clock_; }
  SimNetwork& net() { return net_; }
  TimeMs now() const { return clock_.now(); }
  const SwimClusterOptions& options() const { return opts_; }

  // The node's current Swim (the latest one after restarts). Calls made on it directly should
  // be followed by flush(i) so that its output is sent and its timer rescheduled.
  membership::Swim& node(size_t i) { return *procs_[i].swim; }
  void flush(size_t i);

  bool is_up(size_t i) const { return procs_[i].up; }  // started and not crashed
  bool is_running(size_t i) const { return procs_[i].up && !procs_[i].paused; }
  bool has_left(size_t i) const;

  // Starts node i now (a fresh Swim) and has it join through the given nodes.
  void start(size_t i, const std::vector<size_t>& join = {});
  // Starts `seed_node` now and every other node `stagger` ms after the previous one, each
  // joining through `seed_node`.
  void start_all_via(size_t seed_node, TimeMs stagger);
  // Hard stop: no more packets to or from it, no ticks. Its state is discarded on restart.
  void crash(size_t i);
  // A new process under the same name and address (incarnation 0), joining through `join`.
  void restart(size_t i, const std::vector<size_t>& join);
  // SIGSTOP/SIGCONT: while paused, inbound traffic is dropped and the node does not tick.
  void pause(size_t i);
  void resume(size_t i);
  void leave(size_t i);

  // Runs the clock until `pred` holds (checked at most every `poll_ms` of virtual time, and at
  // the start), `max_virtual_ms` elapse, or `max_events` events ran.
  RunResult run_until(const std::function<bool()>& pred, TimeMs max_virtual_ms,
                      uint64_t max_events = std::numeric_limits<uint64_t>::max(),
                      TimeMs poll_ms = 10);
  void run_for(TimeMs duration) { clock_.run_until(clock_.now() + duration); }

  // ---- views ----
  // Observer's record of target, or null if unknown to it (or the observer is not up).
  const membership::Member* view(size_t observer, size_t target) const;
  // Running, non-left observers other than `target` whose view of it has status `s`.
  size_t count_seeing(size_t target, membership::Status s) const;
  size_t count_observers(size_t target) const;
  bool all_see(size_t target, membership::Status s) const {
    return count_seeing(target, s) == count_observers(target);
  }
  // Every running, non-left node sees exactly the running, non-left nodes as alive.
  bool converged() const;

  void set_event_hook(EventHook hook) { hook_ = std::move(hook); }
  void set_packet_tap(PacketTap tap) { tap_ = std::move(tap); }

 private:
  struct Proc {
    std::string name;
    std::string addr;
    std::unique_ptr<membership::Swim> swim;
    bool up = false;
    bool paused = false;
    uint64_t generation = 0;  // bumped on restart; callbacks for older generations are void
    TimeMs scheduled = std::numeric_limits<TimeMs>::max();
  };

  void Boot(size_t i, const std::vector<size_t>& join);
  void Reschedule(size_t i);
  void OnTimer(size_t i, uint64_t generation, TimeMs at);
  void SendPackets(size_t i);
  void SendPushPulls(size_t i);
  void DeliverPacket(size_t to, std::string from_addr, const membership::Packet& packet);
  bool Current(size_t i, uint64_t generation) const {
    return procs_[i].generation == generation && is_running(i);
  }
  int IndexOf(const std::string& addr) const;

  SwimClusterOptions opts_;
  VirtualClock clock_;
  SimNetwork net_;
  std::vector<Proc> procs_;
  std::unordered_map<std::string, size_t> by_addr_;
  EventHook hook_;
  PacketTap tap_;
};

}  // namespace meshtrain::sim
