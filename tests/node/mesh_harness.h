// A virtual-time mesh of node::Node cores for tests: an event heap (time, then sequence number),
// a fake network (per-message latency with seeded jitter, per-connection FIFO, optional loss),
// and a simulated trainer per node that takes real SGD steps on a learn::Task when it holds a
// Permit. Nodes run their own SWIM. Everything is seeded: the same options give the same run.
// Nothing sleeps; nothing touches a socket or a clock (as Tarantool's swim tests).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "base/sanitizer.h"
#include "learn/task.h"
#include "node/endpoint.h"
#include "node/node.h"

namespace meshtrain::testing {

// The suite's sanitizer build (ASan + UBSan), where a mesh runs about ten times slower: tests
// that repeat a scenario over many seeds run a few of them there (the release build runs all;
// the sanitizers look for memory errors on the same paths).
inline constexpr bool kSanitized = kAddressSanitizer;

struct MeshOptions {
  size_t nodes = 4;
  uint64_t seed = 1;
  sync::Policy policy = sync::Policy::kPssp;
  size_t sample = 2;
  uint64_t staleness = 2;
  sync::SelectPolicy select = sync::SelectPolicy::kRandom;
  size_t fanout = 2;
  std::string task = "synthetic";  // or "none": steps without a model
  double step_ms = 20;             // mean compute time of one step
  double straggler_factor = 1;     // node 0 is this many times slower
  double latency_ms = 1;
  double jitter_ms = 1;
  double loss = 0;              // datagram loss rate
  double bandwidth_mbps = 50;   // per connection, MB/s (frame transfer time)
  uint64_t max_steps = 0;       // the trainer stops (training=false) at this step; 0 = never
  wire::CompressSpec compress;  // --compress of every node
  int64_t late_join_ms = 0;     // > 0: the last node starts (fresh) at this time, joining node 0
  bool join_state = true;
  bool overlap_barrier = true;  // OSP prefetch of the next step's queries
  // The driver's hop: a Permit reaches the trainer this much later (the daemon's loop thread,
  // busy with parameter transfers, answers the trainer late).
  int64_t permit_delay_ms = 0;
  bool lookahead = true;    // BarrierConfig::lookahead
  uint64_t sync_every = 1;  // a snapshot goes out every this many steps (--sync-every)
  uint32_t chunk_floats = wire::kParamChunkFloats;
  // Connects from this node fail at once (EMFILE-like): the close is the next input.
  size_t refuse_connects_from = ~size_t{0};
  int64_t push_pull_ms = 2000;        // SWIM push-pull interval (the agents' local profile: 15000)
  int64_t consensus_hold_ms = 60000;  // NodeConfig::consensus_hold_ms (--trainer-grace)
  // Capacity probes (NodeConfig::capacity_probe_interval_ms; 0 = off) and each node's link
  // capacity, MB/s both ways: a probe train from i to j measures min(link[i], link[j]). Empty:
  // probe trains go nowhere (no report, as a network that drops them).
  int64_t capacity_probe_ms = 0;
  std::vector<double> link_mbps;
};

class Mesh {
 public:
  explicit Mesh(MeshOptions options);
  ~Mesh();

  // Joins everyone through node 0 and runs until `until_ms` of virtual time.
  void Start();
  void RunUntil(int64_t until_ms);
  // The node stops answering and computing (SIGKILL).
  void Crash(size_t i);
  // From now on, connects from node i fail at once (EMFILE-like): the close is the next input.
  void RefuseConnectsFrom(size_t i) { opt_.refuse_connects_from = i; }
  // Resets every open connection node i opened (both ends see an abort), as a network reset.
  void ResetConnectionsOpenedBy(size_t i);
  // Delivers `input` to node i at the current virtual time (after the current event).
  void Inject(size_t i, node::Input input);
  // Hooks called on every Permit (node, step permitted) and every output (node, output).
  std::function<void(size_t, uint64_t)> on_permit;
  std::function<void(size_t, const node::Output&)> on_output;
  // Optional: what a probe train from i to j measures, given the links' figure (noise,
  // squeezes); a result <= 0 makes the train unmeasurable.
  std::function<double(size_t, size_t, double)> probe_rate;

