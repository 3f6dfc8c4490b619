// The external trainer (`meshtrain agent --trainer external`): instead of training a
// built-in task, the agent serves one local trainer process — any framework, e.g. PyTorch through
// python/meshtrain — over a Unix stream socket, and plugs it into the same seams the built-in
// trainer uses (permits, snapshots, mixing; daemon/trainer/trainer.h).
//
// The socket (--trainer-socket) is created with mode 0600 and every connection's SO_PEERCRED uid
// must equal the agent's. Frames follow daemon/trainer/trainer_protocol.h; the parameter vector
// lives in a shared-memory file (/dev/shm, 0600, unlinked as soon as the trainer has mapped it)
// that both sides map, so a step moves no parameters over the socket: the trainer writes its
// parameters there before PUBLISH (the agent copies them into the snapshot it multicasts) and reads
// them after MIX (the agent mixes the received models into that memory in place).
//
// One trainer at a time: another connection is refused while one is attached. A trainer that
// disconnects, breaks the protocol or stays silent for --trainer-timeout (outside barrier waits)
// is detached: the agent reports "not training" so that peers stop waiting for it, and stays in
// the mesh. A trainer that attaches again resumes at the agent's step from the agent's newest
// parameters. Every rejected input is counted by reason (Rejects()) and answered with an ERROR
// frame, and the connection is closed; the agent keeps running.
//
// Thread-safety: loop thread only (notify is called on the loop thread too).
#pragma once

#include <uv.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/trainer/external_checkpoint.h"
#include "daemon/trainer/trainer.h"
#include "daemon/trainer/trainer_protocol.h"
#include "transport/transport.h"

namespace meshtrain::daemon {

struct ExternalTrainerOptions {
  std::string socket_path;
  double timeout_s = 60;
  double target_accuracy = 0;  // an eval report at or above it stops training (0 = none)
  std::string name;            // the agent's name, for the shared-memory file's name
  std::string shm_dir = "/dev/shm";
  // --data-dir: the trainer's parameters are checkpointed there (external_checkpoint.h) every
  // `checkpoint_every` steps; empty = none.
  std::string checkpoint_dir;
  int checkpoint_every = 500;
  // --trainer-grace: a trainer gone this long before it finished makes the node absent from
  // the end-of-training consensus (TrainerState::absent) until one attaches again.
  double grace_s = 60;
  bool robust = false;  // --robust (ChunkMixer::SetRobust)
};

class ExternalTrainer : public Trainer {
 public:
  ExternalTrainer(uv_loop_t* loop, ExternalTrainerOptions options, MetricsLog* metrics,
                  std::function<void()> notify);
  ~ExternalTrainer() override;
  ExternalTrainer(const ExternalTrainer&) = delete;
  ExternalTrainer& operator=(const ExternalTrainer&) = delete;

  // Creates the socket (replacing a stale one no agent listens on) and listens.
  Status Listen();
  // With a checkpoint directory: the newest checkpoint there becomes the model a trainer
  // attaching resumes from. *resumed_step: its step, or -1 (none).
  Status Restore(int64_t* resumed_step);

  void Start() override {}
  // Detaches the trainer (it sees the connection close), closes the socket and removes it.
  void Stop() override;
  void Permit(uint64_t step, double mesh_step_s = 0) override;
  void Deliver(const std::string& from, std::vector<float> params, uint64_t step,
               bool finished = false, std::optional<uint64_t> final_step = std::nullopt) override;
  void DeliverChunk(node::MixChunk chunk) override;
  uint64_t MixChunksDropped() const override { return mixer_->dropped(); }
  bool MixBacklogged() const override { return mixer_->backlogged(); }
  double ModelsMixed() const override { return mixer_->models_mixed(); }
  learn::RobustReport Robust() const override { return mixer_->Robust(); }
  void Adopt(std::vector<float> params, uint64_t step) override;
  void AdoptConsensus(std::shared_ptr<const std::vector<float>> params, size_t participants,
                      bool settled) override;
  std::optional<Snapshot> TakeSnapshot() override;
  void SetSyncEvery(int) override {}  // the trainer process decides when it publishes
  TrainerState state() const override { return state_; }
  size_t num_params() const override { return num_params_; }
  learn::Status SaveCheckpoint() override { return learn::Status::OK(); }
  learn::Result<learn::ModelFile> Model() const override;
  learn::Status WriteFinalModel(const std::string&) override { return learn::Status::OK(); }
  std::map<std::string, uint64_t> Rejects() const override { return rejects_; }

