#include "daemon/agent.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "daemon/json_text.h"
#include "daemon/metrics.h"
#include "daemon/rpc.h"
#include "daemon/trainer.h"
#include "gossip/codec.h"
#include "gossip/crypto.h"
#include "gossip/inbound.h"
#include "gossip/rate_limit.h"
#include "gossip/transport.h"
#include "learn/rng.h"
#include "learn/task.h"
#include "membership/swim.h"
#include "sync/barrier.h"
#include "sync/selection.h"

namespace meshtrain::daemon {

using gossip::Bytes;
using gossip::NetAddr;
using gossip::TcpHub;
using nlohmann::json;

namespace {

constexpr size_t kMaxRpcFrame = 64 * 1024;
constexpr int64_t kLeavePollMs = 50;
constexpr int64_t kLeaveMaxMs = 3000;

uint64_t WallMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

struct Agent::Impl {
  explicit Impl(AgentConfig c) : config(std::move(c)) {}

  AgentConfig config;
  uv_loop_t loop{};
  std::unique_ptr<membership::Swim> swim;
  std::shared_ptr<gossip::Keyring> keyring;
  std::unique_ptr<gossip::Codec> codec;
  std::unique_ptr<gossip::UdpEndpoint> udp;
  std::unique_ptr<TcpHub> data_tcp;
  std::unique_ptr<TcpHub> rpc_tcp;
  std::unique_ptr<gossip::Timer> swim_timer;
  std::unique_ptr<gossip::Timer> join_timer;
  std::unique_ptr<gossip::Timer> leave_timer;
  std::vector<std::unique_ptr<gossip::Signal>> signals;
  MetricsLog metrics;
  // Every datagram and frame from the network, and their rejections (SPEC §4).
  std::unique_ptr<gossip::Inbound> inbound;
  uint64_t rpc_rejects = 0;
  uint64_t oversize_drops = 0;

  // Outgoing push-pulls: connection -> target address and the RPC join waiting on it (if any).
  struct PushPullCtx {
    std::string addr;
    bool done = false;
    uint64_t join_req = 0;
    bool join = false;
  };
  std::map<TcpHub::ConnId, PushPullCtx> pushpulls;
  // RPC joins waiting for their push-pulls: id -> (rpc conn, outstanding, succeeded).
  struct JoinReq {
    TcpHub::ConnId rpc_conn;
    int outstanding = 0;
    int joined = 0;
  };
  std::map<uint64_t, JoinReq> join_reqs;
  uint64_t next_join_req = 1;
  bool retry_join_active = false;

  bool leaving = false;
  int64_t leave_started = 0;
  int exit_code = 0;

  // ---- training (absent with --task none) ----
  std::unique_ptr<Trainer> trainer;
  bool trainer_started = false;  // a final checkpoint is written only for a run that started
  std::unique_ptr<gossip::Async> trainer_wake;
  std::unique_ptr<gossip::Timer> barrier_timer;
  std::unique_ptr<sync::BarrierCore> barrier;
  sync::SelectPolicy select_policy = sync::SelectPolicy::kRandom;
  std::mt19937_64 rng{RandomSeed()};
  std::map<std::string, gossip::ParamAssembler> assemblers;  // by sender name
  uint64_t published_step = 0;
  bool published_training = false;
  // Barrier episode for the step the trainer is waiting to start (0 = none).
  bool barrier_waiting = false;
  bool min_peers_reached = false;
  uint64_t barrier_step = 0;
  // Parameter multicast: one round in flight at a time; a newer snapshot replaces a pending one.
  struct Round {
    uint64_t id = 0;
    int64_t started = 0;
    int outstanding = 0;
    int delivered = 0;
    int fanout = 0;
    uint64_t bytes = 0;
    std::map<TcpHub::ConnId, std::string> transfers;  // open connections -> receiver
    std::set<TcpHub::ConnId> acked;  // receivers that confirmed the whole snapshot (ParamAck)
  };
  std::optional<Round> round;
  std::optional<Snapshot> pending_snapshot;
  uint64_t next_round = 1;
  uint64_t rounds_done = 0;
  uint64_t fanout_sum = 0;
  uint64_t params_bytes_sent = 0;
  uint64_t params_received = 0;

  // ---- bandwidth (SPEC §7): measured while transfers are active, EWMA, bounded by limits ----
  struct BusyMeter {
    int active = 0;
    int64_t since = 0;    // when `active` went 0 -> 1
    int64_t busy_ms = 0;  // accumulated busy time not yet turned into a sample
    uint64_t bytes = 0;   // bytes moved in that busy time
    gossip::BandwidthEstimate estimate;
    void Begin(int64_t now) {
      if (active++ == 0) since = now;
    }
    void End(int64_t now, uint64_t moved) {
      bytes += moved;
      if (--active == 0) busy_ms += now - since;
    }
    // Turns the accumulated busy period into one sample.
    void Sample() {
      if (busy_ms > 0 && bytes > 0) estimate.Add(static_cast<double>(bytes), busy_ms / 1000.0);
      busy_ms = 0;
      bytes = 0;
    }
  };
  BusyMeter up_meter, down_meter;
  std::map<TcpHub::ConnId, uint64_t> incoming;  // param connections being received: bytes so far
  std::unique_ptr<gossip::Timer> bandwidth_timer;

  int64_t Now() { return gossip::LoopNowMs(&loop); }

  // ---- start-up ------------------------------------------------------------------------------

