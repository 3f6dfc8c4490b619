#include "daemon/trainer/external_trainer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "daemon/offload.h"
#include "daemon/ops/metrics.h"
#include "daemon/trainer/external_trainer_impl.h"

namespace meshtrain::daemon {

using external_impl::Seconds;

namespace {

constexpr const char* kCleanDetach = "the trainer detached";

// Reply bytes queued for a trainer before it counts as not reading them.
constexpr size_t kMaxQueued = 256 * 1024;

// Bytes read per callback; the frame buffer holds at most this plus one frame.
constexpr size_t kReadChunk = 64 * 1024;

void CloseServer(uv_pipe_t* h) {
  h->data = nullptr;
  uv_close(reinterpret_cast<uv_handle_t*>(h),
           [](uv_handle_t* x) { delete reinterpret_cast<uv_pipe_t*>(x); });
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// True when something accepts connections on the Unix socket at `path`.
bool SocketLive(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return live;
}

}  // namespace

struct ExternalTrainer::Conn {
  uv_pipe_t pipe{};
  ExternalTrainer* owner = nullptr;  // cleared when the connection closes
  std::vector<uint8_t> buf;
  char read_chunk[kReadChunk];
  bool attached = false;
  bool closing = false;
  int64_t pid = 0;
  Clock::time_point last_activity;
};

bool ExternalTrainer::attached() const { return conn_ != nullptr && conn_->attached; }
int64_t ExternalTrainer::trainer_pid() const { return conn_ != nullptr ? conn_->pid : 0; }

ExternalTrainer::ExternalTrainer(uv_loop_t* loop, ExternalTrainerOptions options,
                                 MetricsLog* metrics, std::function<void()> notify)
    : loop_(loop), options_(std::move(options)), metrics_(metrics), notify_(std::move(notify)) {
  state_.training = false;  // until a trainer attaches
  state_.sync_every = 1;
  if (!options_.checkpoint_dir.empty()) {
    checkpoints_ = std::make_unique<ExternalCheckpoints>(
        options_.checkpoint_dir, options_.checkpoint_every, options_.name, metrics_);
  }
  mixer_->SetRobust(options_.robust);
}

Status ExternalTrainer::Restore(int64_t* resumed_step) {
  *resumed_step = -1;
  if (!checkpoints_) return Status::OK();
  auto loaded = checkpoints_->Load();
  if (!loaded.ok()) return loaded.status();
  if (!loaded.value()) return Status::OK();
  const ExternalCheckpoints::Loaded& l = **loaded;
  latest_ = l.params;
  latest_step_ = l.step;
  state_.step = state_.start_step = l.step;
  checkpoints_->MarkWritten(l.step);
  *resumed_step = static_cast<int64_t>(l.step);
  spdlog::info(
      "resumed from {} at step {} ({} model, {} parameters): a trainer that attaches "
      "continues from it",
      l.path, l.step, l.what.empty() ? "published" : l.what, l.params->size());
  return Status::OK();
}

ExternalTrainer::~ExternalTrainer() { Stop(); }

Status ExternalTrainer::Listen() {
  const std::string& path = options_.socket_path;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IOError("cannot create " + dir.string() + ": " + ec.message());
    chmod(dir.c_str(), 0700);
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::InvalidArgument("--trainer-socket " + path + " exists and is not a socket");
    }
    if (SocketLive(path)) {
      return Status::Unavailable("--trainer-socket " + path +
                                 " is in use (another agent serves it)");
    }
    unlink(path.c_str());  // stale: left by an agent that did not exit cleanly
  }
  server_ = new uv_pipe_t;
  uv_pipe_init(loop_, server_, 0);
  server_->data = this;
  int rc = uv_pipe_bind(server_, path.c_str());
  // Same user only: 0600 (root bypasses it; the SO_PEERCRED check below does not).
  if (rc == 0 && chmod(path.c_str(), 0600) != 0) rc = -errno;
  if (rc == 0) {
    rc = uv_listen(reinterpret_cast<uv_stream_t*>(server_), 8, [](uv_stream_t* s, int status) {
      auto* self = static_cast<ExternalTrainer*>(s->data);
      if (self != nullptr) self->OnConnection(status);
    });
  }
  if (rc != 0) {
    CloseServer(server_);
    server_ = nullptr;
    return Status::IOError("cannot listen on --trainer-socket " + path + ": " + uv_strerror(rc));
  }
  listening_ = true;
  tick_ = std::make_unique<transport::Timer>(loop_);
  tick_->Start(
      250, [this] { OnTick(); }, 250);
  spdlog::info("waiting for an external trainer on {}", path);
  return Status::OK();
}

