// The agent is a thin libuv driver around node::Node (docs/design.md "The node core"): every
// libuv callback becomes an input (bytes from the network after wire/inbound.h's checks), every
// output a send, connect, close, trainer call or log/metrics line; one uv_timer_t waits for
// NextDeadline(). Inputs that executing outputs cause (a connect that fails at once, a close)
// are queued and fed after the current batch, never re-entering the node.
#include "daemon/agent.h"

#include <spdlog/spdlog.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "base/loop_guard.h"
#include "daemon/addressing.h"
#include "daemon/consensus_reduce.h"
#include "daemon/key_rotation.h"
#include "daemon/keyring_file.h"
#include "daemon/link_prober.h"
#include "daemon/net_endpoint.h"
#include "daemon/offload.h"
#include "daemon/ops/dashboard_state.h"
#include "daemon/ops/http_server.h"
#include "daemon/ops/json_text.h"
#include "daemon/ops/log_tap.h"
#include "daemon/ops/loop_monitor.h"
#include "daemon/ops/metrics.h"
#include "daemon/ops/prometheus.h"
#include "daemon/ops/rpc_server.h"
#include "daemon/ops/status_json.h"
#include "daemon/param_streamer.h"
#include "daemon/peer_snapshot.h"
#include "daemon/setup.h"
#include "daemon/stamp_clock.h"
#include "daemon/trainer/external_trainer.h"
#include "daemon/trainer/trainer.h"
#include "learn/mixing.h"
#include "learn/rng.h"
#include "node/node.h"
#include "transport/transport.h"
#include "wire/codec.h"
#include "wire/crypto.h"
#include "wire/inbound.h"

namespace meshtrain::daemon {

using nlohmann::json;
using transport::Bytes;
using transport::TcpHub;
using wire::NetAddr;

struct Agent::Impl : RpcBackend {
  explicit Impl(AgentConfig c) : config(std::move(c)) {}

  AgentConfig config;
  std::unique_ptr<learn::Task> embedded_task;  // Agent(config, task): trained instead of --task
  uv_loop_t loop{};
  MetricsLog metrics;
  std::shared_ptr<wire::Keyring> keyring;
  std::unique_ptr<wire::Codec> codec;
  std::unique_ptr<wire::Inbound> inbound;
  std::unique_ptr<transport::UdpEndpoint> udp;
  std::unique_ptr<TcpHub> data_tcp;
  std::unique_ptr<NetEndpoint> net;
  std::unique_ptr<ParamStreamer> streamer;  // snapshots out, chunk by chunk
  std::unique_ptr<LoopMonitor> loop_monitor;
  std::unique_ptr<LinkProber> prober;  // link-capacity probes (contract.md "Receiver selection")
  std::unique_ptr<RpcServer> rpc;
  std::unique_ptr<KeyRotation> keys;
  std::unique_ptr<StampClock> stamps;  // what messages are stamped with (stamp_clock.h)
  std::unique_ptr<PeerSnapshotWriter> peer_snapshot;
  std::unique_ptr<transport::Timer> timer;
  std::unique_ptr<transport::Async> trainer_wake;
  std::vector<std::unique_ptr<transport::Signal>> signals;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<node::Node> node;
  // Observability: --http, `monitor`, and what the dashboard plots.
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<transport::Timer> publish_timer;
  std::unique_ptr<transport::Async> log_wake;
  std::shared_ptr<LogTap> tap;
  spdlog::level::level_enum console_level = spdlog::level::info;
  PlanView plan_view;
  DashboardCurves curves;  // with --http: what the dashboard plots
  uint64_t publishes = 0;
  uint64_t internal_errors = 0;  // exceptions caught at the driver's boundary
  double round_s = 0;            // EWMA of parameter round times (--sync-every auto)
  int exit_code = 0;
  bool stopping = false;

  // Inputs waiting to be fed (see the file comment) and whether a batch is running.
  std::deque<node::Input> queue;
  bool feeding = false;