  bool attached() const;
  int64_t trainer_pid() const;

  // The live training peers and the step each reported, whose models a sync may wait for (the
  // agent's membership view). The agent returns none when peers' models need not come to this
  // node (--select other than all, or this node is behind NAT and pulls).
  void SetPeerSteps(std::function<PeerSteps()> fn) override { peer_steps_ = std::move(fn); }
  // How long a sync waits for the whole models of the peers that reached its step.
  static constexpr double kSyncWaitS = 30;
  // A peer whose status changed this long before our last mix, or since, counts as come back in
  // this window (TryGatedMix).
  static constexpr double kReturnSlackS = 1;

 private:
  struct Conn;
  struct Shm {
    std::string path;  // empty once unlinked
    // The mapping; work on the thread pool holds a reference, so a trainer that detaches while a
    // copy or a mix runs does not unmap the memory under it.
    std::shared_ptr<void> map;
    float* data = nullptr;
    size_t floats = 0;
  };
  using Clock = std::chrono::steady_clock;

  void OnConnection(int status);
  void OnRead(Conn* c, ssize_t n, const uv_buf_t* buf);
  // Parses and handles the complete frames in c->buf; false when the connection was closed.
  bool HandleFrames(Conn* c);
  void Handle(Conn* c, uint32_t seq, tp::Request req);
  void HandleAttach(Conn* c, uint32_t seq, const tp::Attach& a);
  void FinishAttach(Conn* c, uint32_t seq, uint64_t step, bool have_params);
  void HandleWait(Conn* c, uint32_t seq, const tp::WaitPermit& w);
  void HandlePublish(Conn* c, uint32_t seq, const tp::Publish& p);
  // The PUBLISH's copy into `buf` (a pooled buffer, or null: a new one if one may be made).
  // Under the exact exchange (Gated) a PUBLISH that finds a large layout's one snapshot buffer
  // still being sent waits for it (the trainer waits for the reply: backpressure), retried every
  // kParkRetryMs up to kSyncWaitS from `since`: a sync's model must go out, or every peer's MIX
  // of that step waits for it. Otherwise, or past the deadline, it publishes nothing new.
  void PublishInto(Conn* c, uint32_t seq, const tp::Publish& p,
                   std::shared_ptr<std::vector<float>> buf, Clock::time_point since);
  void RetryParkedPublish();
  // unsent: the last PUBLISH made no snapshot (its buffer was being sent); if the buffer is free
  // now, the mixed model becomes the snapshot of that step, copied after the mix.
  void HandleMix(Conn* c, uint32_t seq, bool unsent);
  // The exact exchange (docs/design.md "Mixing"), for a trainer that syncs every H > 1 steps
  // (CONFIGURE): a MIX waits until every live training peer that reached the published step has
  // delivered a whole model at that step or later, and no transfer that started is still half
  // in, then mixes (Mix). Re-checked as chunks arrive and every tick; kSyncWaitS at most.
  void TryGatedMix();
  void Mix(Conn* c, uint32_t seq, bool unsent, size_t waited, bool timed_out);
  struct MixWork;  // what a MIX decided, carried out on the thread pool
  // A sync's tally (status `syncs`, the `sync` metrics line).
  void RecordSync(size_t waited, size_t whole, size_t part, double models, bool timed_out);
  bool Gated() const { return sync_.sync_every > 1; }
  // The WAIT_PERMIT reply's flags: kWaitAdoptWaiting when a join's model waits for the next MIX
  // (a restarted trainer takes it before it trains: python/meshtrain/torch.py).
  uint32_t WaitFlags() const { return adopt_ ? tp::kWaitAdoptWaiting : 0; }
  // Folds a chunk into the window now (weighted by its age at the window's step), or holds it
  // for a later window: one that belongs after the mix in progress or the next one.
  void PushChunk(node::MixChunk chunk);
  void ReleaseHeld();
  void ClearWindow();
  void HandleConfigure(Conn* c, uint32_t seq, const tp::Configure& cfg);
  void HandleEval(Conn* c, uint32_t seq, const tp::EvalReport& e);
  // FINISH: the shared memory becomes the final model (copied off the loop, then offered);
  // the reply waits for the consensus model (ReplyFinish).
  void HandleFinish(Conn* c, uint32_t seq);
  // A trainer that mixes every step (no sync_every > 1) and FINISHes with the parameters its
  // last step's MIX left (compared by a sample of coordinates): its final model is the snapshot
  // it published at that step (docs/design.md "One model at the end").
  bool PublishedIsFinal() const;
  // Copies the shared memory (the trainer's final model) off the loop and offers it to the
  // peers, then runs `reply`; the trainer waits meanwhile.
  void OfferFinal(Conn* c, std::function<void()> reply);
  // Copies the consensus model into the shared memory (off the loop) and answers FINISH.
  void ReplyFinish();
  void Reply(Conn* c, uint16_t type, uint32_t seq, std::vector<uint8_t> body);
  // Counts the reject under `reason`, answers ERROR with `why` and closes the connection.
  void Reject(Conn* c, const char* reason, uint32_t seq, const std::string& why);
  // Closes the connection; when it was the trainer, the agent stops counting as training.
  void Close(Conn* c, const std::string& why);
  void OnTick();
  Status MapShm(size_t floats);
  void UnlinkShm();
  void UnmapShm(bool off_loop = false);