void ExternalTrainer::Stop() {
  if (conn_ != nullptr) Close(conn_, "the agent is stopping");
  if (tick_) tick_->Close();
  if (park_timer_) park_timer_->Close();
  if (server_ != nullptr) {
    CloseServer(server_);
    server_ = nullptr;
  }
  if (listening_) {
    unlink(options_.socket_path.c_str());
    listening_ = false;
  }
  UnmapShm();
}

// ---- connections --------------------------------------------------------------------------------

void ExternalTrainer::OnConnection(int status) {
  if (status < 0) return;
  auto* c = new Conn;
  uv_pipe_init(loop_, &c->pipe, 0);
  c->pipe.data = c;
  c->owner = this;
  c->last_activity = Clock::now();
  if (uv_accept(reinterpret_cast<uv_stream_t*>(server_),
                reinterpret_cast<uv_stream_t*>(&c->pipe)) != 0) {
    c->owner = nullptr;
    uv_close(reinterpret_cast<uv_handle_t*>(&c->pipe),
             [](uv_handle_t* h) { delete static_cast<Conn*>(h->data); });
    return;
  }
  uv_os_fd_t fd = -1;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&c->pipe), &fd) != 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Reject(c, "trainer_peer", 0, "cannot read the connecting process's credentials");
  }
  c->pid = cred.pid;
  if (cred.uid != geteuid()) {
    return Reject(c, "trainer_peer", 0,
                  "permission denied: the trainer runs as uid " + std::to_string(cred.uid) +
                      ", the agent as uid " + std::to_string(geteuid()) +
                      " (only the same user may attach)");
  }
  if (conn_ != nullptr) {
    return Reject(
        c, "trainer_busy", 0,
        "another trainer (pid " + std::to_string(conn_->pid) + ") is attached to this agent");
  }
  conn_ = c;
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&c->pipe),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* conn = static_cast<Conn*>(h->data);
        *buf = uv_buf_init(conn->read_chunk, sizeof conn->read_chunk);
      },
      [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
        auto* conn = static_cast<Conn*>(s->data);
        if (conn->owner == nullptr) return;
        try {
          conn->owner->OnRead(conn, n, buf);
        } catch (const std::exception& e) {
          spdlog::error("external trainer: internal error: {}", e.what());
          if (conn->owner != nullptr) conn->owner->Close(conn, "internal error");
        }
      });
}

void ExternalTrainer::OnRead(Conn* c, ssize_t n, const uv_buf_t* buf) {
  if (n < 0) {
    Close(c, n == UV_EOF ? "the trainer closed the connection"
                         : std::string("connection error: ") + uv_strerror(static_cast<int>(n)));
    return;
  }
  if (n == 0) return;
  c->last_activity = Clock::now();
  c->buf.insert(c->buf.end(), buf->base, buf->base + n);
  HandleFrames(c);
}

