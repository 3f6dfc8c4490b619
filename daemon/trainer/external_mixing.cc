// The external trainer's model side (see external_trainer.h): the snapshots a PUBLISH copies out
// of the shared memory for the node to send, the MIX that folds received models into it, EVAL
// reports and the mesh-wide stop, FINISH and the consensus model, and the node's deliveries.
// The socket protocol itself (connections, framing, attach, barrier waits) is in
// external_trainer.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "base/huge_pages.h"
#include "daemon/offload.h"
#include "daemon/ops/metrics.h"
#include "daemon/trainer/external_trainer.h"
#include "daemon/trainer/external_trainer_impl.h"
#include "daemon/trainer/sync_wait.h"
#include "learn/mixing.h"

namespace meshtrain::daemon {

using external_impl::Seconds;

namespace {

// A snapshot buffer of n floats, with huge pages advised before its pages are first touched.
std::shared_ptr<std::vector<float>> NewSnapshotBuffer(size_t n) {
  auto b = std::make_shared<std::vector<float>>();
  b->reserve(n);
  AdviseHugePages(b->data(), n * sizeof(float));
  b->resize(n);
  return b;
}

// A fingerprint of the parameters that costs next to nothing: kSamples coordinates spread over
// the model, hashed bit for bit (FNV-1a). Two models that differ after a training step (which
// moves every coordinate) differ here too.
uint64_t SampledPrint(const float* x, size_t n) {
  constexpr size_t kSamples = 4096;
  const size_t stride = std::max<size_t>(1, n / kSamples);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i += stride) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

// The bytes a chunk holds while it waits (its values, as they came).
size_t ChunkBytes(const node::MixChunk& c) {
  const size_t scales = c.held ? c.held.ns : c.scales.size();
  return c.int8() ? c.count() + scales * sizeof(float) : c.count() * sizeof(float);
}

}  // namespace

// ---- publish and snapshots ----------------------------------------------------------------------

void ExternalTrainer::HandlePublish(Conn* c, uint32_t seq, const tp::Publish& p) {
  if (p.step < state_.step) {
    return Reject(c, "trainer_message", seq,
                  "publish(" + std::to_string(p.step) + ") goes back from step " +
                      std::to_string(state_.step));
  }
  if (p.end > num_params_) {
    return Reject(c, "trainer_message", seq,
                  "publish: fragment end " + std::to_string(p.end) + " is beyond the model's " +
                      std::to_string(num_params_) + " parameters");
  }
  PublishInto(c, seq, p, SnapshotBuffer(), Clock::now());
}

void ExternalTrainer::RetryParkedPublish() {
  if (!parked_) return;
  const ParkedPublish pp = *parked_;
  parked_.reset();
  if (pp.gen != conn_gen_) return;  // the trainer detached meanwhile
  job_ = false;
  PublishInto(pp.c, pp.seq, pp.p, SnapshotBuffer(), pp.since);
  if (!job_ && pp.gen == conn_gen_) HandleFrames(pp.c);  // answered here: the next request
}

void ExternalTrainer::PublishInto(Conn* c, uint32_t seq, const tp::Publish& p,
                                  std::shared_ptr<std::vector<float>> buf,
                                  Clock::time_point since) {
  const wire::StreamSpan span{static_cast<uint32_t>(p.begin), static_cast<uint32_t>(p.end)};
  const double waited = Seconds(Clock::now() - since);
  const bool no_buffer = !buf && !CanAllocateSnapshot();
  if (no_buffer && Gated() && waited < kSyncWaitS) {
    job_ = true;  // the trainer waits for the reply; nothing else is taken from it meanwhile
    parked_ = ParkedPublish{c, conn_gen_, seq, p, since};
    if (!park_timer_) park_timer_ = std::make_unique<transport::Timer>(loop_);
    park_timer_->Start(kParkRetryMs, [this] { RetryParkedPublish(); });
    return;
  }
  state_.syncs.publish_wait_s += waited;
  if (no_buffer) return FinishPublish(c, seq, p.step, nullptr, span);
  // A copy: the trainer overwrites the shared memory with its next step while this one is sent.
  auto snap = std::make_shared<std::shared_ptr<std::vector<float>>>(std::move(buf));
  // The copy and its finite check (and a new buffer's allocation: writing a large model's
  // pages is as costly as the copy) run on the thread pool; the trainer waits for the reply.
  job_ = true;
  auto ok = std::make_shared<bool>(false);
  OffloadBulk(
      loop_,
      [map = shm_.map, data = shm_.data, snap, n = num_params_, ok] {
        if (!*snap) *snap = NewSnapshotBuffer(n);
        *ok = learn::CopyParamsFinite(data, (*snap)->data(), n);
      },
      [this, life = std::weak_ptr<int>(life_), gen = conn_gen_, c, seq, step = p.step, snap, ok,
       span] {
        if (life.expired() || gen != conn_gen_) return;  // gone, or the trainer detached
        KeepSnapshotBuffer(*snap);
        job_ = false;
        if (!*ok)
          return Reject(c, "trainer_message", seq, "publish: the parameters are not all finite");
        FinishPublish(c, seq, step, *snap, span);
        HandleFrames(c);
      });
}

void ExternalTrainer::FinishPublish(Conn* c, uint32_t seq, uint64_t step,
                                    std::shared_ptr<std::vector<float>> snap,
                                    wire::StreamSpan span) {
  const auto now = Clock::now();
  const double interval = Seconds(now - last_publish_);
  const double compute = Seconds(now - std::max(last_publish_, last_permit_));
  const uint64_t steps = std::max<uint64_t>(1, step - state_.step);
  last_publish_ = now;
  state_.step_s = state_.step_s == 0 ? interval / static_cast<double>(steps)
                                     : 0.9 * state_.step_s + 0.1 * interval / steps;
  state_.compute_s += compute;
  const double per_step = compute / static_cast<double>(steps);
  state_.step_compute_s =
      state_.step_compute_s == 0 ? per_step : 0.8 * state_.step_compute_s + 0.2 * per_step;
  state_.train_s = Seconds(now - train_start_);
  state_.step = step;
  state_.waiting = false;
  unsent_publish_ = !snap && num_params_ > kOneSnapshotFloats;
  if (unsent_publish_) ++state_.syncs.unsent;
  if (unsent_publish_ && (state_.syncs.unsent & (state_.syncs.unsent - 1)) == 0) {
    // 1st, 2nd, 4th, ...: a round that outlasts the sync interval (a slow receiver)
    spdlog::warn(
        "publish at step {}: the snapshot before is still being sent, so this one goes out only "
        "if that ends by the mix ({} such publishes)",
        step, state_.syncs.unsent);
  }
  published_local_ = snap != nullptr;  // latest_ is about to be this step's own model
  mixed_print_.reset();
  if (snap) {
    latest_ = snap;
    mixer_->SetReference(snap);
    latest_step_ = step;
    if (checkpoints_ && checkpoints_->Due(step)) checkpoints_->Save(step, snap, "published");
    outbox_ = Snapshot{step, std::move(snap), false, span};
  }
  if (step != window_step_ && !mixing_) {
    window_step_ = step;  // the window is mixed at this step (the MIX that follows)
    ReleaseHeld();
  }
  Reply(c, tp::kPublish | tp::kReplyBit, seq, tp::Writer().U64(step).Take());
  notify_();
}

std::shared_ptr<std::vector<float>> ExternalTrainer::SnapshotBuffer() {
  for (auto& b : pool_) {
    // Held by the pool, by latest_ and the mixer's reference when it is this buffer: nobody
    // else (a reference rewritten by the next copy: docs/design.md "Robust mixing").
    const long holders =
        1 + (latest_.get() == b.get() ? 1 : 0) + (mixer_->IsReference(b.get()) ? 1 : 0);
    if (b->size() == num_params_ && b.use_count() == holders) return b;
  }
  return nullptr;
}

void ExternalTrainer::PrepareBuffers() {
  if (num_params_ <= kOneSnapshotFloats || preparing_ || !pool_.empty()) return;
  preparing_ = true;
  auto snap = std::make_shared<std::shared_ptr<std::vector<float>>>();
  OffloadBulk(
      loop_,
      [snap, n = num_params_, mixer = mixer_] {
        *snap = NewSnapshotBuffer(n);  // zero-filled: every page touched
        mixer->Reserve(n);
      },
      [this, life = std::weak_ptr<int>(life_), snap] {
        if (life.expired()) return;
        preparing_ = false;
        if (*snap && (*snap)->size() == num_params_) KeepSnapshotBuffer(*snap);
      });
}

bool ExternalTrainer::CanAllocateSnapshot() const {
  return num_params_ <= kOneSnapshotFloats || (pool_.empty() && !preparing_);
}

void ExternalTrainer::KeepSnapshotBuffer(const std::shared_ptr<std::vector<float>>& b) {
  constexpr size_t kPool = 3;
  if (!b || std::find(pool_.begin(), pool_.end(), b) != pool_.end()) return;
  if (pool_.size() >= kPool) pool_.erase(pool_.begin());
  pool_.push_back(b);
}

void ExternalTrainer::HandleMix(Conn* c, uint32_t seq, bool unsent) {
  if (!Gated() || adopt_) return Mix(c, seq, unsent, 0, false);
  // The trainer waits for the reply; nothing else is taken from it meanwhile (job_).
  job_ = true;
  gate_ = GatedMix{c, seq, unsent, Clock::now()};
  TryGatedMix();
}

void ExternalTrainer::TryGatedMix() {
  if (!gate_) return;
  const uint64_t s = state_.step;
  SyncWaitInput in;
  in.step = s;
  in.returned_window_s = last_mix_ ? Seconds(Clock::now() - *last_mix_) + kReturnSlackS : -1;
  if (peer_steps_) in.peers = peer_steps_();
  in.at_attach = at_attach_;
  in.whole_step = whole_step_;
  in.held_whole = held_whole_;
  for (const auto& [from, t] : window_) in.window[from] = {t.whole, t.lost};
  const SyncWait w = DecideSyncWait(in);
  const size_t waited = w.waited;
  const std::string& missing = w.missing;
  const bool ready = missing.empty();
  const double waiting = Seconds(Clock::now() - gate_->since);
  const bool timed_out = !ready && waiting >= kSyncWaitS;
  if (!ready && !timed_out) return;
  const GatedMix g = *gate_;
  gate_.reset();
  state_.syncs.wait_s += waiting;
  if (timed_out) {
    spdlog::warn(
        "sync at step {}: not every model it waited for came in {} s, mixing what came;"
        " missing:{}",
        s, kSyncWaitS, missing);
  }
  Mix(g.c, g.seq, g.unsent, waited, timed_out);
}

struct ExternalTrainer::MixWork {
  std::optional<Incoming> take;   // a model that replaces the trainer's
  std::vector<Incoming> whole;    // whole models to average in (final models, top-k)
  std::vector<std::string> from;  // the sender of each
  std::vector<double> weights;
  size_t mixed = 0;
  std::shared_ptr<std::vector<float>> snap;  // a late snapshot of the mixed model, or null
  bool snap_ok = false;
  double models = 0;        // peer models folded in, in model-sized units
  bool want_print = false;  // the mix follows a PUBLISH of a per-step trainer (PublishedIsFinal)
  uint64_t print = 0;       // then SampledPrint of the mixed model
};

void ExternalTrainer::Mix(Conn* c, uint32_t seq, bool unsent, size_t waited, bool timed_out) {
  // Decided here, carried out on the thread pool (the trainer waits for the reply meanwhile).
  auto work = std::make_shared<MixWork>();
  uint32_t flags = 0;
  if (adopt_) {
    // Join with state: the peer's model and step replace the trainer's.
    work->take = std::move(adopt_);
    state_.step = work->take->step;
    adopt_.reset();
    inbox_.clear();
    flags |= tp::kMixAdopted;
  } else if (Incoming* fin = options_.target_accuracy > 0 ? finals_.Take(inbox_) : nullptr) {
    // Mesh-wide stop: a finished peer's final model (it met the target) replaces the trainer's
    // (once per peer and step: FinalModels); the trainer evaluates it now. The step stays ours.
    work->take = std::move(*fin);
    work->mixed = 1;
    inbox_.clear();
    flags |= tp::kMixAdopted | tp::kMixFinished;
  } else {
    for (auto& [from, in] : inbox_) {
      work->weights.push_back(learn::MixWeight(state_.step, in.step));
      work->whole.push_back(std::move(in));
      work->from.push_back(from);
    }
    inbox_.clear();
  }
  // What this window holds, by sender: whole models, and any mixed only in part.
  size_t whole = work->whole.size(), part = 0;
  for (const auto& [from, t] : window_) (t.whole && !t.lost && !t.partial ? whole : part)++;
  work->want_print = published_local_ && !Gated();
  if (unsent && !work->take && !preparing_) work->snap = SnapshotBuffer();
  job_ = true;
  mixing_ = true;  // chunks that come meanwhile belong to the next window
  OffloadBulk(
      loop_,
      [map = shm_.map, data = shm_.data, n = num_params_, mixer = mixer_, work] {
        if (work->take) {
          std::memcpy(data, work->take->params.data(), n * sizeof(float));
          mixer->Clear();
          return;
        }
        if (!work->whole.empty()) {
          // Robust mixing judges each whole model against the trainer's (docs/design.md
          // "Robust mixing"): refused ones are left out, clipped ones clipped in place.
          std::vector<const float*> others;
          std::vector<double> weights;
          for (size_t j = 0; j < work->whole.size(); ++j) {
            float* p = work->whole[j].params.data();
            if (!mixer->JudgeWhole(work->from[j], data, p, n)) continue;
            others.push_back(p);
            weights.push_back(work->weights[j]);
          }
          learn::MixWeighted(data, n, others, weights);
        }
        mixer->Drain();  // every chunk handed over before the mix is in the sum
        const double before = mixer->models_mixed();
        work->mixed = work->whole.size() + mixer->Apply(data, n);
        work->models = static_cast<double>(work->whole.size()) + mixer->models_mixed() - before;
        if (work->snap) work->snap_ok = learn::CopyParamsFinite(data, work->snap->data(), n);
        if (work->want_print) work->print = SampledPrint(data, n);
      },
      [this, life = std::weak_ptr<int>(life_), gen = conn_gen_, c, seq, flags, work, waited,
       timed_out, whole, part] {
        if (life.expired()) return;
        mixing_ = false;
        last_mix_ = Clock::now();
        ClearWindow();
        window_step_ = state_.step + every_;
        ReleaseHeld();
        if (gen != conn_gen_) return;  // the trainer detached
        job_ = false;
        // The model published at this step stays the node's own (PublishedIsFinal) unless the
        // mix replaced the parameters or its copy became the snapshot.
        published_local_ = work->want_print && !work->take && !work->snap_ok;
        if (published_local_) {
          mixed_print_ = work->print;
        } else {
          mixed_print_.reset();
        }
        if (work->snap_ok) {
          latest_ = work->snap;
          mixer_->SetReference(work->snap);
          latest_step_ = state_.step;
          outbox_ = Snapshot{state_.step, work->snap};
          notify_();
        }
        const auto mixed = static_cast<uint32_t>(work->mixed);
        state_.mixes += mixed;
        state_.syncs.count++;
        if (!work->take) RecordSync(waited, whole, part, work->models, timed_out);
        Reply(c, tp::kMix | tp::kReplyBit, seq,
              tp::Writer().U32(mixed).U32(flags).U64(state_.step).Take());
        if (flags & tp::kMixAdopted) notify_();
        HandleFrames(c);
      });
}

void ExternalTrainer::RecordSync(size_t waited, size_t whole, size_t part, double models,
                                 bool timed_out) {
  SyncTally& t = state_.syncs;
  t.last_waited = waited;
  t.last_mixed = whole;
  t.last_models = models;
  if (whole < waited) t.short_of++;
  if (part > 0) t.partial++;
  if (timed_out) t.timeouts++;
  if (state_.outer != learn::OuterStep::Kind::kAvg) state_.outer_steps++;
  if (!Gated()) return;  // a line per sync of H steps, not per step
  metrics_->Write("sync", {{"step", state_.step},
                           {"waited", waited},
                           {"mixed", whole},
                           {"partial", part},
                           {"models", models},
                           {"timed_out", timed_out}});
}

void ExternalTrainer::HandleConfigure(Conn* c, uint32_t seq, const tp::Configure& cfg) {
  sync_ = cfg;
  every_ = std::max<uint64_t>(1, cfg.sync_every / cfg.fragments);
  state_.sync_every = static_cast<int>(cfg.sync_every);
  state_.fragments = static_cast<int>(cfg.fragments);
  state_.outer = static_cast<learn::OuterStep::Kind>(cfg.outer);
  state_.outer_lr = cfg.outer_lr;
  state_.outer_momentum = cfg.outer_momentum;
  state_.drift = tp::kDriftNames[cfg.drift];
  state_.configured = true;
  window_step_ = state_.step + every_;
  spdlog::info("the trainer syncs every {} steps (outer {}, fragments {}, drift correction {})",
               cfg.sync_every, learn::OuterStep::Name(state_.outer), cfg.fragments, state_.drift);
  Reply(c, tp::kConfigure | tp::kReplyBit, seq, {});
  notify_();
}

void ExternalTrainer::HandleEval(Conn* c, uint32_t seq, const tp::EvalReport& e) {
  if (e.step > state_.step) {
    return Reject(c, "trainer_message", seq,
                  "eval at step " + std::to_string(e.step) + " is ahead of the published step " +
                      std::to_string(state_.step));
  }
  state_.loss = e.loss;
  state_.accuracy = e.accuracy;
  state_.eval_step = e.step;
  metrics_->Write("eval", {{"step", e.step}, {"loss", e.loss}, {"accuracy", e.accuracy}});
  spdlog::info("step {} test loss {:.4f} accuracy {:.4f}", e.step, e.loss, e.accuracy);
  const bool reached = options_.target_accuracy > 0 && e.accuracy >= options_.target_accuracy;
  if (reached && !target_reached_) {
    target_reached_ = true;
    state_.training = false;
    mixer_->SetFrozen(true);  // its center stops moving (ChunkMixer::SetFrozen)
    spdlog::info("target accuracy {:.3f} reached at step {}: training stops, staying in the mesh",
                 options_.target_accuracy, e.step);
    // The final model is the one the trainer just evaluated: the shared memory as it stands
    // (Mesh.step leaves the mixed model there; report(..., model=m) stores m first), not the
    // snapshot published before the last mix.
    return OfferFinal(c, [this, c, seq] {
      Reply(c, tp::kEval | tp::kReplyBit, seq, tp::Writer().U32(1).U32(0).Take());
    });
  }
  Reply(c, tp::kEval | tp::kReplyBit, seq, tp::Writer().U32(reached ? 1 : 0).U32(0).Take());
  notify_();
}

void ExternalTrainer::OfferFinal(Conn* c, std::function<void()> reply) {
  // Copied on the thread pool; the trainer waits.
  auto snap = std::make_shared<std::shared_ptr<std::vector<float>>>(SnapshotBuffer());
  auto ok = std::make_shared<bool>(false);
  job_ = true;
  OffloadBulk(
      loop_,
      [map = shm_.map, data = shm_.data, snap, n = num_params_, ok] {
        if (!*snap) *snap = NewSnapshotBuffer(n);
        *ok = learn::CopyParamsFinite(data, (*snap)->data(), n);
      },
      [this, life = std::weak_ptr<int>(life_), gen = conn_gen_, c, snap, ok,
       reply = std::move(reply)] {
        if (life.expired()) return;
        if (*ok) {
          latest_ = *snap;
          if (checkpoints_) checkpoints_->Save(state_.step, latest_, "final");
        } else {
          spdlog::warn("the final parameters are not finite: offering the last published model");
        }
        if (latest_) outbox_ = Snapshot{latest_step_, latest_, true};
        if (gen != conn_gen_) return notify_();  // the trainer detached meanwhile
        job_ = false;
        reply();
        notify_();
        HandleFrames(c);
      });
}

void ExternalTrainer::HandleFinish(Conn* c, uint32_t seq) {
  const bool offered = target_reached_;  // the final model went out with the report
  state_.training = false;
  mixer_->SetFrozen(true);  // its center stops moving (ChunkMixer::SetFrozen)
  finish_seq_ = seq;
  spdlog::info("the trainer finished at step {}: waiting for the mesh's consensus model",
               state_.step);
  metrics_->Write("trainer", {{"finished", true}, {"step", state_.step}});
  if (offered || !latest_) {
    // Nothing (new) to offer: reply when (or if already) the consensus model is here.
    if (consensus_) ReplyFinish();
    return notify_();
  }
  if (PublishedIsFinal()) {
    // docs/design.md "One model at the end": the trainer's parameters are still the mix of its
    // last step, so the node's final model is the one it published at that step (its own, as
    // trained), and the consensus the plain average of every node's last model.
    spdlog::info("final model: the one published at step {} (the parameters are its mix)",
                 state_.step);
    if (checkpoints_) checkpoints_->Save(state_.step, latest_, "final");
    outbox_ = Snapshot{latest_step_, latest_, true};
    if (consensus_) ReplyFinish();
    return notify_();
  }
  OfferFinal(c, [this] {
    if (consensus_) ReplyFinish();
  });
}

bool ExternalTrainer::PublishedIsFinal() const {
  return !Gated() && published_local_ && mixed_print_ && latest_ && latest_step_ == state_.step &&
         shm_.data != nullptr && *mixed_print_ == SampledPrint(shm_.data, num_params_);
}

void ExternalTrainer::AdoptConsensus(std::shared_ptr<const std::vector<float>> params,
                                     size_t participants, bool settled) {
  if (!params || params->size() != num_params_ || state_.training) return;
  consensus_settled_ = settled;
  if (params == consensus_) {  // the same result, settled now: finish() may return it
    if (settled && finish_seq_ && !job_) ReplyFinish();
    return;
  }
  consensus_ = std::move(params);
  latest_ = consensus_;
  state_.consensus_crc32 = learn::ParamsCrc32(consensus_->data(), consensus_->size());
  state_.consensus_models = participants;
  if (checkpoints_) checkpoints_->Save(state_.step, consensus_, "consensus");
  spdlog::info("consensus model of {} nodes adopted (crc32 {:08x})", participants,
               state_.consensus_crc32);
  metrics_->Write("consensus", {{"models", participants}, {"crc32", state_.consensus_crc32}});
  if (finish_seq_ && !job_) ReplyFinish();
  notify_();
}

void ExternalTrainer::ReplyFinish() {
  if (!finish_seq_ || !consensus_ || !consensus_settled_ || conn_ == nullptr || !shm_.data) return;
  job_ = true;
  OffloadBulk(
      loop_,
      [map = shm_.map, data = shm_.data, model = consensus_] {
        std::memcpy(data, model->data(), model->size() * sizeof(float));
      },
      [this, life = std::weak_ptr<int>(life_), gen = conn_gen_, c = conn_] {
        if (life.expired() || gen != conn_gen_ || !finish_seq_) return;
        job_ = false;
        const uint32_t seq = *finish_seq_;
        finish_seq_.reset();
        Reply(c, tp::kFinish | tp::kReplyBit, seq,
              tp::Writer()
                  .U32(static_cast<uint32_t>(state_.consensus_models))
                  .U32(state_.consensus_crc32)
                  .U64(state_.step)
                  .Take());
        HandleFrames(c);
      });
}

// ---- the node's side ----------------------------------------------------------------------------

void ExternalTrainer::Deliver(const std::string& from, std::vector<float> params, uint64_t step,
                              bool finished, std::optional<uint64_t> final_step) {
  if (num_params_ == 0 || params.size() != num_params_) return;
  inbox_[from] = Incoming{std::move(params), step, finished, final_step};
  if (!finished) {
    uint64_t& s = whole_step_[from];
    s = std::max(s, step);
  }
  TryGatedMix();
}

void ExternalTrainer::DeliverChunk(node::MixChunk chunk) {
  if (num_params_ == 0 || chunk.total != num_params_) return;
  // A chunk of a model past the window's step (a peer a sync ahead) waits for its window, as
  // does every chunk while a MIX runs; beyond kMaxHeldBytes it is folded now.
  const bool later = mixing_ || (Gated() && !chunk.finished && chunk.step > window_step_);
  const size_t bytes = ChunkBytes(chunk);
  if (later && held_bytes_ + bytes <= kMaxHeldBytes) {
    held_bytes_ += bytes;
    if (chunk.last) {
      uint64_t& s = held_whole_[chunk.from];
      s = std::max(s, chunk.step);
    }
    held_.push_back(std::move(chunk));
    TryGatedMix();
    return;
  }
  PushChunk(std::move(chunk));
  TryGatedMix();
}

void ExternalTrainer::PushChunk(node::MixChunk chunk) {
  auto [it, fresh] = window_.try_emplace(chunk.from);
  InTransfer& t = it->second;
  if (fresh || t.round != chunk.round) {
    // A transfer replacing one half in: that one stays mixed in part.
    const bool partial = !fresh && (t.partial || !t.whole);
    t = InTransfer{chunk.round, chunk.step, false, false, partial};
  }
  // Weighted by the model's age when it is mixed: at the window's step (docs/design.md
  // "Mixing"); a finished peer's model counts fully.
  const double w = chunk.finished ? 1.0 : learn::MixWeight(window_step_, chunk.step);
  const bool last = chunk.last;
  const std::string from = chunk.from;
  const uint64_t step = chunk.step;
  if (!mixer_->Push(std::move(chunk), w)) t.lost = true;
  if (last && !t.lost) {
    t.whole = true;
    uint64_t& s = whole_step_[from];
    s = std::max(s, step);
  }
}

void ExternalTrainer::ReleaseHeld() {
  std::deque<node::MixChunk> keep;
  std::deque<node::MixChunk> held = std::move(held_);
  held_.clear();
  held_bytes_ = 0;
  held_whole_.clear();
  for (auto& chunk : held) {
    if (Gated() && !chunk.finished && chunk.step > window_step_) {
      held_bytes_ += ChunkBytes(chunk);
      if (chunk.last) {
        uint64_t& s = held_whole_[chunk.from];
        s = std::max(s, chunk.step);
      }
      keep.push_back(std::move(chunk));
    } else {
      PushChunk(std::move(chunk));
    }
  }
  held_ = std::move(keep);
  TryGatedMix();
}

void ExternalTrainer::ClearWindow() { window_.clear(); }

void ExternalTrainer::Adopt(std::vector<float> params, uint64_t step) {
  // Finite: checked chunk by chunk on arrival (node::AdoptState), not again on the loop.
  if (params.empty() || (num_params_ != 0 && params.size() != num_params_)) return;
  if (attached()) {
    adopt_ = Incoming{std::move(params), step, false, std::nullopt};  // handed over at the next MIX
    return;
  }
  // No trainer yet: the model a trainer attaching later starts from.
  latest_ = std::make_shared<const std::vector<float>>(std::move(params));
  latest_step_ = step;
  state_.step = std::max(state_.step, step);
}

std::optional<Snapshot> ExternalTrainer::TakeSnapshot() {
  std::optional<Snapshot> out = std::move(outbox_);
  outbox_.reset();
  return out;
}

learn::Result<learn::ModelFile> ExternalTrainer::Model() const {
  return learn::Status::InvalidArgument(
      "the model belongs to the external trainer process (no layer spec in the agent)");
}

}  // namespace meshtrain::daemon