  int64_t Now() { return static_cast<int64_t>(uv_now(&loop)); }
  double MonoSeconds() { return static_cast<double>(uv_hrtime()) / 1e9; }
  static uint64_t MonoMs() { return uv_hrtime() / 1000000; }
  // The wall clock, shifted by --test-clock-offset (tests only): it starts the stamp clock.
  uint64_t WallMs() const {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count() +
                    static_cast<int64_t>(config.test_clock_offset_s * 1000);
    return static_cast<uint64_t>(std::max<int64_t>(1, ms));
  }

  // Resolves `texts` off the loop thread (addressing.h) and feeds the join.
  void ResolveAndJoin(uint64_t tag, const std::vector<std::string>& texts) {
    ResolveAsync(
        &loop, texts, config.JoinFamily(),
        [this, tag](std::vector<std::string> addrs, std::vector<std::string> errors) {
          if (stopping) return;
          for (const auto& e : errors) spdlog::warn("join: {}", e);
          addrs.erase(std::remove(addrs.begin(), addrs.end(), config.advertise), addrs.end());
          if (tag != 0 && addrs.empty()) {
            rpc->Reply(tag, {{"ok", false},
                             {"error", errors.empty() ? "no address to join" : errors.front()}});
            return;
          }
          Feed(node::JoinCmd{tag, std::move(addrs)});
        });
  }

  // ---- the driver loop ------------------------------------------------------------------------

  void Feed(node::Input in) {
    queue.push_back(std::move(in));
    if (!feeding && node) Drain();
  }

  // Feeds queued inputs, in order, until none is left; then waits for the next deadline.
  void Drain() {
    feeding = true;
    while (!queue.empty()) {
      node::Input next = std::move(queue.front());
      queue.pop_front();
      Guarded("input", [&] {
        uv_update_time(&loop);
        node->Step(std::move(next), Now());
        Execute(node->TakeOutput());
      });
    }
    feeding = false;
    ArmTimer();
  }

  void OnTimer() {
    if (!node) return;
    feeding = true;
    Guarded("tick", [&] {
      uv_update_time(&loop);
      node->Tick(Now());
      Execute(node->TakeOutput());
    });
    feeding = false;
    Drain();
  }

  // The boundary no exception crosses (libuv: never throw through a callback): what
  // escapes one input is logged and counted, and the loop goes on with the next.
  template <typename Fn>
  void Guarded(const char* what, Fn&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      internal_errors++;
      spdlog::error("internal error while handling {}: {}", what, e.what());
    } catch (...) {
      internal_errors++;
      spdlog::error("internal error while handling {}", what);
    }
  }

  // --sync-every auto: from the measured round time (EWMA) and the trainer's step time.
  void AdaptSyncEvery(const node::RoundDone& r) {
    if (!trainer || !config.sync_every_auto || r.fanout == 0) return;
    round_s = round_s == 0 ? r.seconds : 0.7 * round_s + 0.3 * r.seconds;
    const TrainerState st = trainer->state();
    const int h = AutoSyncEvery(round_s, st.step_s);
    if (h != st.sync_every) {
      spdlog::debug("sync every {} steps (round {:.3f} s, step {:.4f} s)", h, round_s, st.step_s);
      trainer->SetSyncEvery(h);
    }
  }

  void ArmTimer() {
    if (!node || stopping) return;
    const int64_t deadline = node->NextDeadline();
    timer->Start(std::max<int64_t>(1, std::min<int64_t>(deadline - Now(), 60000)),
                 [this] { OnTimer(); });
  }