  int Start() {
    if (auto err = metrics.Open(config.metrics_file); !err.empty()) {
      spdlog::error("{}", err);
      return 2;
    }
    if (!config.encrypt.empty()) {
      auto key = gossip::ParseKeyBase64(config.encrypt);
      if (!key) {
        spdlog::error(
            "invalid --encrypt key: expected base64 of 32 bytes (see `meshtrain keygen`)");
        return 2;
      }
      keyring = std::make_shared<gossip::Keyring>(*key);
    }
    if (!config.data_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(config.data_dir, ec);
      if (ec) {
        spdlog::error("cannot create --data-dir {}: {}", config.data_dir, ec.message());
        return 2;
      }
      for (const auto& addr : LoadPeerSnapshot()) {
        if (addr != config.advertise &&
            std::find(config.join.begin(), config.join.end(), addr) == config.join.end()) {
          config.join.push_back(addr);
        }
      }
    }
    codec = std::make_unique<gossip::Codec>(config.cluster, keyring);
    codec->set_wall_clock(WallMs);
    codec->set_session(RandomSeed() | 1);  // replay protection: a new session per process
    inbound = std::make_unique<gossip::Inbound>(codec.get());
    gossip::SetCallbackErrorHook([](const char* where, const char* what, uint64_t n) {
      spdlog::error("exception #{} in a {} handler, dropped (the agent keeps running): {}", n,
                    where, what);
    });
    membership::Config mcfg = config.MembershipConfig();
    // The datagram budget must leave room for the envelope, cluster label and seal.
    mcfg.packet_overhead_bytes = std::max(mcfg.packet_overhead_bytes, codec->DatagramOverhead());
    swim = std::make_unique<membership::Swim>(mcfg, RandomSeed(), Now());

    udp = std::make_unique<gossip::UdpEndpoint>(&loop);
    gossip::TcpOptions data_opts;
    data_opts.max_frame_bytes = codec->max_frame_bytes();
    data_opts.idle_timeout_ms = 10000;
    data_tcp = std::make_unique<TcpHub>(&loop, data_opts);
    data_tcp->SetRateLimits(config.uplink_limit * 1e6, config.downlink_limit * 1e6);
    gossip::TcpOptions rpc_opts;
    rpc_opts.max_frame_bytes = kMaxRpcFrame;
    rpc_opts.max_connections = 32;
    rpc_opts.idle_timeout_ms = 10000;
    rpc_tcp = std::make_unique<TcpHub>(&loop, rpc_opts);

    const auto bind = *NetAddr::Parse(config.bind);
    if (int rc = udp->Bind(bind, [this](const uint8_t* d, size_t n,
                                        const NetAddr& from) { OnDatagram(d, n, from); });
        rc != 0) {
      spdlog::error("cannot bind UDP {}: {}", config.bind, uv_strerror(rc));
      return 1;
    }
    if (int rc = data_tcp->Listen(
            bind, [this](TcpHub::ConnId id, Bytes&& f) { OnDataFrame(id, std::move(f)); },
            [this](TcpHub::ConnId id, int) { OnIncomingClosed(id); });
        rc != 0) {
      spdlog::error("cannot listen on TCP {}: {}", config.bind, uv_strerror(rc));
      return 1;
    }
    const auto rpc_addr = *NetAddr::Parse(config.rpc);
    if (!rpc_addr.IsLoopback()) {
      spdlog::warn(
          "RPC endpoint {} is not on loopback: anyone who can reach it controls this "
          "agent",
          config.rpc);
    }
    if (int rc = rpc_tcp->Listen(
            rpc_addr, [this](TcpHub::ConnId id, Bytes&& f) { OnRpcFrame(id, std::move(f)); });
        rc != 0) {
      spdlog::error("cannot listen for RPC on {}: {}", config.rpc, uv_strerror(rc));
      return 1;
    }

    swim_timer = std::make_unique<gossip::Timer>(&loop);
    join_timer = std::make_unique<gossip::Timer>(&loop);
    leave_timer = std::make_unique<gossip::Timer>(&loop);
    for (int sig : {SIGINT, SIGTERM}) {
      signals.push_back(std::make_unique<gossip::Signal>(&loop, sig, [this, sig] {
        if (leaving) {
          spdlog::warn("second signal: exiting without waiting for the leave to spread");
          Shutdown();
          return;
        }
        spdlog::info("received {}, leaving the mesh", sig == SIGINT ? "SIGINT" : "SIGTERM");
        StartLeave();
      }));
    }
    if (int rc = StartTraining(); rc != 0) return rc;
    PrintBanner();
    if (!config.join.empty()) {
      swim->Join(config.join, Now());
      Pump(0);
      if (config.retry_join) {
        retry_join_active = true;
        join_timer->Start(
            config.retry_join_interval_ms,
            [this] {
              if (!retry_join_active || leaving) return;
              if (swim->NumAlive() > 1) {
                retry_join_active = false;
                join_timer->Stop();
                return;
              }
              spdlog::info("retry-join: contacting {}", fmt::join(config.join, ", "));
              swim->Join(config.join, Now());
              Pump(0);
            },
            config.retry_join_interval_ms);
      }
    }
    Pump(0);
    return 0;
  }

  int StartTraining() {
    if (config.task == "none") return 0;
    learn::TaskOptions opts;
    opts.dataset_dir = config.dataset_dir;
    if (!config.shard.empty()) {
      auto shard = learn::ParseShard(config.shard);
      if (!shard.ok()) {
        spdlog::error("invalid --shard: {}", shard.status().message());
        return 2;
      }
      opts.shard = shard.value();
    }
    opts.batch_size = config.batch;
    opts.lr = static_cast<float>(config.lr);
    opts.momentum = static_cast<float>(config.momentum);
    // Every node starts from the same parameters (gossip averaging assumes one model);
    // sample order differs per node.
    opts.init_seed = 0x6d657368;
    opts.data_seed = config.seed ? *config.seed : learn::SeedFromString(config.name);
    spdlog::info("loading task {}", config.task);
    auto task = learn::MakeTask(config.task, opts);
    if (!task.ok()) {
      spdlog::error("cannot start task {}: {}", config.task, task.status().message());
      return 2;
    }
    TrainerOptions topts;
    topts.max_steps = config.steps;
    topts.target_accuracy = config.target_accuracy;
    topts.eval_every = config.eval_every;
    topts.sync_every = config.sync_every;
    topts.slowdown = config.slowdown;
    topts.name = config.name;
    topts.checkpoint_dir = config.data_dir;
    topts.checkpoint_every = config.checkpoint_every;
    trainer_wake = std::make_unique<gossip::Async>(&loop, [this] { OnTrainerWake(); });
    barrier_timer = std::make_unique<gossip::Timer>(&loop);
    trainer = std::make_unique<Trainer>(std::move(task).value(), topts, &metrics,
                                        [this] { trainer_wake->Send(); });
    codec->set_expected_params(static_cast<uint32_t>(trainer->num_params()));
    int64_t resumed = -1;
    if (auto err = trainer->Restore(&resumed); !err.empty()) {
      spdlog::error("{}", err);
      return 2;
    }
    if (resumed >= 0) {
      // --min-peers gates the first step of a fresh run only: a node resuming from its
      // checkpoint rejoins a mesh that is already training (or has finished: waiting for
      // training peers then would wait forever).
      min_peers_reached = true;
      metrics.Write("resume", {{"step", resumed}});
      published_step = static_cast<uint64_t>(resumed);
      swim->SetStep(published_step);
    }
    sync::BarrierConfig bc;
    bc.policy = *sync::ParsePolicy(config.barrier);
    bc.staleness = static_cast<uint64_t>(config.staleness);
    bc.sample = static_cast<size_t>(config.sample);
    bc.probe_timeout = swim->config().probe_timeout;
    // bsp/ssp need every peer's current step. Gossiped progress arrives about once per probe
    // interval, which would make each step wait up to a second; asking the peers directly is
    // pbsp/pssp with β >= live peers, which SPEC §6 defines to be exactly bsp/ssp.
    if (bc.policy == sync::Policy::kBsp || bc.policy == sync::Policy::kSsp) {
      bc.policy = bc.policy == sync::Policy::kBsp ? sync::Policy::kPbsp : sync::Policy::kPssp;
      bc.sample = std::numeric_limits<size_t>::max();
    }
    barrier = std::make_unique<sync::BarrierCore>(bc, config.name);
    select_policy = *sync::ParseSelectPolicy(config.select);
    published_training = true;
    membership::Meta meta;
    meta.training = true;
    meta.uplink_mbps = static_cast<float>(config.uplink_limit);
    meta.downlink_mbps = static_cast<float>(config.downlink_limit);
    swim->SetMeta(meta, Now());
    spdlog::info("task {}: {} parameters", config.task, trainer->num_params());
    bandwidth_timer = std::make_unique<gossip::Timer>(&loop);
    bandwidth_timer->Start(
        2000, [this] { UpdateBandwidth(); }, 2000);
    trainer->Start();
    trainer_started = true;
    return 0;
  }