bool ExternalTrainer::HandleFrames(Conn* c) {
  size_t pos = 0;
  while (!c->closing && c->buf.size() - pos >= tp::kHeaderBytes) {
    std::string why;
    auto h = tp::DecodeHeader(c->buf.data() + pos, &why);
    if (!h) {
      Reject(c, "trainer_frame", 0, why);
      return false;
    }
    if (c->buf.size() - pos < tp::kHeaderBytes + h->length) break;
    const uint8_t* body = c->buf.data() + pos + tp::kHeaderBytes;
    pos += tp::kHeaderBytes + h->length;
    auto req = tp::DecodeRequest(*h, body, &why);
    if (!req) {
      Reject(c, "trainer_message", h->seq, why);
      return false;
    }
    if (wait_ || job_ || finish_seq_) {
      Reject(c, "trainer_message", h->seq,
             std::string("a request arrived while ") +
                 (wait_         ? "wait_permit"
                  : finish_seq_ ? "finish"
                                : "a request") +
                 " was pending (one request at a time)");
      return false;
    }
    // The trainer has mapped the shared memory once it sends anything after ATTACH.
    if (c->attached) UnlinkShm();
    Handle(c, h->seq, std::move(*req));
  }
  if (c->closing) return false;
  c->buf.erase(c->buf.begin(), c->buf.begin() + static_cast<std::ptrdiff_t>(pos));
  return true;
}

void ExternalTrainer::Handle(Conn* c, uint32_t seq, tp::Request req) {
  if (auto* a = std::get_if<tp::Attach>(&req)) {
    if (c->attached) return Reject(c, "trainer_message", seq, "attach sent twice");
    return HandleAttach(c, seq, *a);
  }
  if (!c->attached) return Reject(c, "trainer_message", seq, "the first request must be attach");
  if (auto* w = std::get_if<tp::WaitPermit>(&req)) return HandleWait(c, seq, *w);
  const bool unsent = unsent_publish_;
  unsent_publish_ = false;  // anything but WAIT_PERMIT may change the shared memory after it
  if (auto* p = std::get_if<tp::Publish>(&req)) return HandlePublish(c, seq, *p);
  if (std::holds_alternative<tp::MixReq>(req)) return HandleMix(c, seq, unsent);
  if (auto* e = std::get_if<tp::EvalReport>(&req)) return HandleEval(c, seq, *e);
  if (auto* cfg = std::get_if<tp::Configure>(&req)) return HandleConfigure(c, seq, *cfg);
  if (std::holds_alternative<tp::Finish>(req)) return HandleFinish(c, seq);
  Reply(c, tp::kDetach | tp::kReplyBit, seq, {});
  Close(c, kCleanDetach);
}

void ExternalTrainer::Reply(Conn* c, uint16_t type, uint32_t seq, std::vector<uint8_t> body) {
  // A trainer that sends requests without reading the replies would grow the write queue.
  if (uv_stream_get_write_queue_size(reinterpret_cast<uv_stream_t*>(&c->pipe)) > kMaxQueued) {
    return Reject(c, "trainer_message", seq, "replies are not being read");
  }
  struct Req {
    uv_write_t req;
    std::vector<uint8_t> bytes;
  };
  auto* r = new Req;
  r->bytes = tp::EncodeFrame(type, seq, body);
  uv_buf_t b =
      uv_buf_init(reinterpret_cast<char*>(r->bytes.data()), static_cast<unsigned>(r->bytes.size()));
  const int rc = uv_write(&r->req, reinterpret_cast<uv_stream_t*>(&c->pipe), &b, 1,
                          [](uv_write_t* w, int) { delete reinterpret_cast<Req*>(w); });
  if (rc != 0) delete r;
}