  void Execute(std::vector<node::Output> outputs) {
    for (auto& o : node::RouteNetwork(std::move(outputs), *net)) {
      if (auto* p = std::get_if<node::Permit>(&o)) {
        if (trainer) trainer->Permit(p->step, p->mesh_step_ms / 1000.0);
      } else if (auto* m = std::get_if<node::Mix>(&o)) {
        if (trainer) {
          trainer->Deliver(m->from, std::move(m->params), m->step, m->finished,
                           m->final_model ? std::optional<uint64_t>(m->sender_step) : std::nullopt);
        }
      } else if (auto* mc = std::get_if<node::MixChunk>(&o)) {
        if (trainer) trainer->DeliverChunk(std::move(*mc));
      } else if (auto* a = std::get_if<node::AdoptState>(&o)) {
        if (trainer) trainer->Adopt(std::move(a->params), a->step);
      } else if (auto* red = std::get_if<node::ConsensusReduce>(&o)) {
        // The end-of-training average: a pass over every final model, off the loop.
        auto result = std::make_shared<node::ConsensusResult>();
        result->id = red->id;
        OffloadBulk(
            &loop,
            [task = PrepareReduce(std::move(*red), config.robust,
                                  trainer ? trainer->Robust() : learn::RobustReport{}),
             result] {
              result->params = std::make_shared<const std::vector<float>>(RunReduce(task));
            },
            [this, result] {
              if (!stopping) Feed(std::move(*result));
            });
      } else if (auto* ac = std::get_if<node::AdoptConsensus>(&o)) {
        if (trainer) trainer->AdoptConsensus(std::move(ac->params), ac->participants, ac->settled);
      } else if (auto* req = std::get_if<node::PlanRequest>(&o)) {
        SolvePlanOffLoop(&loop, std::move(*req), [this](node::PlanResult r, PlanView view) {
          if (stopping) return;
          plan_view = std::move(view);
          Feed(std::move(r));
        });
      } else if (RecordEvent(o, &metrics)) {
        if (auto* r = std::get_if<node::RoundDone>(&o)) AdaptSyncEvery(*r);
        continue;  // member and sync lines, log lines
      } else if (auto* done = std::get_if<node::CommandDone>(&o)) {
        rpc->Reply(done->tag, CommandReply(*done));
      } else if (auto* left = std::get_if<node::LeaveDone>(&o)) {
        spdlog::info("left the mesh after {} ms", left->took_ms);
        Shutdown();
      } else if (std::holds_alternative<node::RetryJoin>(o)) {
        ResolveAndJoin(0, config.join);  // names are resolved again on every retry
      } else if (auto* gave_up = std::get_if<node::JoinGaveUp>(&o)) {
        spdlog::error(
            "could not join any of the --join peers in {} attempts (--retry-max): exiting",
            gave_up->attempts);
        exit_code = 1;
        Shutdown();
      } else if (auto* ri = std::get_if<node::RelayedIn>(&o)) {
        OnRelayed(*ri);
      } else if (std::holds_alternative<node::MembershipChanged>(o)) {
        std::vector<std::string> addrs;
        for (auto& [name, addr] : LivePeers(node->Members(), config.name)) addrs.push_back(addr);
        peer_snapshot->Save(std::move(addrs));
      }
    }
  }

  // ---- inbound ----------------------------------------------------------------------------------

  void OnDatagram(const uint8_t* data, size_t len, const NetAddr& from) {
    if (wire::IsProbeDatagram(data, len)) {
      // Timestamped now, while the kernel still holds this datagram's receive time.
      if (prober) prober->OnDatagram(data, len, from, udp->ReceiveTimestampNs());
      return;
    }
    auto dg = inbound->OnDatagram(data, len, from.ToString(), MonoSeconds());
    if (dg) Feed(node::DatagramIn{from.ToString(), std::move(*dg)});
  }

  // A datagram our relay delivered: untrusted like any other (rate limit, decode,
  // replay guard), and never a relay frame again (no nesting).
  void OnRelayed(const node::RelayedIn& ri) {
    auto dg = inbound->OnRelayed(ri.inner.data(), ri.inner.size(), ri.via_addr, MonoSeconds());
    if (dg) Feed(node::DatagramIn{std::string(), std::move(*dg), ri.via});
  }