  // ---- training plumbing (loop thread) -------------------------------------------------------

  void OnTrainerWake() {
    if (!trainer) return;
    uv_update_time(&loop);
    const TrainerState st = trainer->state();
    if (st.step != published_step) {
      published_step = st.step;
      swim->SetStep(st.step);
    }
    if (st.training != published_training) {
      published_training = st.training;
      membership::Meta meta = swim->Find(config.name)->meta;
      meta.training = st.training;
      swim->SetMeta(meta, Now());  // peers' barriers stop waiting on us (SPEC §6)
      Pump(0);
    }
    if (auto snap = trainer->TakeSnapshot()) {
      pending_snapshot = std::move(snap);
      if (!round) StartRound();
    }
    if (st.waiting) {
      if (!barrier_waiting || barrier_step != st.step) {
        barrier_waiting = true;
        barrier_step = st.step;
      }
      RunBarrier();
    }
  }

  // Feeds the barrier with what membership knows: every live, training peer's step; everyone
  // else leaves the barrier set at once.
  void RefreshProgress() {
    const int64_t now = Now();
    for (const auto& m : swim->Members()) {
      if (m.name == config.name) continue;
      const bool live =
          m.status == membership::Status::kAlive || m.status == membership::Status::kSuspect;
      if (live && m.meta.training) {
        barrier->OnProgress(m.name, m.step, now);
      } else {
        barrier->OnPeerRemoved(m.name);
      }
    }
  }

  void RunBarrier() {
    if (!barrier_waiting || !trainer) return;
    RefreshProgress();
    const int64_t now = Now();
    if (!min_peers_reached) {
      // --min-peers: the mesh forms before anyone trains, so no node races ahead alone.
      if (barrier->view().size() < static_cast<size_t>(config.min_peers)) {
        barrier_timer->Start(100, [this] { RunBarrier(); });
        return;
      }
      min_peers_reached = true;
      spdlog::info("{} training peers alive: starting to train", barrier->view().size());
    }
    const sync::Decision d = barrier->Check(barrier_step, now, rng);
    for (const auto& q : barrier->TakeQueries()) {
      const membership::Member* m = swim->Find(q.to);
      auto to = m ? NetAddr::Parse(m->addr) : std::nullopt;
      if (!to) continue;
      gossip::Datagram dg;
      dg.sender = config.name;
      dg.body = gossip::ProgressQuery{q.seq, barrier_step};
      auto bytes = codec->EncodeDatagram(dg);
      if (!bytes.empty()) udp->Send(*to, std::move(bytes));
    }
    if (d == sync::Decision::kPass) {
      barrier_waiting = false;
      barrier_timer->Stop();
      trainer->Permit(barrier_step + 1);
      return;
    }
    const sync::TimeMs deadline = barrier->NextDeadline();
    const int64_t delay =
        deadline == sync::kNoDeadline ? 1000 : std::max<int64_t>(1, deadline - now);
    barrier_timer->Start(delay, [this] { RunBarrier(); });
  }

  // Receivers for one round, among live training peers (SPEC §7).
  //
  // SELMCAST plans are global: every node computes the whole assignment and keeps its own row.
  // So that nodes with the same view build the same plan (and the receive loads it assumes hold),
  // the tie-breaking RNG is seeded from the cluster name and the wall-clock epoch (kPlanEpochMs),
  // not from this node's RNG; the plan then changes every epoch (ties randomized per round of
  // plans) and is cached within one, since the view rarely changes between rounds.
  static constexpr int64_t kPlanEpochMs = 1000;
  struct PlanCache {
    int64_t epoch = -1;
    std::string view;  // canonical text of candidates and bandwidths
    std::vector<std::string> receivers;
  } plan_cache;

  std::vector<std::string> ChooseReceivers(bool everyone) {
    std::vector<std::string> candidates;
    sync::BandwidthView bw;
    for (const auto& m : swim->Members()) {
      const bool live = m.status == membership::Status::kAlive;
      if (!live || !m.meta.training) continue;
      bw[m.name] = sync::NodeBandwidth{m.meta.uplink_mbps, m.meta.downlink_mbps, 0};
      if (m.name != config.name) candidates.push_back(m.name);
    }
    if (candidates.empty()) return {};
    bw[config.name];  // the sender itself is part of the global plan
    if (everyone) return candidates;
    if (select_policy != sync::SelectPolicy::kSelmcast) {
      return sync::Select(select_policy, config.name, candidates,
                          static_cast<size_t>(config.fanout), bw, rng);
    }
    const int64_t epoch = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count() /
                          kPlanEpochMs;
    std::string view;
    for (const auto& [name, b] : bw) {  // std::map: sorted, so the text is canonical
      view += fmt::format("{}={:.3g}/{:.3g};", name, b.uplink_mbps, b.downlink_mbps);
    }
    if (epoch != plan_cache.epoch || view != plan_cache.view) {
      sync::Rng plan_rng(static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ULL ^
                         std::hash<std::string>{}(config.cluster));
      plan_cache.epoch = epoch;
      plan_cache.view = std::move(view);
      plan_cache.receivers = sync::Select(select_policy, config.name, candidates,
                                          static_cast<size_t>(config.fanout), bw, plan_rng);
    }
    return plan_cache.receivers;
  }