void ExternalTrainer::Reject(Conn* c, const char* reason, uint32_t seq, const std::string& why) {
  rejects_[reason]++;
  spdlog::warn("external trainer{}: rejected ({}): {}",
               c->pid > 0 ? " pid " + std::to_string(c->pid) : std::string(), reason, why);
  struct Req {
    uv_write_t req;
    std::vector<uint8_t> bytes;
  };
  auto* r = new Req;
  r->bytes = tp::EncodeError(seq, why);
  uv_buf_t b =
      uv_buf_init(reinterpret_cast<char*>(r->bytes.data()), static_cast<unsigned>(r->bytes.size()));
  if (uv_write(&r->req, reinterpret_cast<uv_stream_t*>(&c->pipe), &b, 1,
               [](uv_write_t* w, int) { delete reinterpret_cast<Req*>(w); }) != 0) {
    delete r;
  }
  Close(c, std::string("rejected: ") + why);
}

void ExternalTrainer::Close(Conn* c, const std::string& why) {
  if (c->closing) return;
  c->closing = true;
  c->owner = nullptr;
  // uv_close lets queued writes (an ERROR frame) go out first only for shutdown; a best effort
  // is enough here: the trainer also sees the connection close.
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->pipe));
  auto* req = new uv_shutdown_t;
  req->data = c;
  if (uv_shutdown(req, reinterpret_cast<uv_stream_t*>(&c->pipe), [](uv_shutdown_t* r, int) {
        auto* conn = static_cast<Conn*>(r->data);
        delete r;
        uv_close(reinterpret_cast<uv_handle_t*>(&conn->pipe),
                 [](uv_handle_t* h) { delete static_cast<Conn*>(h->data); });
      }) != 0) {
    delete req;
    uv_close(reinterpret_cast<uv_handle_t*>(&c->pipe),
             [](uv_handle_t* h) { delete static_cast<Conn*>(h->data); });
  }
  if (c != conn_) return;
  const bool was_attached = c->attached;
  conn_ = nullptr;
  conn_gen_++;
  job_ = false;
  parked_.reset();
  wait_.reset();
  gate_.reset();
  finish_seq_.reset();
  published_local_ = false;
  mixed_print_.reset();
  UnmapShm(/*off_loop=*/true);
  if (!was_attached) return;
  if (state_.training) gone_since_ = Clock::now();  // gone before it finished: the grace runs
  state_.training = false;
  mixer_->SetFrozen(true);  // its center stops moving (ChunkMixer::SetFrozen)
  state_.waiting = false;
  const bool clean = why == kCleanDetach;
  spdlog::log(clean ? spdlog::level::info : spdlog::level::warn,
              "external trainer detached ({}): not training until a trainer attaches again", why);
  metrics_->Write("trainer", {{"attached", false}, {"step", state_.step}, {"reason", why}});
  notify_();
}

void ExternalTrainer::OnTick() {
  TryGatedMix();  // a waited peer may have failed or stopped training meanwhile
  if (gone_since_ && !state_.absent && !attached() &&
      Seconds(Clock::now() - *gone_since_) >= options_.grace_s) {
    state_.absent = true;  // the node publishes it: the consensus goes on without us
    spdlog::warn(
        "no trainer attached for {} s (--trainer-grace) since the last one left at step "
        "{}",
        options_.grace_s, state_.step);
    metrics_->Write("trainer", {{"absent", true}, {"step", state_.step}});
    notify_();
  }
  if (conn_ == nullptr || wait_ || job_ || finish_seq_) return;  // the trainer waits on us
  const double silent = Seconds(Clock::now() - conn_->last_activity);
  if (silent > options_.timeout_s) {
    Close(conn_, "silent for " + std::to_string(static_cast<int>(silent)) +
                     " s (--trainer-timeout " + std::to_string(options_.timeout_s) + ")");
  }
}

// ---- shared memory ------------------------------------------------------------------------------

Status ExternalTrainer::MapShm(size_t floats) {
  UnmapShm();
  std::random_device rd;
  const std::string path = options_.shm_dir + "/meshtrain-" + options_.name + "-" +
                           std::to_string(getpid()) + "-" + std::to_string(++shm_counter_) + "-" +
                           std::to_string(rd());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::IOError(Errno("cannot create shared memory " + path));
  const size_t bytes = floats * sizeof(float);
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const std::string err = Errno("cannot map shared memory " + path);
  close(fd);
  if (p == MAP_FAILED) {
    unlink(path.c_str());
    return Status::IOError(err);
  }
  std::shared_ptr<void> map(p, [bytes](void* q) { munmap(q, bytes); });
  shm_ = Shm{path, std::move(map), static_cast<float*>(p), floats};
  return Status::OK();
}