  void OnIncomingFrame(TcpHub::ConnId id, Bytes&& payload) {
    OnIncoming(id, inbound->OnFrame(payload.data(), payload.size()));
  }

  // A large frame (a parameter chunk) as read: its values are not copied (Codec::DecodeFrameHeld).
  void OnIncomingBigFrame(TcpHub::ConnId id, wire::BigFrame&& f) {
    OnIncoming(id, inbound->OnFrameHeld(f.storage, f.data(), f.len));
  }

  void OnIncoming(TcpHub::ConnId id, std::optional<wire::Frame> frame) {
    if (!frame) {
      data_tcp->Abort(id);
      return;
    }
    if (auto* op = std::get_if<wire::KeyOpMsg>(&frame->body)) {
      // Only reachable through an authenticated frame when encryption is on.
      wire::Frame f;
      f.sender = config.name;
      f.body = keys->Apply(*op);
      data_tcp->Send(id, codec->EncodeFrame(f));
      data_tcp->Close(id);
      return;
    }
    Feed(node::FrameIn{id, std::move(*frame)});
  }

  void OnOutgoingFrame(node::ConnId id, const Bytes& payload) {
    auto frame = inbound->OnFrame(payload.data(), payload.size());
    if (!frame) return net->Abort(id);
    Feed(node::FrameIn{id, std::move(*frame)});
  }

  void OnTrainerWake() {
    if (!trainer) return;
    if (const auto n = static_cast<uint32_t>(trainer->num_params());
        n != codec->expected_params()) {
      // An external trainer's first attach fixes the model size: other sizes are rejected.
      codec->set_expected_params(n);
      node->SetExpectedParams(n);
    }
    const TrainerState st = trainer->state();
    node::TrainerProgress p{st.step, st.training, st.waiting, {}, 0, st.absent};
    p.step_ms = static_cast<float>(st.step_compute_s * 1000.0);
    if (st.accuracy && st.loss && std::isfinite(*st.loss) && *st.loss >= 0) {
      p.eval = {st.eval_step, static_cast<float>(std::clamp(*st.accuracy, 0.0, 1.0)),
                static_cast<float>(*st.loss)};
    }
    Feed(p);
    if (auto snap = trainer->TakeSnapshot()) {
      Feed(node::SnapshotIn{snap->step, std::move(snap->params), snap->final, snap->span});
    }
  }

  // ---- observability: --http, `monitor` ------------------------------------------------------

  // Every 500 ms: a heartbeat to monitors every 2 s; with --http, new points for the curves,
  // then the bodies /metrics and /api/state serve.
  void Publish() {
    if (++publishes % 4 == 0) rpc->Heartbeat();
    if (publishes % 120 == 0) {  // every minute; writes at most every 5 minutes
      if (auto st = stamps->Renew(MonoMs()); !st.ok()) spdlog::warn("{}", st.message());
    }
    if (!http) return;  // the curves and bodies are only for the HTTP endpoint
    const json st = Status();
    const std::vector<membership::Member> members = node->Members();
    curves.Sample(metrics.Elapsed(), 0.5, members, st.value("bytes_sent", uint64_t{0}),
                  st.value("bytes_received", uint64_t{0}));
    const json state =
        curves.State(st, MembersJson(members, config.name)["members"], config.select, plan_view);
    PromInputs in;
    in.status = st;
    in.members = members;
    if (trainer) in.wait = trainer->state().wait;
    if (loop_monitor) in.loop_lag = loop_monitor->Stats().histogram;
    in.http_responses = http->Responses();
    in.version = MESHTRAIN_VERSION_STRING;
    http->Publish(RenderPrometheus(in), JsonText(state));
  }

  void MonitorsChanged() override {
    const auto wanted = rpc->MonitorLevel();
    tap->SetWanted(wanted);
    spdlog::default_logger()->set_level(std::min(console_level, wanted));
  }