  void StartRound() {
    if (!pending_snapshot || round || leaving) return;
    Snapshot snap = std::move(*pending_snapshot);
    pending_snapshot.reset();
    const auto receivers = ChooseReceivers(snap.final);
    if (receivers.empty()) return;
    Round r;
    r.id = next_round++;
    r.started = Now();
    r.fanout = static_cast<int>(receivers.size());
    auto chunks = gossip::SplitParams(*snap.params, r.id, snap.step);
    std::vector<Bytes> frames;
    for (auto& c : chunks) {
      gossip::Frame f;
      f.sender = config.name;
      f.body = std::move(c);
      frames.push_back(codec->EncodeFrame(f));
    }
    round = r;
    up_meter.Begin(r.started);
    for (const auto& name : receivers) {
      const membership::Member* m = swim->Find(name);
      const std::string& addr = m->meta.data_addr.empty() ? m->addr : m->meta.data_addr;
      auto to = NetAddr::Parse(addr);
      if (!to) continue;
      uint64_t bytes = 0;
      for (const auto& f : frames) bytes += f.size() + 4;
      const uint64_t round_id = r.id;
      // The transfer ends when the receiver acknowledges the whole snapshot (ParamAck); the
      // connection then closes. Closed without an ack (refused, aborted, idle timeout) = lost.
      TcpHub::ConnId id = data_tcp->Connect(
          *to,
          [this, round_id, name](TcpHub::ConnId cid, Bytes&& payload) {
            OnTransferReply(round_id, name, cid, payload);
          },
          [this, round_id, bytes](TcpHub::ConnId cid, int status) {
            bool acked = false;
            if (round && round->id == round_id) {
              round->transfers.erase(cid);
              acked = round->acked.erase(cid) > 0;
            }
            OnTransferDone(round_id, status == 0 && acked, bytes);
          });
      round->outstanding++;
      round->transfers[id] = name;
      for (const auto& f : frames) {
        if (!data_tcp->Send(id, f)) break;
      }
    }
    if (round && round->outstanding == 0) {
      up_meter.End(Now(), 0);
      round.reset();
    }
  }

  // A transfer to a member that failed or left is abandoned at once, so the next round (and
  // with it the rest of the mesh) does not wait for a TCP timeout (SPEC §6: no stalls).
  void AbortTransfersTo(const std::string& name) {
    if (!round) return;
    std::vector<TcpHub::ConnId> doomed;
    for (const auto& [cid, receiver] : round->transfers) {
      if (receiver == name) doomed.push_back(cid);
    }
    for (TcpHub::ConnId cid : doomed) {
      spdlog::info("abandoning the parameter transfer to {}", name);
      data_tcp->Abort(cid);
    }
  }

  // A frame from the receiver of one of our transfers: only its ParamAck for this round is
  // expected; anything else is dropped and counted, and the connection aborted.
  void OnTransferReply(uint64_t round_id, const std::string& receiver, TcpHub::ConnId cid,
                       const Bytes& payload) {
    gossip::Reject why{};
    auto frame = codec->DecodeFrame(payload.data(), payload.size(), &why);
    const auto* ack = frame ? std::get_if<gossip::ParamAckMsg>(&frame->body) : nullptr;
    if (!frame) {
      inbound->Count(why);
    } else if (ack == nullptr || frame->sender != receiver || ack->round != round_id) {
      inbound->Count(gossip::Reject::kSemantic);
    } else {
      if (round && round->id == round_id) round->acked.insert(cid);
      data_tcp->Close(cid);
      return;
    }
    data_tcp->Abort(cid);
  }

  void OnTransferDone(uint64_t round_id, bool ok, uint64_t bytes) {
    if (!round || round->id != round_id) return;
    round->outstanding--;
    if (ok) {
      round->delivered++;
      round->bytes += bytes;
      params_bytes_sent += bytes;
    }
    if (round->outstanding > 0) return;
    const double seconds = static_cast<double>(Now() - round->started) / 1000.0;
    up_meter.End(Now(), round->bytes);
    rounds_done++;
    fanout_sum += static_cast<uint64_t>(round->delivered);
    metrics.Write("sync",
                  {{"fanout", round->delivered}, {"bytes", round->bytes}, {"seconds", seconds}});
    round.reset();
    StartRound();
  }

  void OnParamChunk(TcpHub::ConnId id, const std::string& sender, gossip::ParamChunk&& chunk) {
    const membership::Member* m = swim->Find(sender);
    if (!trainer || m == nullptr || m->status == membership::Status::kFailed ||
        m->status == membership::Status::kLeft) {
      // Parameters only from live members of this mesh.
      inbound->Count(gossip::Reject::kSemantic);
      data_tcp->Abort(id);
      return;
    }
    const uint64_t chunk_bytes = chunk.data.size() * sizeof(float);
    auto [it, fresh] = incoming.try_emplace(id, 0);
    if (fresh) down_meter.Begin(Now());
    it->second += chunk_bytes;
    const uint64_t chunk_round = chunk.round;
    auto model = assemblers[sender].Add(chunk);
    if (!model) return;
    params_received++;
    gossip::Frame ack;  // the sender's round for this receiver ends with this
    ack.sender = config.name;
    ack.body = gossip::ParamAckMsg{chunk_round, model->step};
    data_tcp->Send(id, codec->EncodeFrame(ack));
    if (barrier->OnProgress(sender, model->step, Now()) && barrier_waiting) RunBarrier();
    trainer->Deliver(sender, std::move(model->params));
  }

  // ---- persistence ---------------------------------------------------------------------------

  std::string PeerSnapshotPath() const { return config.data_dir + "/peers.json"; }