  int64_t now() const { return now_; }
  size_t size() const { return peers_.size(); }
  node::Node& node(size_t i) { return *peers_[i]->node; }
  uint64_t step(size_t i) const { return peers_[i]->step; }
  bool crashed(size_t i) const { return peers_[i]->crashed; }
  bool finished(size_t i) const { return peers_[i]->finished; }
  bool started(size_t i) const { return peers_[i]->started; }
  const std::string& adopted_from(size_t i) const { return peers_[i]->adopted_from; }
  double loss(size_t i) const;  // test loss of node i's model (synthetic)
  // Time node i's trainer sat between the end of a step and the start of the next, ms.
  double idle_ms(size_t i) const { return peers_[i]->idle_ms; }
  uint64_t mixes(size_t i) const { return peers_[i]->mixes; }
  // The end-of-training consensus: the models node i adopted (AdoptConsensus), and the CRC32 of
  // its model now (0 without a task).
  int consensus_adoptions(size_t i) const { return peers_[i]->consensus_adoptions; }
  uint32_t params_crc(size_t i) const;
  // Node i's final model as it finished (empty before).
  const std::vector<float>& final_params(size_t i) const { return peers_[i]->final_params; }
  uint64_t datagrams() const { return datagrams_; }

 private:
  struct Peer {
    std::string name, addr;
    std::unique_ptr<node::Node> node;
    std::unique_ptr<learn::Task> task;
    uint64_t step = 0;
    uint64_t permitted = 0;
    bool computing = false;
    bool crashed = false;
    bool finished = false;
    double speed = 1;
    uint64_t mixes = 0;
    std::vector<std::vector<float>> inbox;
    std::vector<uint64_t> inbox_steps;  // the senders' steps (progress-aware mixing)
    bool started = false;
    std::string adopted_from;  // join with state: whose model it took over
    int64_t timer_at = -1;     // the pending Tick, if any
    int64_t idle_since = -1;   // end of the last step, while no next one computes
    double idle_ms = 0;
    int consensus_adoptions = 0;
    const void* consensus_params = nullptr;  // the last one adopted (a settle repeats it)
    std::vector<float> final_params;
  };
  struct Conn {  // one TCP connection: (node a, id at a) <-> (node b, id at b)
    size_t a, b;
    node::ConnId id_a, id_b;
    int64_t last_a_to_b = 0, last_b_to_a = 0;  // FIFO per direction
    bool closed = false;
    bool closing = false;
  };
  struct Event {
    int64_t at;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  // The simulated network, as node i's node::Endpoint.
  class NodeEndpoint : public node::Endpoint {
   public:
    NodeEndpoint(Mesh* mesh, size_t i) : mesh_(mesh), i_(i) {}
    void SendDatagram(const std::string& to, const wire::Datagram& msg) override {
      mesh_->NetDatagram(i_, to, msg);
    }
    void Connect(node::ConnId conn, const std::string& to) override {
      mesh_->NetConnect(i_, conn, to);
    }
    void SendFrame(node::ConnId conn, const wire::Frame& msg) override {
      mesh_->NetFrame(i_, conn, msg);
    }
    void Close(node::ConnId conn, bool abort) override { mesh_->NetClose(i_, conn, abort); }
    void ProbeLink(const node::ProbeLink& probe) override { mesh_->NetProbe(i_, probe); }

   private:
    Mesh* mesh_;
    size_t i_;
  };
  void NetDatagram(size_t i, const std::string& to, const wire::Datagram& msg);
  void NetConnect(size_t i, node::ConnId conn, const std::string& to);
  void NetFrame(size_t i, node::ConnId conn, const wire::Frame& msg);
  void NetClose(size_t i, node::ConnId conn, bool abort);
  void NetProbe(size_t i, const node::ProbeLink& probe);

  void At(int64_t t, std::function<void()> fn);
  void Feed(size_t i, node::Input in);
  void Execute(size_t i);
  void Arm(size_t i);
  void MaybeCompute(size_t i);
  void StartNode(size_t i);
  int64_t Latency();
  size_t ByAddr(const std::string& addr) const;

  MeshOptions opt_;
  std::mt19937_64 rng_;
  int64_t now_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::map<size_t, node::WholeModels> wholes_;  // per peer: streamed chunks back to whole models
  std::map<uint64_t, Conn> conns_;              // by connection serial
  std::map<std::pair<size_t, node::ConnId>, uint64_t> conn_of_;
  node::ConnId next_accept_id_ = 1;
  uint64_t next_conn_ = 1;
  uint64_t datagrams_ = 0;
  std::shared_ptr<const learn::SyntheticData> data_;
};

}  // namespace meshtrain::testing
