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

#include "base/huge_pages.h"
#include "daemon/offload.h"
#include "daemon/ops/metrics.h"
#include "learn/mixing.h"

namespace meshtrain::daemon {

namespace {

// A snapshot buffer of n floats, with huge pages advised before its pages are first touched.
std::shared_ptr<std::vector<float>> NewSnapshotBuffer(size_t n) {
  auto b = std::make_shared<std::vector<float>>();
  b->reserve(n);
  AdviseHugePages(b->data(), n * sizeof(float));
  b->resize(n);
  return b;
}

constexpr const char* kCleanDetach = "the trainer detached";

// Reply bytes queued for a trainer before it counts as not reading them.
constexpr size_t kMaxQueued = 256 * 1024;

// Bytes read per callback; the frame buffer holds at most this plus one frame.
constexpr size_t kReadChunk = 64 * 1024;

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

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
  wait_.reset();
  finish_seq_.reset();
  UnmapShm(/*off_loop=*/true);
  if (!was_attached) return;
  state_.training = false;
  state_.waiting = false;
  const bool clean = why == kCleanDetach;
  spdlog::log(clean ? spdlog::level::info : spdlog::level::warn,
              "external trainer detached ({}): not training until a trainer attaches again", why);
  metrics_->Write("trainer", {{"attached", false}, {"step", state_.step}, {"reason", why}});
  notify_();
}

void ExternalTrainer::OnTick() {
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
  uint64_t step = state_.step;
  std::shared_ptr<const std::vector<float>> resume;
  if (latest_ && latest_->size() == num_params_ &&
      (a.resume_step < 0 || static_cast<uint64_t>(a.resume_step) <= state_.step)) {
    resume = latest_;
  } else if (a.resume_step > 0) {
    step = std::max(step, static_cast<uint64_t>(a.resume_step));
  }
  c->attached = true;
  state_.step = step;
  state_.start_step = step;
  state_.training = !target_reached_;
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
          tp::Writer().U64(w.step).U32(state_.training ? 1 : 0).U32(0).Take());
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
        tp::Writer().U64(wait_->step).U32(state_.training ? 1 : 0).U32(0).Take());
  wait_.reset();
}

void ExternalTrainer::HandlePublish(Conn* c, uint32_t seq, const tp::Publish& p) {
  if (p.step < state_.step) {
    return Reject(c, "trainer_message", seq,
                  "publish(" + std::to_string(p.step) + ") goes back from step " +
                      std::to_string(state_.step));
  }
  // A copy: the trainer overwrites the shared memory with its next step while this one is sent.
  auto snap = std::make_shared<std::shared_ptr<std::vector<float>>>(SnapshotBuffer());
  if (p.end > num_params_) {
    return Reject(c, "trainer_message", seq,
                  "publish: fragment end " + std::to_string(p.end) + " is beyond the model's " +
                      std::to_string(num_params_) + " parameters");
  }
  const wire::StreamSpan span{static_cast<uint32_t>(p.begin), static_cast<uint32_t>(p.end)};
  if (!*snap && !CanAllocateSnapshot()) return FinishPublish(c, seq, p.step, nullptr, span);
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
  if (snap) {
    latest_ = snap;
    latest_step_ = step;
    outbox_ = Snapshot{step, std::move(snap), false, span};
  }
  Reply(c, tp::kPublish | tp::kReplyBit, seq, tp::Writer().U64(step).Take());
  notify_();
}