  std::vector<std::string> LoadPeerSnapshot() {
    std::vector<std::string> out;
    std::ifstream in(PeerSnapshotPath());
    if (!in) return out;
    json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("peers") || !j["peers"].is_array()) {
      spdlog::warn("ignoring unreadable peer snapshot {}", PeerSnapshotPath());
      return out;
    }
    for (const auto& p : j["peers"]) {
      if (!p.is_string()) continue;
      auto a = NetAddr::Parse(p.get<std::string>());
      if (a && out.size() < 64) out.push_back(a->ToString());
    }
    if (!out.empty()) spdlog::info("peer snapshot: will rejoin {}", fmt::join(out, ", "));
    return out;
  }

  // Written atomically (temp file, fsync, rename) whenever membership changes.
  void SavePeerSnapshot() {
    if (config.data_dir.empty()) return;
    json peers = json::array();
    for (const auto& m : swim->Members()) {
      if (m.name != config.name && m.status == membership::Status::kAlive) peers.push_back(m.addr);
    }
    if (peers.empty()) return;  // keep the last non-empty view to rejoin through
    const std::string tmp = PeerSnapshotPath() + ".tmp";
    const std::string body = JsonText(json{{"peers", peers}}) + "\n";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    bool ok = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
    ok = ::fsync(fd) == 0 && ok;
    ::close(fd);
    if (ok) std::rename(tmp.c_str(), PeerSnapshotPath().c_str());
  }

  void OnIncomingClosed(TcpHub::ConnId id) {
    auto it = incoming.find(id);
    if (it == incoming.end()) return;
    down_meter.End(Now(), it->second);
    incoming.erase(it);
  }

  // Every 2 s: turn measurements into estimates and publish them when they moved by > 10 %.
  void UpdateBandwidth() {
    up_meter.Sample();
    down_meter.Sample();
    // Capacity estimates age with a half-life of about 30 s (15 ticks of 2 s).
    up_meter.estimate.Decay(0.955);
    down_meter.estimate.Decay(0.955);
    const float up = static_cast<float>(up_meter.estimate.CapacityMbps(config.uplink_limit));
    const float down = static_cast<float>(down_meter.estimate.CapacityMbps(config.downlink_limit));
    const membership::Member* self = swim->Find(config.name);
    if (self == nullptr || leaving) return;
    auto moved = [](float a, float b) { return std::abs(a - b) > 0.1f * std::max(a, b); };
    if (moved(up, self->meta.uplink_mbps) || moved(down, self->meta.downlink_mbps)) {
      membership::Meta meta = self->meta;
      meta.uplink_mbps = up;
      meta.downlink_mbps = down;
      swim->SetMeta(meta, Now());
      Pump(0);
    }
  }

  // `meshtrain keys`: rotation of the cluster key, spread to every live member.
  void HandleKeys(TcpHub::ConnId id, const RpcRequest& req) {
    if (!keyring) {
      RpcReply(id, {{"ok", false},
                    {"error", "encryption is off on this agent (start it with --encrypt)"}});
      return;
    }
    KeyOps(id, req);
  }

  gossip::KeyOpReplyMsg ApplyKeyOp(const gossip::KeyOpMsg& m) {
    gossip::KeyOpReplyMsg r;
    r.seq = m.seq;
    r.ok = true;
    switch (m.op) {
      case gossip::KeyOpKind::kInstall:
        keyring->Install(*m.key);
        break;
      case gossip::KeyOpKind::kUse:
        if (!keyring->Use(*m.key)) r = {m.seq, false, "key is not installed", {}, {}};
        break;
      case gossip::KeyOpKind::kRemove:
        if (!keyring->Remove(*m.key)) {
          r = {m.seq, false, "key is the primary key or not installed", {}, {}};
        }
        break;
      case gossip::KeyOpKind::kList:
        break;
    }
    for (const auto& k : keyring->Keys()) r.keys.push_back(gossip::KeyFingerprint(k));
    r.primary = gossip::KeyFingerprint(keyring->Primary());
    if (m.op != gossip::KeyOpKind::kList) {
      spdlog::info("keys: {} {} -> {}", gossip::KeyOpName(m.op),
                   m.key ? gossip::KeyFingerprint(*m.key) : "", r.ok ? "ok" : r.error);
    }
    return r;
  }

  struct KeyRound {
    TcpHub::ConnId rpc = 0;
    int outstanding = 0;
    int nodes = 0;
    json failed = json::object();
    std::map<std::string, int> keys;       // fingerprint -> nodes holding it
    std::map<std::string, int> primaries;  // fingerprint -> nodes using it as primary
  };
  std::map<uint32_t, KeyRound> key_rounds;
  uint32_t next_key_seq = 1;