  void OnLogWake() {
    for (const TappedLine& line : tap->Take()) rpc->StreamLog(line.level, line.text);
  }

  // ---- RPC backend ---------------------------------------------------------------------------

  json Status() override {
    StatusInputs in(config, *node);
    if (trainer) in.trainer = trainer->state();
    in.now = Now();
    in.bytes_sent = udp->bytes_sent() + data_tcp->bytes_sent();
    in.bytes_received = udp->bytes_received() + data_tcp->bytes_received();
    in.rejects = inbound->rejects();
    in.rpc_rejects = rpc->rejects();
    if (trainer) in.trainer_rejects = trainer->Rejects();
    if (auto* ext = dynamic_cast<ExternalTrainer*>(trainer.get())) {
      in.external = ExternalStatus{ext->attached(), ext->trainer_pid(), config.trainer_socket};
    }
    in.framing_errors = data_tcp->framing_errors();
    in.refused_connections = data_tcp->refused_connections();
    if (prober) {
      in.probe_trains_answered = prober->stats().trains_measured;
      in.probe_trains_contended = prober->stats().trains_contended;
      in.probe_trains_queued = prober->stats().trains_queued;
      in.probe_rejects = prober->stats().rejected;
    }
    in.relay_nested = inbound->nested();
    in.uptime_s = metrics.Elapsed();
    if (loop_monitor) in.loop = loop_monitor->Stats();
    if (streamer) {
      in.streams_active = streamer->active();
      in.chunks_encoded = streamer->chunks_encoded();
      in.chunks_sent = streamer->chunks_sent();
    }
    if (data_tcp) in.read_pauses = data_tcp->gate_pauses();
    if (trainer) FillMixStatus(*trainer, &in);
    return StatusJson(in);
  }
  json Members() override { return MembersJson(node->Members(), config.name, trainer.get()); }
  json Export() override {
    // 2^21 floats: 8 MiB, 11 MiB in base64, under the CLI's 16 MiB reply limit.
    constexpr size_t kMaxExportParams = size_t{1} << 21;
    if (!trainer) return {{"ok", false}, {"error", "this agent does not train (--task none)"}};
    auto model = trainer->Model();
    if (!model.ok()) return {{"ok", false}, {"error", model.status().message()}};
    const learn::ModelFile& m = model.value();
    if (m.params.size() > kMaxExportParams) {
      return {{"ok", false},
              {"error", "model of " + std::to_string(m.params.size()) +
                            " parameters is too large to export over RPC; the agent writes "
                            "it to --data-dir/model.npz at leave"}};
    }
    return {{"ok", true},
            {"spec", m.spec},
            {"input_shape", m.input_shape},
            {"step", m.step},
            {"input_transform", {m.input_shift, m.input_scale}},
            {"params", wire::BytesToBase64(reinterpret_cast<const uint8_t*>(m.params.data()),
                                           m.params.size() * sizeof(float))}};
  }
  void Join(uint64_t tag, const std::vector<std::string>& addrs) override {
    ResolveAndJoin(tag, addrs);
  }
  void ForceLeave(uint64_t tag, const std::string& name) override {
    Feed(node::ForceLeaveCmd{tag, name});
  }
  void Leave() override { Feed(node::LeaveCmd{}); }
  void Keys(uint64_t tag, const RpcRequest& req) override {
    keys->Run(req.key_op, req.key, LivePeers(node->Members(), config.name),
              [this, tag](json r) { rpc->Reply(tag, r); });
  }

  // Start-up, in order: addresses, data directory and keys (PrepareAgent), the wire and
  // transports (StartNetwork), the control endpoints (StartControl), then the trainer and the
  // node core (StartNode). An exit status: 2 for a configuration the agent cannot run with, 1
  // for a failure to start (a port in use), 0 when running.
  int Start() {
    if (auto st = config.ResolveAddresses(); !st.ok()) {
      spdlog::error("{}", st.message());
      return 2;
    }
    if (auto st = PrepareAgent(&config, &metrics, &keyring); !st.ok()) {
      spdlog::error("{}", st.message());
      return 2;
    }
    peer_snapshot = std::make_unique<PeerSnapshotWriter>(config.data_dir);
    for (int (Impl::*step)() : {&Impl::StartNetwork, &Impl::StartControl, &Impl::StartNode}) {
      if (int rc = (this->*step)(); rc != 0) return rc;
    }
    return 0;
  }