std::shared_ptr<std::vector<float>> ExternalTrainer::SnapshotBuffer() {
  for (auto& b : pool_) {
    // Held by the pool, and by latest_ when it is this buffer: nobody else.
    const long holders = 1 + (latest_.get() == b.get() ? 1 : 0);
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
  // Decided here, carried out on the thread pool (the trainer waits for the reply meanwhile).
  struct Work {
    std::optional<Incoming> take;  // a model that replaces the trainer's
    std::vector<Incoming> whole;   // whole models to average in (final models, top-k)
    std::vector<double> weights;
    size_t mixed = 0;
    std::shared_ptr<std::vector<float>> snap;  // a late snapshot of the mixed model, or null
    bool snap_ok = false;
  };
  auto work = std::make_shared<Work>();
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
    }
    inbox_.clear();
  }
  if (unsent && !work->take && !preparing_) work->snap = SnapshotBuffer();
  job_ = true;
  OffloadBulk(
      loop_,
      [map = shm_.map, data = shm_.data, n = num_params_, mixer = mixer_, work] {
        if (work->take) {
          std::memcpy(data, work->take->params.data(), n * sizeof(float));
          mixer->Clear();
          return;
        }
        if (!work->whole.empty()) {
          std::vector<const float*> others;
          for (const auto& in : work->whole) others.push_back(in.params.data());
          learn::MixWeighted(data, n, others, work->weights);
        }
        work->mixed = work->whole.size() + mixer->Apply(data, n);
        if (work->snap) work->snap_ok = learn::CopyParamsFinite(data, work->snap->data(), n);
      },
      [this, life = std::weak_ptr<int>(life_), gen = conn_gen_, c, seq, flags, work] {
        if (life.expired() || gen != conn_gen_) return;
        job_ = false;
        if (work->snap_ok) {
          latest_ = work->snap;
          latest_step_ = state_.step;
          outbox_ = Snapshot{state_.step, work->snap};
          notify_();
        }
        const auto mixed = static_cast<uint32_t>(work->mixed);
        state_.mixes += mixed;
        Reply(c, tp::kMix | tp::kReplyBit, seq,
              tp::Writer().U32(mixed).U32(flags).U64(state_.step).Take());
        if (flags & tp::kMixAdopted) notify_();
        HandleFrames(c);
      });
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
  finish_seq_ = seq;
  spdlog::info("the trainer finished at step {}: waiting for the mesh's consensus model",
               state_.step);
  metrics_->Write("trainer", {{"finished", true}, {"step", state_.step}});
  if (offered || !latest_) {
    // Nothing (new) to offer: reply when (or if already) the consensus model is here.
    if (consensus_) ReplyFinish();
    return notify_();
  }
  OfferFinal(c, [this] {
    if (consensus_) ReplyFinish();
  });
}

void ExternalTrainer::AdoptConsensus(std::shared_ptr<const std::vector<float>> params,
                                     size_t participants) {
  if (!params || params->size() != num_params_ || state_.training) return;
  consensus_ = std::move(params);
  latest_ = consensus_;
  state_.consensus_crc32 = learn::ParamsCrc32(consensus_->data(), consensus_->size());
  state_.consensus_models = participants;
  spdlog::info("consensus model of {} nodes adopted (crc32 {:08x})", participants,
               state_.consensus_crc32);
  metrics_->Write("consensus", {{"models", participants}, {"crc32", state_.consensus_crc32}});
  if (finish_seq_ && !job_) ReplyFinish();
  notify_();
}

void ExternalTrainer::ReplyFinish() {
  if (!finish_seq_ || !consensus_ || conn_ == nullptr || !shm_.data) return;
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
}

void ExternalTrainer::DeliverChunk(node::MixChunk chunk) {
  if (num_params_ == 0 || chunk.total != num_params_) return;
  const double w = learn::MixWeight(state_.step, chunk.step);
  mixer_->Push(std::move(chunk), w);
}

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

learn::Result<std::unique_ptr<Trainer>> MakeExternalTrainer(uv_loop_t* loop,
                                                            const AgentConfig& config,
                                                            MetricsLog* metrics,
                                                            std::function<void()> notify) {
  ExternalTrainerOptions opts;
  opts.socket_path = config.trainer_socket;
  opts.timeout_s = config.trainer_timeout_s;
  opts.target_accuracy = config.target_accuracy;
  opts.name = config.name;
  auto t = std::make_unique<ExternalTrainer>(loop, opts, metrics, std::move(notify));
  if (auto st = t->Listen(); !st.ok()) return st;
  return std::unique_ptr<Trainer>(std::move(t));
}

}  // namespace meshtrain::daemon