void ExternalTrainer::UnlinkShm() {
  if (shm_.path.empty()) return;
  unlink(shm_.path.c_str());
  shm_.path.clear();
}

void ExternalTrainer::UnmapShm(bool off_loop) {
  UnlinkShm();
  // Unmapped when the last job holding the mapping is done; with off_loop (a detach while the
  // agent runs) on the thread pool: the last unmap of an unlinked segment frees its pages, ~0.3 s
  // of CPU for a 1 GB model.
  if (off_loop && shm_.map) {
    OffloadBulk(
        loop_, [map = std::move(shm_.map)]() mutable { map.reset(); }, [] {});
  }
  shm_ = Shm{};
}

// ---- requests ----------------------------------------------------------------------------------

void ExternalTrainer::HandleAttach(Conn* c, uint32_t seq, const tp::Attach& a) {
  if (num_params_ != 0 && a.num_params != num_params_) {
    return Reject(c, "trainer_message", seq,
                  "attach: the model has " + std::to_string(a.num_params) +
                      " parameters, this agent trains " + std::to_string(num_params_));
  }
  if (auto st = MapShm(a.num_params); !st.ok()) {
    spdlog::error("external trainer: {}", st.message());
    Reply(c, tp::kError, seq, tp::Writer().Str(st.message()).Take());
    return Close(c, st.message());
  }
  num_params_ = a.num_params;
  inbox_.clear();
  mixer_->Clear();
  ClearWindow();
  uint64_t step = state_.step;
  std::shared_ptr<const std::vector<float>> resume;
  if (latest_ && latest_->size() == num_params_ &&
      (a.resume_step < 0 || static_cast<uint64_t>(a.resume_step) <= state_.step)) {
    resume = latest_;
  } else if (a.resume_step > 0) {
    step = std::max(step, static_cast<uint64_t>(a.resume_step));
  }
  c->attached = true;
  gone_since_.reset();
  state_.absent = false;
  state_.step = step;
  window_step_ = step + every_;
  state_.start_step = step;
  state_.training = !target_reached_;
  mixer_->SetFrozen(!state_.training);
  state_.waiting = false;
  if (!resume) return FinishAttach(c, seq, step, false);
  // The agent's model goes into the shared memory on the thread pool (a copy of the whole model:
  // never on the loop); the trainer waits for the reply meanwhile.
  job_ = true;
  OffloadBulk(
      loop_,
      [map = shm_.map, data = shm_.data, resume] {
        std::memcpy(data, resume->data(), resume->size() * sizeof(float));
      },
      [this, life = std::weak_ptr<int>(life_), gen = conn_gen_, c, seq, step] {
        if (life.expired() || gen != conn_gen_) return;
        job_ = false;
        FinishAttach(c, seq, step, true);
        HandleFrames(c);
      });
}

void ExternalTrainer::FinishAttach(Conn* c, uint32_t seq, uint64_t step, bool have_params) {
  train_start_ = last_publish_ = Clock::now();
  at_attach_.clear();
  if (peer_steps_) {
    for (const auto& p : peer_steps_()) at_attach_[p.name] = p.step;
  }
  PrepareBuffers();
  Reply(c, tp::kAttach | tp::kReplyBit, seq,
        tp::Writer()
            .U64(step)
            .U64(num_params_)
            .U32(have_params ? 1 : 0)
            .U32(static_cast<uint32_t>(shm_.path.size()))
            .Str(shm_.path)
            .Take());
  spdlog::info("external trainer attached (pid {}, {} parameters), {} at step {}", c->pid,
               num_params_, have_params ? "resuming from the agent's model" : "starting", step);
  metrics_->Write("trainer", {{"attached", true}, {"pid", c->pid}, {"step", step}});
  notify_();
}