  // The codec and stamp clock, UDP and TCP endpoints, link prober and parameter streamer.
  int StartNetwork() {
    codec = std::make_unique<wire::Codec>(config.cluster, keyring);
    // Stamps only ever compared with the same sender's earlier ones (wire/replay_guard.h).
    stamps = std::make_unique<StampClock>(config.data_dir);
    if (auto st = stamps->Start(WallMs(), MonoMs()); !st.ok()) {
      spdlog::error("{}", st.message());
      return 1;
    }
    codec->set_wall_clock([clock = stamps.get()] { return clock->Now(MonoMs()); });
    codec->set_session(std::random_device{}() | (uint64_t{std::random_device{}()} << 32) | 1);
    transport::SetCallbackErrorHook([](const char* where, const char* what, uint64_t n) {
      spdlog::error("exception #{} in a {} handler, dropped (the agent keeps running): {}", n,
                    where, what);
    });
    inbound = std::make_unique<wire::Inbound>(codec.get());
    udp = std::make_unique<transport::UdpEndpoint>(&loop);
    transport::TcpOptions data_opts;
    data_opts.max_frame_bytes = codec->max_frame_bytes();
    data_opts.idle_timeout_ms = 10000;
    data_tcp = std::make_unique<TcpHub>(&loop, data_opts);
    data_tcp->SetRateLimits(config.uplink_limit * 1e6, config.downlink_limit * 1e6);
    net = std::make_unique<NetEndpoint>(
        codec.get(), udp.get(), data_tcp.get(), [this](node::Input in) { Feed(std::move(in)); },
        [this](node::ConnId id, const Bytes& payload) { OnOutgoingFrame(id, payload); });
    prober = std::make_unique<LinkProber>(
        &loop, udp.get(), keyring, config.cluster, [this] { return data_tcp->bytes_received(); },
        [this] { return node ? node->downlink_estimate_mbps() : 0.0; },
        [this](node::ProbeResult r, const std::string& to, int sent) {
          metrics.Write("capacity_probe",
                        {{"to", to}, {"sent", sent}, {"received", r.received}, {"mbps", r.mbps}});
          Feed(std::move(r));
        },
        [this](node::ProbeReceived r, int received, int count) {
          metrics.Write(
              "capacity_probe_in",
              {{"from", r.from}, {"count", count}, {"received", received}, {"mbps", r.mbps}});
          Feed(std::move(r));
        });
    net->set_prober(prober.get());
    streamer = std::make_unique<ParamStreamer>(&loop, codec.get(), data_tcp.get());
    net->set_streamer(streamer.get());
    return 0;
  }