  void KeyRoundRecord(uint32_t seq, const std::string& node, const gossip::KeyOpReplyMsg* r) {
    auto it = key_rounds.find(seq);
    if (it == key_rounds.end()) return;
    KeyRound& kr = it->second;
    if (r == nullptr) {
      kr.failed[node] = "no reply";
    } else if (!r->ok) {
      kr.failed[node] = r->error;
    }
    if (r != nullptr) {
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
    RpcReply(kr.rpc, out);
    key_rounds.erase(it);
  }

  // Applies the operation here, then sends it to every live member and gathers their answers.
  void KeyOps(TcpHub::ConnId rpc_id, const RpcRequest& req) {
    gossip::KeyOpMsg op;
    op.seq = next_key_seq++;
    if (req.key_op == "install") op.op = gossip::KeyOpKind::kInstall;
    if (req.key_op == "use") op.op = gossip::KeyOpKind::kUse;
    if (req.key_op == "remove") op.op = gossip::KeyOpKind::kRemove;
    if (req.key_op == "list") op.op = gossip::KeyOpKind::kList;
    if (op.op != gossip::KeyOpKind::kList) {
      auto key = gossip::ParseKeyBase64(req.key);
      if (!key) {
        RpcReply(rpc_id, {{"ok", false}, {"error", "invalid key: expected base64 of 32 bytes"}});
        return;
      }
      op.key = *key;
    }
    KeyRound& kr = key_rounds[op.seq];
    kr.rpc = rpc_id;
    std::vector<const membership::Member*> peers;
    auto members = swim->Members();
    for (const auto& m : members) {
      if (m.name != config.name && m.status == membership::Status::kAlive) peers.push_back(&m);
    }
    kr.nodes = static_cast<int>(peers.size()) + 1;
    kr.outstanding = kr.nodes;
    const gossip::KeyOpReplyMsg local = ApplyKeyOp(op);
    gossip::Frame frame;
    frame.sender = config.name;
    frame.body = op;
    const Bytes bytes = codec->EncodeFrame(frame);
    const uint32_t seq = op.seq;
    for (const membership::Member* m : peers) {
      auto to = NetAddr::Parse(m->addr);
      const std::string name = m->name;
      auto got = std::make_shared<bool>(false);
      TcpHub::ConnId cid = data_tcp->Connect(
          *to,
          [this, seq, name, got](TcpHub::ConnId c, Bytes&& payload) {
            gossip::Reject why{};
            auto f = codec->DecodeFrame(payload.data(), payload.size(), &why);
            auto* r = f ? std::get_if<gossip::KeyOpReplyMsg>(&f->body) : nullptr;
            if (r == nullptr || r->seq != seq || *got) {
              inbound->Count(f ? gossip::Reject::kSemantic : why);
              data_tcp->Abort(c);
              return;
            }
            *got = true;
            KeyRoundRecord(seq, name, r);
            data_tcp->Close(c);
          },
          [this, seq, name, got](TcpHub::ConnId, int) {
            if (!*got) {
              *got = true;
              KeyRoundRecord(seq, name, nullptr);
            }
          });
      data_tcp->Send(cid, bytes);
    }
    KeyRoundRecord(seq, config.name, &local);
  }

  void PrintBanner() {
    std::printf(
        "meshtrain agent %s\n"
        "  name:      %s\n  bind:      %s\n  advertise: %s\n  rpc:       %s\n"
        "  cluster:   %s\n  encrypted: %s\n  profile:   %s\n  task:      %s\n"
        "  barrier:   %s\n  selection: %s\n",
        MESHTRAIN_VERSION_STRING, config.name.c_str(), config.bind.c_str(),
        config.advertise.c_str(), config.rpc.c_str(), config.cluster.c_str(),
        keyring ? "yes" : "no", config.profile.c_str(), config.task.c_str(), config.barrier.c_str(),
        config.select.c_str());
    std::fflush(stdout);
  }

  // ---- membership plumbing -------------------------------------------------------------------

  // Sends what the core wants sent, reports its events, and re-arms its timer. `join_req`
  // tags new push-pulls with the RPC join that caused them.
  void Pump(uint64_t join_req) {
    for (auto& out : swim->TakePackets()) {
      auto to = NetAddr::Parse(out.to_addr);
      if (!to) continue;
      gossip::Datagram dg;
      dg.sender = config.name;
      dg.body = std::move(out.packet);
      Bytes bytes = codec->EncodeDatagram(dg);
      if (bytes.empty()) {
        oversize_drops++;
        spdlog::warn("dropping a datagram to {} that does not fit in {} bytes", out.to_addr,
                     gossip::kMaxDatagramBytes);
        continue;
      }
      udp->Send(*to, std::move(bytes));
    }
    for (auto& pp : swim->TakePushPulls()) StartPushPull(pp, join_req);
    bool membership_changed = false;
    for (auto& ev : swim->TakeEvents()) {
      OnEvent(ev);
      membership_changed = true;
    }
    if (membership_changed) SavePeerSnapshot();
    ArmSwimTimer();
    if (barrier_waiting && (membership_changed || swim_progress_dirty)) {
      swim_progress_dirty = false;
      RunBarrier();
    }
  }
  bool swim_progress_dirty = false;

  void ArmSwimTimer() {
    const int64_t delay = std::max<int64_t>(1, swim->NextDeadline() - Now());
    swim_timer->Start(delay, [this] {
      uv_update_time(&loop);
      swim->Tick(Now());
      Pump(0);
    });
  }

  void StartPushPull(const membership::OutPushPull& pp, uint64_t join_req) {
    auto to = NetAddr::Parse(pp.to_addr);
    if (!to) {
      swim->PushPullFailed(pp.to_addr, Now());
      return;
    }
    TcpHub::ConnId id = data_tcp->Connect(
        *to,
        [this](TcpHub::ConnId cid, Bytes&& payload) {
          gossip::Reject why{};
          auto frame = codec->DecodeFrame(payload.data(), payload.size(), &why);
          if (!frame) {
            inbound->Count(why);
            data_tcp->Abort(cid);
            return;
          }
          auto* msg = std::get_if<gossip::PushPullMsg>(&frame->body);
          auto it = pushpulls.find(cid);
          if (msg == nullptr || !msg->response || it == pushpulls.end()) {
            inbound->Count(gossip::Reject::kSemantic);
            data_tcp->Abort(cid);
            return;
          }
          it->second.done = true;
          swim->HandlePushPullResponse(msg->state, Now());
          data_tcp->Close(cid);
          Pump(0);
        },
        [this](TcpHub::ConnId cid, int status) {
          auto it = pushpulls.find(cid);
          if (it == pushpulls.end()) return;
          PushPullCtx ctx = it->second;
          pushpulls.erase(it);
          if (!ctx.done) {
            const char* why = status < -100000 ? "protocol error" : uv_strerror(status);
            if (ctx.join) {
              spdlog::warn(
                  "could not join through {}: {}{}", ctx.addr, why,
                  config.retry_join ? " (will retry)" : " (use --retry-join to keep trying)");
            } else {
              spdlog::debug("push-pull with {} failed: {}", ctx.addr, why);
            }
            swim->PushPullFailed(ctx.addr, Now());
          }
          FinishJoinPart(ctx.join_req, ctx.done);
          Pump(0);
        });
    // Register before sending: a synchronous connect failure has already called on_close, in
    // which case the id is unknown to the hub and Send fails.
    gossip::Frame frame;
    frame.sender = config.name;
    frame.body = gossip::PushPullMsg{false, pp.request};
    pushpulls[id] = PushPullCtx{pp.to_addr, false, join_req, pp.request.join};
    if (join_req != 0) {
      auto jr = join_reqs.find(join_req);
      if (jr != join_reqs.end()) jr->second.outstanding++;
    }
    if (!data_tcp->Send(id, codec->EncodeFrame(frame))) {
      auto it = pushpulls.find(id);
      if (it != pushpulls.end()) {
        pushpulls.erase(it);
        swim->PushPullFailed(pp.to_addr, Now());
        FinishJoinPart(join_req, false);
      }
    }
  }

  void FinishJoinPart(uint64_t join_req, bool ok) {
    if (join_req == 0) return;
    auto it = join_reqs.find(join_req);
    if (it == join_reqs.end()) return;
    it->second.outstanding--;
    if (ok) it->second.joined++;
    if (it->second.outstanding <= 0) {
      json reply = {{"ok", it->second.joined > 0}, {"joined", it->second.joined}};
      if (it->second.joined == 0) reply["error"] = "could not contact any of the given peers";
      RpcReply(it->second.rpc_conn, reply);
      join_reqs.erase(it);
    }
  }

  void OnEvent(const membership::Event& ev) {
    using K = membership::Event::Kind;
    const char* status = nullptr;
    switch (ev.kind) {
      case K::kJoined:
        spdlog::info("member {} joined at {}", ev.member.name, ev.member.addr);
        status = "alive";
        break;
      case K::kAlive:
        spdlog::info("member {} is alive again", ev.member.name);
        status = "alive";
        break;
      case K::kSuspect:
        spdlog::info("member {} is suspect", ev.member.name);
        status = "suspect";
        break;
      case K::kFailed:
        spdlog::warn("member {} failed", ev.member.name);
        status = "failed";
        AbortTransfersTo(ev.member.name);
        break;
      case K::kLeft:
        spdlog::info("member {} left", ev.member.name);
        status = "left";
        AbortTransfersTo(ev.member.name);
        break;
      case K::kReaped:
        spdlog::info("member {} reaped", ev.member.name);
        status = "reaped";
        break;
      case K::kUpdated:
        return;
    }
    metrics.Write("member", {{"name", ev.member.name}, {"status", status}});
  }

  void OnDatagram(const uint8_t* data, size_t len, const NetAddr& from) {
    // Size, per-source budget, decoding, replay: counted by reason inside.
    auto dg = inbound->OnDatagram(data, len, from.ToString(), static_cast<double>(uv_hrtime()) / 1e9);
    if (!dg) return;
    uv_update_time(&loop);
    if (auto* pkt = std::get_if<membership::Packet>(&dg->body)) {
      swim->HandlePacket(from.ToString(), *pkt, Now());
      swim_progress_dirty = true;
      Pump(0);
    } else if (auto* q = std::get_if<gossip::ProgressQuery>(&dg->body)) {
      gossip::Datagram reply;
      reply.sender = config.name;
      const TrainerState st = trainer ? trainer->state() : TrainerState{};
      reply.body = gossip::ProgressReply{q->seq, st.step, trainer != nullptr && st.training};
      if (barrier && trainer) barrier->OnProgress(dg->sender, q->step, Now());
      udp->Send(from, codec->EncodeDatagram(reply));
    } else if (auto* rep = std::get_if<gossip::ProgressReply>(&dg->body)) {
      if (!barrier) return;
      bool changed = rep->training ? barrier->OnReply(dg->sender, rep->seq, rep->step, Now())
                                   : barrier->OnPeerRemoved(dg->sender);
      if (changed && barrier_waiting) RunBarrier();
    }
  }

  void OnDataFrame(TcpHub::ConnId id, Bytes&& payload) {
    auto frame = inbound->OnFrame(payload.data(), payload.size());
    if (!frame) {
      data_tcp->Abort(id);
      return;
    }
    uv_update_time(&loop);
    if (auto* pp = std::get_if<gossip::PushPullMsg>(&frame->body)) {
      if (pp->response) {
        inbound->Count(gossip::Reject::kSemantic);
        data_tcp->Abort(id);
        return;
      }
      gossip::Frame reply;
      reply.sender = config.name;
      reply.body = gossip::PushPullMsg{true, swim->HandlePushPullRequest(pp->state, Now())};
      data_tcp->Send(id, codec->EncodeFrame(reply));
      data_tcp->Close(id);
      Pump(0);
    } else if (auto* chunk = std::get_if<gossip::ParamChunk>(&frame->body)) {
      OnParamChunk(id, frame->sender, std::move(*chunk));
    } else if (auto* op = std::get_if<gossip::KeyOpMsg>(&frame->body)) {
      // Only reachable through an authenticated (sealed) frame when encryption is on; a
      // plaintext agent has no keyring and refuses.
      gossip::KeyOpReplyMsg reply;
      if (keyring) {
        reply = ApplyKeyOp(*op);
      } else {
        reply = {op->seq, false, "encryption is off on this agent", {}, {}};
      }
      gossip::Frame f;
      f.sender = config.name;
      f.body = reply;
      data_tcp->Send(id, codec->EncodeFrame(f));
      data_tcp->Close(id);
    } else {
      inbound->Count(gossip::Reject::kSemantic);
      data_tcp->Abort(id);
    }
  }

  // ---- RPC -----------------------------------------------------------------------------------

  void RpcReply(TcpHub::ConnId id, const json& j) {
    const std::string s = JsonText(j);
    rpc_tcp->Send(id, Bytes(s.begin(), s.end()));
    rpc_tcp->Close(id);
  }

  json MembersJson() {
    json arr = json::array();
    for (const auto& m : swim->Members()) {
      arr.push_back({{"name", m.name},
                     {"addr", m.addr},
                     {"status", membership::StatusName(m.status)},
                     {"incarnation", m.incarnation},
                     {"step", m.step},
                     {"training", m.meta.training},
                     {"uplink_mbps", m.meta.uplink_mbps},
                     {"downlink_mbps", m.meta.downlink_mbps}});
    }
    return {{"members", arr}};
  }

  uint64_t RejectedPackets() const {
    return inbound->rejects().total() + rpc_rejects + data_tcp->framing_errors();
  }

  json RejectsJson() const {
    json out = json::object();
    for (size_t i = 0; i < gossip::kNumRejects; ++i) {
      const auto r = static_cast<gossip::Reject>(i);
      if (inbound->rejects().get(r) > 0) out[gossip::RejectName(r)] = inbound->rejects().get(r);
    }
    if (rpc_rejects > 0) out["rpc"] = rpc_rejects;
    if (data_tcp->framing_errors() > 0) out["framing"] = data_tcp->framing_errors();
    if (data_tcp->refused_connections() > 0)
      out["connections_refused"] = data_tcp->refused_connections();
    return out;
  }

  json StatusJson() {
    size_t peers_alive = 0;
    for (const auto& m : swim->Members()) {
      if (m.name != config.name &&
          (m.status == membership::Status::kAlive || m.status == membership::Status::kSuspect)) {
        peers_alive++;
      }
    }
    const TrainerState st = trainer ? trainer->state() : TrainerState{};
    json loss = st.loss ? json(*st.loss) : json(nullptr);
    json acc = st.accuracy ? json(*st.accuracy) : json(nullptr);
    const double wait_s = barrier ? barrier->WaitSeconds(Now()) : 0.0;
    return {{"name", config.name},
            {"step", st.step},
            {"loss", loss},
            {"accuracy", acc},
            {"training", trainer != nullptr && st.training},
            {"train_loss", st.train_loss},
            {"params_received", params_received},
            {"params_crc32", st.params_crc32},
            {"rounds", rounds_done},
            {"barrier", config.barrier},
            {"select", config.select},
            {"peers_alive", peers_alive},
            {"barrier_wait_s", wait_s},
            {"bytes_sent", udp->bytes_sent() + data_tcp->bytes_sent()},
            {"bytes_received", udp->bytes_received() + data_tcp->bytes_received()},
            {"mean_fanout", rounds_done ? static_cast<double>(fanout_sum) / rounds_done : 0.0},
            {"rejected_packets", RejectedPackets()},
            {"rejected_by_reason", RejectsJson()},
            {"health_score", swim->HealthScore()},
            {"incarnation", swim->Find(config.name) ? swim->Find(config.name)->incarnation : 0},
            {"uptime_s", metrics.Elapsed()}};
  }

  void OnRpcFrame(TcpHub::ConnId id, Bytes&& payload) {
    std::string error;
    auto req = ParseRpcRequest(payload.data(), payload.size(), &error);
    if (!req) {
      rpc_rejects++;
      RpcReply(id, {{"ok", false}, {"error", error}});
      return;
    }
    if (!config.rpc_token.empty() && !TokenMatches(config.rpc_token, req->token)) {
      rpc_rejects++;
      RpcReply(id, {{"ok", false},
                    {"error",
                     "permission denied: missing or wrong RPC token "
                     "(set MESHTRAIN_RPC_TOKEN or --rpc-token)"}});
      return;
    }
    uv_update_time(&loop);
    const std::string& cmd = req->cmd;
    if (cmd == "members") {
      json out = MembersJson();
      out["ok"] = true;
      RpcReply(id, out);
    } else if (cmd == "status") {
      json out = StatusJson();
      out["ok"] = true;
      RpcReply(id, out);
    } else if (cmd == "join") {
      std::vector<std::string> addrs;
      for (const auto& a : req->addrs) {
        auto parsed = NetAddr::Parse(a);
        if (!parsed || parsed->port() == 0) {
          RpcReply(id, {{"ok", false}, {"error", "invalid address '" + a + "'"}});
          return;
        }
        addrs.push_back(parsed->ToString());
      }
      if (leaving) {
        RpcReply(id, {{"ok", false}, {"error", "agent is leaving"}});
        return;
      }
      const uint64_t jr = next_join_req++;
      join_reqs[jr] = JoinReq{id, 0, 0};
      swim->Join(addrs, Now());
      Pump(jr);
      auto it = join_reqs.find(jr);
      if (it != join_reqs.end() && it->second.outstanding == 0) {
        join_reqs.erase(it);
        RpcReply(id, {{"ok", false}, {"error", "no push-pull could be started"}});
      }
    } else if (cmd == "leave") {
      RpcReply(id, {{"ok", true}});
      StartLeave();
    } else if (cmd == "force-leave") {
      const std::string& name = req->name;
      if (swim->ForceLeave(name, Now())) {
        Pump(0);
        RpcReply(id, {{"ok", true}});
      } else {
        const auto* m = swim->Find(name);
        RpcReply(
            id, {{"ok", false},
                 {"error", m == nullptr ? "no member named '" + name + "'"
                                        : "member '" + name + "' is " +
                                              membership::StatusName(m->status) + ", not failed"}});
      }
    } else if (cmd == "keys") {
      HandleKeys(id, *req);
    }
  }

  // ---- leave and shutdown --------------------------------------------------------------------

  void StartLeave() {
    if (leaving) return;
    leaving = true;
    retry_join_active = false;
    join_timer->Stop();
    leave_started = Now();
    swim->Leave(Now());
    Pump(0);
    // SPEC §3: announce "left", wait up to 3 s for the news to spread, then exit.
    leave_timer->Start(
        kLeavePollMs,
        [this] {
          const bool others = swim->NumAlive() > 1;
          const bool spread = swim->PendingUpdates() == 0;
          if (!others || spread || Now() - leave_started >= kLeaveMaxMs) {
            spdlog::info("left the mesh after {} ms", Now() - leave_started);
            Shutdown();
          }
        },
        kLeavePollMs);
  }

  void Shutdown() {
    if (trainer && trainer_started) {
      trainer->Stop();
      if (auto err = trainer->SaveCheckpoint(); !err.empty()) {
        spdlog::error("final checkpoint failed: {}", err);
      } else if (!config.data_dir.empty()) {
        spdlog::info("final checkpoint written at step {}", trainer->state().step);
      }
    }
    // Start() may have failed part-way: close whatever exists.
    if (trainer_wake) trainer_wake->Close();
    for (auto* t : {barrier_timer.get(), swim_timer.get(), join_timer.get(), leave_timer.get(),
                    bandwidth_timer.get()}) {
      if (t != nullptr) t->Close();
    }
    for (auto& s : signals) s->Close();
    if (udp) udp->Close();
    if (data_tcp) data_tcp->CloseAll();
    if (rpc_tcp) rpc_tcp->CloseAll();
    uv_stop(&loop);
  }
};

Agent::Agent(AgentConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Agent::~Agent() = default;

int Agent::Run() {
  Impl& s = *impl_;
  uv_loop_init(&s.loop);
  int rc = s.Start();
  if (rc == 0) {
    uv_run(&s.loop, UV_RUN_DEFAULT);
  } else {
    s.Shutdown();
  }
  // Free everything that holds handles, then check the loop closes cleanly.
  s.trainer.reset();
  s.trainer_wake.reset();
  s.bandwidth_timer.reset();
  s.barrier_timer.reset();
  s.swim_timer.reset();
  s.join_timer.reset();
  s.leave_timer.reset();
  s.signals.clear();
  s.udp.reset();
  s.data_tcp.reset();
  s.rpc_tcp.reset();
  if (int close_rc = gossip::DrainAndCloseLoop(&s.loop); close_rc != 0) {
    spdlog::warn("event loop closed with handles still open ({})", uv_strerror(close_rc));
  }
  return rc == 0 ? s.exit_code : rc;
}

}  // namespace meshtrain::daemon