void ExternalTrainer::HandleWait(Conn* c, uint32_t seq, const tp::WaitPermit& w) {
  if (w.step > state_.step + 1) {
    return Reject(c, "trainer_message", seq,
                  "wait_permit(" + std::to_string(w.step) + ") before publish(" +
                      std::to_string(w.step - 1) + "): the agent is at step " +
                      std::to_string(state_.step));
  }
  if (!state_.training || permitted_ >= w.step || w.step <= state_.step) {
    state_.wait.Observe(0);
    Reply(c, tp::kWaitPermit | tp::kReplyBit, seq,
          tp::Writer().U64(w.step).U32(state_.training ? 1 : 0).U32(WaitFlags()).Take());
    return;
  }
  wait_ = PendingWait{seq, w.step, Clock::now()};
  state_.waiting = true;
  notify_();  // the loop runs the barrier for step + 1
}

void ExternalTrainer::Permit(uint64_t step, double) {
  permitted_ = std::max(permitted_, step);
  if (!wait_ || permitted_ < wait_->step || conn_ == nullptr) return;
  const double waited = Seconds(Clock::now() - wait_->since);
  state_.wait.Observe(waited);
  state_.idle_s += waited;
  state_.waiting = false;
  last_permit_ = Clock::now();
  Reply(conn_, tp::kWaitPermit | tp::kReplyBit, wait_->seq,
        tp::Writer().U64(wait_->step).U32(state_.training ? 1 : 0).U32(WaitFlags()).Take());
  wait_.reset();
}

ExternalTrainer::PeerSteps SyncPeers(const node::Node& node, const AgentConfig& config,
                                     int64_t now) {
  ExternalTrainer::PeerSteps out;
  if (config.select != sync::SelectPolicy::kAll || node.Reach() == membership::Reach::kNat) {
    return out;
  }
  auto since_change = [&](const std::string& name) {
    const std::optional<int64_t> at = node.ReturnedAt(name);
    return at ? static_cast<double>(now - *at) / 1000.0 : 1e9;
  };
  if (const sync::BarrierCore* b = node.barrier()) {
    const sync::ProgressView& v = b->view();
    for (const auto& e : v.entries()) {
      const std::string& name = v.name(e);
      out.push_back({name, e.progress.step, since_change(name)});
    }
    return out;
  }
  for (const auto& m : node.Members()) {
    if (m.name == config.name || !m.meta.training) continue;
    if (m.status == membership::Status::kAlive || m.status == membership::Status::kSuspect) {
      out.push_back({m.name, m.step, since_change(m.name)});
    }
  }
  return out;
}

learn::Result<std::unique_ptr<Trainer>> MakeExternalTrainer(uv_loop_t* loop,
                                                            const AgentConfig& config,
                                                            MetricsLog* metrics,
                                                            std::function<void()> notify,
                                                            int64_t* resumed_step) {
  ExternalTrainerOptions opts;
  opts.socket_path = config.trainer_socket;
  opts.timeout_s = config.trainer_timeout_s;
  opts.target_accuracy = config.target_accuracy;
  opts.name = config.name;
  opts.checkpoint_dir = config.data_dir;
  opts.checkpoint_every = config.checkpoint_every;
  opts.grace_s = config.trainer_grace_s;
  opts.robust = config.robust;
  auto t = std::make_unique<ExternalTrainer>(loop, opts, metrics, std::move(notify));
  if (auto st = t->Restore(resumed_step); !st.ok()) return st;
  if (auto st = t->Listen(); !st.ok()) return st;
  return std::unique_ptr<Trainer>(std::move(t));
}

}  // namespace meshtrain::daemon