  // The RPC server, key rotation, log tap, the listening sockets, --http and the signals.
  int StartControl() {
    loop_monitor = std::make_unique<LoopMonitor>(&loop);
    rpc = std::make_unique<RpcServer>(&loop, config.rpc_token, this);
    keys = std::make_unique<KeyRotation>(config.name, keyring, codec.get(), data_tcp.get(),
                                         inbound.get());
    keys->set_keyring_file(KeyringPath(config.data_dir));
    timer = std::make_unique<transport::Timer>(&loop);
    log_wake = std::make_unique<transport::Async>(&loop, [this] { OnLogWake(); });
    tap = std::make_shared<LogTap>([this] { log_wake->Send(); });
    {
      auto logger = spdlog::default_logger();
      console_level = logger->level();
      for (auto& sink : logger->sinks()) sink->set_level(console_level);
      logger->sinks().push_back(tap);
    }

    const auto bind = *NetAddr::Parse(config.bind);
    const auto rpc_addr = *NetAddr::Parse(config.rpc);
    if (!rpc_addr.IsLoopback()) {
      spdlog::warn(
          "RPC endpoint {} is not on loopback: anyone who can reach it controls this agent",
          config.rpc);
    }
    for (const ::meshtrain::Status& st :
         {udp->Bind(bind, [this](const uint8_t*d, size_t n,
                                 const NetAddr&from) { OnDatagram(d, n, from); }),
          data_tcp->Listen(
              bind, [this](TcpHub::ConnId id, Bytes&&f) { OnIncomingFrame(id, std::move(f)); },
              [this](TcpHub::ConnId id, int status) {
                if (!net->IsOutgoing(id)) Feed(node::ConnClosed{id, status == 0});
              },
              [this](TcpHub::ConnId id, wire::BigFrame&&f) {
                OnIncomingBigFrame(id, std::move(f));
              }),
          rpc->Listen(rpc_addr)}) {
      if (!st.ok()) {
        spdlog::error("{}", st.message());
        return 1;
      }
    }
    if (!config.http.empty()) {
      http = std::make_unique<HttpServer>();
      if (auto st = http->Start(*NetAddr::Parse(config.http)); !st.ok()) {
        spdlog::error("{}", st.message());
        return 1;
      }
    }
    for (int sig : {SIGINT, SIGTERM}) {
      signals.push_back(std::make_unique<transport::Signal>(&loop, sig, [this, sig] {
        if (node && node->leaving()) {
          spdlog::warn("second signal: exiting without waiting for the leave to spread");
          return Shutdown();
        }
        spdlog::info("received {}, leaving the mesh", sig == SIGINT ? "SIGINT" : "SIGTERM");
        Feed(node::LeaveCmd{});
      }));
    }
    return 0;
  }

  // The trainer (built-in, embedded or external), the node core, the banner and the publish
  // timer; then the node starts.
  int StartNode() {
    const uint64_t seed = config.seed ? *config.seed : learn::SeedFromString(config.name);
    int64_t resumed = -1;
    trainer_wake = std::make_unique<transport::Async>(&loop, [this] { OnTrainerWake(); });
    auto wake = [this] { trainer_wake->Send(); };
    auto made =
        embedded_task ? MakeTrainerFor(config, std::move(embedded_task), &metrics, wake, &resumed)
        : config.external_trainer() ? MakeExternalTrainer(&loop, config, &metrics, wake, &resumed)
                                    : MakeTrainer(config, &metrics, wake, &resumed);
    if (!made.ok()) {
      spdlog::error("{}", made.status().message());
      return 2;
    }
    trainer = std::move(made).value();
    // Backpressure: while the running sum is behind, incoming parameter chunks wait
    // in the kernel (TCP holds their senders back) instead of being dropped.
    if (data_tcp) data_tcp->SetReadGate([this] { return !trainer || !trainer->MixBacklogged(); });
    if (resumed >= 0) metrics.Write("resume", {{"step", resumed}});
    // The protocol RNG is reproducible with --seed; otherwise each run draws its own (gossip
    // targets and probe order should not repeat identically every time a node restarts).
    node::NodeConfig nc =
        config.NodeConfig(config.seed ? seed : seed ^ std::random_device{}(), resumed);
    // The datagram budget must leave room for the envelope, cluster label and seal.
    nc.membership.packet_overhead_bytes =
        std::max(nc.membership.packet_overhead_bytes, codec->DatagramOverhead());
    nc.membership.relay_overhead_bytes = wire::kRelayFrameOverhead;
    if (trainer) nc.expected_params = static_cast<uint32_t>(trainer->num_params());
    // The loop's clock predates the task's loading (seconds on a busy host): timers armed now,
    // the join connection's idle timeout among them, would be past due on the first turn.
    uv_update_time(&loop);
    node = std::make_unique<node::Node>(std::move(nc), Now());
    if (trainer) trainer->SetPeerSteps([this] { return SyncPeers(*node, config, Now()); });
    if (trainer && trainer->num_params() > 0) {
      codec->set_expected_params(static_cast<uint32_t>(trainer->num_params()));
      spdlog::info("task {}: {} parameters", config.task, trainer->num_params());
    }
    std::printf("%s", config.Banner(keyring != nullptr).c_str());
    std::fflush(stdout);
    publish_timer = std::make_unique<transport::Timer>(&loop);
    publish_timer->Start(
        500, [this] { Guarded("publish", [this] { Publish(); }); }, 500);
    if (http) {
      Publish();
      spdlog::info("dashboard at http://{}/, metrics at http://{}/metrics", config.http,
                   config.http);
    }
    feeding = true;
    node->Start(Now());
    Execute(node->TakeOutput());
    feeding = false;
    if (trainer) trainer->Start();
    Drain();
    return 0;
  }