  uv_loop_t* loop_;
  const ExternalTrainerOptions options_;
  MetricsLog* metrics_;
  std::function<void()> notify_;
  uv_pipe_t* server_ = nullptr;
  bool listening_ = false;
  std::unique_ptr<transport::Timer> tick_;
  struct ParkedPublish {
    Conn* c;
    uint64_t gen;  // conn_gen_ then: a detach drops it
    uint32_t seq;
    tp::Publish p;
    Clock::time_point since;
  };
  std::optional<ParkedPublish> parked_;
  std::unique_ptr<transport::Timer> park_timer_;
  static constexpr int64_t kParkRetryMs = 2;
  Conn* conn_ = nullptr;  // the trainer's connection (accepted, maybe not attached yet)
  Shm shm_;
  uint64_t shm_counter_ = 0;

  size_t num_params_ = 0;  // fixed by the first attach
  uint64_t permitted_ = 0;
  struct PendingWait {
    uint32_t seq = 0;
    uint64_t step = 0;
    Clock::time_point since;
  };
  std::optional<PendingWait> wait_;
  std::optional<uint32_t> finish_seq_;  // a FINISH waiting for the consensus model
  std::shared_ptr<const std::vector<float>> consensus_;
  bool consensus_settled_ = false;  // finish() returns consensus_ only once it is settled
  struct Incoming {
    std::vector<float> params;
    uint64_t step = 0;
    bool finished = false;               // the sender stopped training: full weight
    std::optional<uint64_t> final_step;  // the sender's final model, at this step of its own
  };
  std::map<std::string, Incoming> inbox_;
  FinalModels finals_;  // finished peers' models taken over (mesh-wide stop)
  std::optional<Incoming> adopt_;
  std::optional<Snapshot> outbox_;
  // The buffer the next published snapshot is copied into: one nobody but this trainer holds.
  // Small models keep up to three (a fresh allocation per step costs more than the copy); a
  // model above kOneSnapshotFloats keeps one (memory is the shared memory, one
  // snapshot in flight and the running sum), so while the node still sends it a PUBLISH makes
  // no new snapshot (nullptr) and the next round takes the first PUBLISH after this one.
  // SnapshotBuffer: a pooled buffer nobody else holds, or nullptr; CanAllocateSnapshot: whether
  // a new one may be made (on the thread pool: zeroing a large model's pages costs what a copy
  // does) and then kept (KeepSnapshotBuffer).
  std::shared_ptr<std::vector<float>> SnapshotBuffer();
  bool CanAllocateSnapshot() const;
  void KeepSnapshotBuffer(const std::shared_ptr<std::vector<float>>& b);
  void FinishPublish(Conn* c, uint32_t seq, uint64_t step, std::shared_ptr<std::vector<float>> snap,
                     wire::StreamSpan span = {});
  std::vector<std::shared_ptr<std::vector<float>>> pool_;
  // At attach, a large model's snapshot buffer and the mixer's running sum are made and their
  // pages touched on the thread pool while the trainer starts (PrepareBuffers), so that the first
  // round does not pay ~2 GB of page faults per agent (1 GB model) inside the transfer. Meanwhile
  // no other snapshot buffer is made (a PUBLISH sends nothing new until it is there).
  void PrepareBuffers();
  bool preparing_ = false;
  // A PUBLISH that found the snapshot buffer still being sent published nothing new; if the
  // buffer is free by the MIX of that step, the mixed model is copied into it after the mix and
  // becomes that step's snapshot (HandleMix), so a large model's next round starts then rather
  // than at the next PUBLISH.
  bool unsent_publish_ = false;
  // Work proportional to the model (the PUBLISH copy, the MIX) runs on libuv's thread pool
  // (the loop never blocks); the trainer waits for its reply meanwhile, and a request
  // that arrives before it is refused (one request at a time).
  bool job_ = false;
  uint64_t conn_gen_ = 0;                                 // bumped when the trainer detaches
  std::shared_ptr<int> life_ = std::make_shared<int>(0);  // expired: the trainer is gone
  std::shared_ptr<ChunkMixer> mixer_ = std::make_shared<ChunkMixer>();
  std::shared_ptr<const std::vector<float>> latest_;  // newest published (or adopted) model
 public:
  static constexpr size_t kOneSnapshotFloats = size_t{4} << 20;  // 16 MB