  void Shutdown() {
    if (stopping) return;
    stopping = true;
    if (trainer) {
      trainer->Stop();
      if (auto st = trainer->SaveCheckpoint(); !st.ok()) {
        spdlog::error("final checkpoint failed: {}", st.message());
      } else if (!config.data_dir.empty()) {
        spdlog::info("final checkpoint written at step {}", trainer->state().step);
      }
      if (!config.data_dir.empty()) {
        const std::string path = config.data_dir + "/model.npz";
        if (auto st = trainer->WriteFinalModel(path); !st.ok()) {
          spdlog::error("final model: {}", st.message());
        } else if (!trainer->Model().status().IsInvalidArgument()) {
          spdlog::info("final model written to {} (meshtrain evaluate --model {})", path, path);
        }
      }
    }
    // Start() may have failed part-way: close whatever exists.
    if (tap) tap->Detach();
    if (log_wake) log_wake->Close();
    if (publish_timer) publish_timer->Close();
    if (http) http->Stop();
    if (trainer_wake) trainer_wake->Close();
    if (timer) timer->Close();
    for (auto& s : signals) s->Close();
    if (prober) prober->Close();
    if (loop_monitor) loop_monitor->Close();
    if (udp) udp->Close();
    if (data_tcp) data_tcp->CloseAll();
    if (rpc) rpc->CloseAll();
    uv_stop(&loop);
  }
};

Agent::Agent(AgentConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Agent::Agent(AgentConfig config, std::unique_ptr<learn::Task> task)
    : impl_(std::make_unique<Impl>(std::move(config))) {
  impl_->config.task = task->name();  // the banner, status and checkpoints name it
  impl_->config.trainer = TrainerKind::kBuiltin;
  impl_->embedded_task = std::move(task);
}

Agent::~Agent() = default;

int Agent::Run() {
  Impl& s = *impl_;
  uv_loop_init(&s.loop);
  LoopGuard::MarkLoopThread();  // passes over a whole model here are counted (status loop)
  int rc = s.Start();
  if (rc == 0) {
    uv_run(&s.loop, UV_RUN_DEFAULT);
  } else {
    s.Shutdown();
  }
  // Free everything that holds handles, then check the loop closes cleanly.
  s.trainer.reset();
  s.trainer_wake.reset();
  s.timer.reset();
  s.publish_timer.reset();
  s.log_wake.reset();
  s.http.reset();
  s.signals.clear();
  s.net.reset();
  s.streamer.reset();
  s.loop_monitor.reset();
  s.udp.reset();
  s.keys.reset();
  s.data_tcp.reset();
  s.rpc.reset();
  if (int close_rc = transport::DrainAndCloseLoop(&s.loop); close_rc != 0) {
    spdlog::warn("event loop closed with handles still open ({})", uv_strerror(close_rc));
  }
  s.peer_snapshot.reset();
  return rc == 0 ? s.exit_code : rc;
}

}  // namespace meshtrain::daemon