 private:
  uint64_t latest_step_ = 0;
  // latest_ is the snapshot the last PUBLISH made (the trainer's model as it trained), and the
  // shared memory's fingerprint right after the MIX that followed it (PublishedIsFinal).
  bool published_local_ = false;
  std::optional<uint64_t> mixed_print_;
  // The exchange window: what was folded since the last MIX, by sender (a transfer is whole
  // once its last chunk came), and the step it will be mixed at.
  struct InTransfer {
    uint64_t round = 0;
    uint64_t step = 0;
    bool whole = false;    // its last chunk came, none dropped
    bool lost = false;     // a chunk was dropped: it will never be whole
    bool partial = false;  // a transfer of this window was replaced half in (mixed in part)
  };
  std::map<std::string, InTransfer> window_;
  std::map<std::string, uint64_t> whole_step_;  // sender -> step of its newest whole model
  uint64_t window_step_ = 0;
  uint64_t every_ = 1;   // steps between syncs (CONFIGURE: sync_every / fragments)
  bool mixing_ = false;  // a MIX is on the thread pool: new chunks wait for the next window
  std::deque<node::MixChunk> held_;
  size_t held_bytes_ = 0;
  std::map<std::string, uint64_t> held_whole_;  // sender -> step of a whole model held
  static constexpr size_t kMaxHeldBytes = size_t{256} << 20;
  struct GatedMix {
    Conn* c = nullptr;
    uint32_t seq = 0;
    bool unsent = false;
    Clock::time_point since;
  };
  std::optional<GatedMix> gate_;
  std::function<PeerSteps()> peer_steps_;
  // The peers' steps when the trainer attached (daemon/trainer/sync_wait.h SyncWaitInput).
  std::map<std::string, uint64_t> at_attach_;
  tp::Configure sync_;
  bool target_reached_ = false;
  TrainerState state_;
  Clock::time_point last_publish_, last_permit_, train_start_;
  std::optional<Clock::time_point> last_mix_;  // when the last MIX was answered
  std::map<std::string, uint64_t> rejects_;
  std::unique_ptr<ExternalCheckpoints> checkpoints_;
  // The trainer detached before it finished, at this time (the grace runs from it).
  std::optional<Clock::time_point> gone_since_;
};

// The peers an external trainer's sync waits for (ExternalTrainer::SetPeerSteps): the live
// training peers of the barrier's view (its steps come from progress queries too, fresher than
// gossip), or of membership without a barrier. None when their models need not come to this node:
// every peer pushes to every other with --select all only, and a node behind NAT pulls instead.
// `now` is the node's clock (for each peer's since_change_s).
ExternalTrainer::PeerSteps SyncPeers(const node::Node& node, const AgentConfig& config,
                                     int64_t now);

// The external trainer for `--trainer external`, listening on config.trainer_socket, restored
// from --data-dir's checkpoint (*resumed_step: its step, or -1).
learn::Result<std::unique_ptr<Trainer>> MakeExternalTrainer(uv_loop_t* loop,
                                                            const AgentConfig& config,
                                                            MetricsLog* metrics,
                                                            std::function<void()> notify,
                                                            int64_t* resumed_step);

}  // namespace meshtrain::daemon
