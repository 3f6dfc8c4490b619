#include "transport/transport.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>

#include "wire/framing.h"

namespace meshtrain::transport {

using wire::EncodeFrameHeader;
using wire::kFrameHeaderBytes;
namespace {

template <typename H>
void CloseAndDelete(H* h) {
  if (h == nullptr) return;
  auto* base = reinterpret_cast<uv_handle_t*>(h);
  base->data = nullptr;
  if (uv_is_closing(base)) return;
  uv_close(base, [](uv_handle_t* x) { delete reinterpret_cast<H*>(x); });
}

std::atomic<uint64_t> g_callback_exceptions{0};
std::mutex g_hook_mu;
CallbackErrorHook g_hook;  // guarded by g_hook_mu

void Report(const char* where, const char* what) noexcept {
  const uint64_t n = g_callback_exceptions.fetch_add(1, std::memory_order_relaxed) + 1;
  if ((n & (n - 1)) != 0) return;  // 1, 2, 4, 8, ...
  try {
    CallbackErrorHook hook;
    {
      std::lock_guard<std::mutex> lock(g_hook_mu);
      hook = g_hook;
    }
    if (hook) hook(where, what, n);
  } catch (...) {
    // The hook failed too; the count above stands.
  }
}

// Runs a user handler from a libuv callback: nothing it throws may unwind into libuv (C code).
// Returns false if it threw; `counter` (if non-null) counts it for its endpoint.
template <typename F>
bool Guarded(const char* where, uint64_t* counter, F&& fn) noexcept {
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    Report(where, e.what());
  } catch (...) {
    Report(where, "unknown exception");
  }
  if (counter != nullptr) ++*counter;
  return false;
}

void AllocBuffer(uv_handle_t*, size_t suggested, uv_buf_t* buf) {
  // Owned from here on: freed by the read callback in every case (including nread <= 0).
  buf->base = new char[suggested];
  buf->len = suggested;
}

}  // namespace

int64_t LoopNowMs(uv_loop_t* loop) { return static_cast<int64_t>(uv_now(loop)); }

uint64_t CallbackExceptions() { return g_callback_exceptions.load(std::memory_order_relaxed); }

void SetCallbackErrorHook(CallbackErrorHook hook) {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  g_hook = std::move(hook);
}

// ---- Timer ----------------------------------------------------------------------------------

Timer::Timer(uv_loop_t* loop) : handle_(new uv_timer_t) {
  uv_timer_init(loop, handle_);
  handle_->data = this;
}
Timer::~Timer() { Close(); }

void Timer::Start(int64_t delay_ms, std::function<void()> fn, int64_t repeat_ms) {
  if (handle_ == nullptr) return;
  fn_ = std::move(fn);
  uv_timer_start(
      handle_,
      [](uv_timer_t* h) {
        auto* self = static_cast<Timer*>(h->data);
        if (self != nullptr && self->fn_) {
          Guarded("timer", nullptr, [self] {
            auto fn = self->fn_;  // the callback may re-arm or close this timer
            fn();
          });
        }
      },
      static_cast<uint64_t>(std::max<int64_t>(0, delay_ms)),
      static_cast<uint64_t>(std::max<int64_t>(0, repeat_ms)));
}

void Timer::Stop() {
  if (handle_ != nullptr) uv_timer_stop(handle_);
}

void Timer::Close() {
  CloseAndDelete(handle_);
  handle_ = nullptr;
}

// ---- Async ----------------------------------------------------------------------------------

Async::Async(uv_loop_t* loop, std::function<void()> fn) : handle_(new uv_async_t), fn_(fn) {
  uv_async_init(loop, handle_, [](uv_async_t* h) {
    auto* self = static_cast<Async*>(h->data);
    if (self != nullptr && self->fn_) Guarded("async", nullptr, [self] { self->fn_(); });
  });
  handle_->data = this;
}
Async::~Async() { Close(); }
void Async::Send() {
  if (handle_ != nullptr) uv_async_send(handle_);
}
void Async::Close() {
  CloseAndDelete(handle_);
  handle_ = nullptr;
}

// ---- Signal ---------------------------------------------------------------------------------

Signal::Signal(uv_loop_t* loop, int signum, std::function<void()> fn)
    : handle_(new uv_signal_t), fn_(std::move(fn)) {
  uv_signal_init(loop, handle_);
  handle_->data = this;
  uv_signal_start(
      handle_,
      [](uv_signal_t* h, int) {
        auto* self = static_cast<Signal*>(h->data);
        if (self != nullptr && self->fn_) Guarded("signal", nullptr, [self] { self->fn_(); });
      },
      signum);
}
Signal::~Signal() { Close(); }
void Signal::Close() {
  CloseAndDelete(handle_);
  handle_ = nullptr;
}

// ---- UDP ------------------------------------------------------------------------------------

namespace {
struct UdpSend {
  uv_udp_send_t req;
  Bytes data;
};
}  // namespace

UdpEndpoint::UdpEndpoint(uv_loop_t* loop) : handle_(new uv_udp_t) {
  uv_udp_init(loop, handle_);
  handle_->data = this;
}
UdpEndpoint::~UdpEndpoint() { Close(); }

Status UdpEndpoint::Bind(const NetAddr& addr, RecvFn on_recv) {
  if (handle_ == nullptr) return Status::InvalidArgument("UDP endpoint is closed");
  on_recv_ = std::move(on_recv);
  int rc = uv_udp_bind(handle_, &addr.sa.base, 0);
  family_ = addr.family();
  if (rc == 0) rc = uv_udp_recv_start(handle_, AllocBuffer, &UdpEndpoint::OnRecv);
  if (rc == 0) {
    // Room for a capacity probe train (up to 1.3 MB, daemon/link_prober.h) arriving while the
    // loop is busy, so that neither it nor the membership datagrams beside it are dropped;
    // best effort (the kernel caps it at net.core.rmem_max).
    int rcvbuf = 2 << 20;
    (void)uv_recv_buffer_size(reinterpret_cast<uv_handle_t*>(handle_), &rcvbuf);
    // The first SIOCGSTAMPNS turns receive timestamps on (it fails: no datagram yet), so the
    // first probe datagram already has one (socket(7)).
    (void)ReceiveTimestampNs();
    return Status::OK();
  }
  return Status::Unavailable("cannot bind UDP " + addr.ToString() + ": " + uv_strerror(rc));
}

void UdpEndpoint::OnRecv(uv_udp_t* h, ssize_t nread, const uv_buf_t* buf, const sockaddr* addr,
                         unsigned flags) {
  std::unique_ptr<char[]> owned(buf->base);
  auto* self = static_cast<UdpEndpoint*>(h->data);
  // nread == 0 with addr == nullptr: nothing more to read; with addr: an empty datagram,
  // which is passed on so it is counted as rejected like any other bad input.
  if (self == nullptr || nread < 0 || addr == nullptr) return;
  if (flags & UV_UDP_PARTIAL) nread = static_cast<ssize_t>(buf->len) + 1;  // oversized marker
  auto from = NetAddr::FromSockaddr(addr);
  if (!from) return;
  self->received_++;
  self->bytes_received_ += static_cast<uint64_t>(nread);
  if (self->on_recv_) {
    const auto* data = reinterpret_cast<const uint8_t*>(owned.get());
    const size_t len = std::min<size_t>(static_cast<size_t>(nread), buf->len);
    Guarded("udp recv", &self->callback_exceptions_, [&] { self->on_recv_(data, len, *from); });
  }
}

int64_t UdpEndpoint::ReceiveTimestampNs() const {
  timespec ts{};
  uv_os_fd_t fd = -1;
  if (handle_ == nullptr || uv_fileno(reinterpret_cast<const uv_handle_t*>(handle_), &fd) != 0 ||
      ioctl(fd, SIOCGSTAMPNS, &ts) != 0) {
    clock_gettime(CLOCK_REALTIME, &ts);
  }
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool UdpEndpoint::Send(const NetAddr& to, Bytes data) {
  if (handle_ == nullptr) return false;
  auto* req = new UdpSend;
  req->data = std::move(data);
  uv_buf_t b = uv_buf_init(reinterpret_cast<char*>(req->data.data()),
                           static_cast<unsigned>(req->data.size()));
  const size_t n = req->data.size();
  const NetAddr dest = family_ == AF_INET6 ? to.MappedV6() : to;
  int rc = uv_udp_send(&req->req, handle_, &b, 1, &dest.sa.base,
                       [](uv_udp_send_t* r, int) { delete reinterpret_cast<UdpSend*>(r); });
  if (rc != 0) {
    delete req;
    return false;
  }
  sent_++;
  bytes_sent_ += n;
  return true;
}

void UdpEndpoint::Close() {
  CloseAndDelete(handle_);
  handle_ = nullptr;
}

// ---- TCP ------------------------------------------------------------------------------------

struct TcpHub::Conn {
  TcpHub* hub = nullptr;
  ConnId id = 0;
  uv_tcp_t* tcp = nullptr;
  uv_timer_t* idle = nullptr;
  FrameFn on_frame;
  CloseFn on_close;
  BigFrameFn on_big;
  std::unique_ptr<FrameDecoder> decoder;
  // Frame payloads queued (the header is added at write time); shared, so one encoded parameter
  // chunk can go to every receiver of a round without a copy per receiver.
  std::deque<OutFrame> pending;
  size_t queued_bytes = 0;  // pending plus written but not yet completed
  bool connected = false;
  bool read_paused = false;  // downlink limit in debt
  bool direct_read = false;  // the read in progress goes into the decoder's frame buffer
  bool closing = false;
  bool close_when_flushed = false;
  size_t writes_in_flight = 0;
};

struct TcpHub::Listener {
  TcpHub* hub = nullptr;
  uv_tcp_t* tcp = nullptr;
  FrameFn on_frame;
  CloseFn on_close;
  BigFrameFn on_big;
};

namespace {
struct TcpWrite {
  uv_write_t req;
  uint8_t header[kFrameHeaderBytes];  // the frame's length prefix, written before `data`
  OutFrame data;
  TcpHub* hub;
  TcpHub::ConnId id;
};
}  // namespace

TcpHub::TcpHub(uv_loop_t* loop, TcpOptions options) : loop_(loop), options_(options) {}
TcpHub::~TcpHub() { CloseAll(); }

TcpHub::Conn* TcpHub::NewConn(FrameFn on_frame, CloseFn on_close) {
  auto* c = new Conn;
  c->hub = this;
  c->id = next_id_++;
  c->tcp = new uv_tcp_t;
  uv_tcp_init(loop_, c->tcp);
  c->tcp->data = c;
  c->idle = new uv_timer_t;
  uv_timer_init(loop_, c->idle);
  c->idle->data = c;
  c->on_frame = std::move(on_frame);
  c->on_close = std::move(on_close);
  c->decoder = std::make_unique<FrameDecoder>(options_.max_frame_bytes);
  conns_[c->id] = c;
  Touch(c);
  return c;
}

void TcpHub::Touch(Conn* c) {
  if (c->idle == nullptr || options_.idle_timeout_ms <= 0) return;
  uv_timer_start(
      c->idle,
      [](uv_timer_t* t) {
        auto* conn = static_cast<Conn*>(t->data);
        if (conn != nullptr) conn->hub->Finish(conn, kIdleTimeout);
      },
      static_cast<uint64_t>(options_.idle_timeout_ms), 0);
}

Status TcpHub::Listen(const NetAddr& addr, FrameFn on_frame, CloseFn on_close, BigFrameFn on_big) {
  auto* l = new Listener;
  l->hub = this;
  l->tcp = new uv_tcp_t;
  l->on_frame = std::move(on_frame);
  l->on_close = std::move(on_close);
  l->on_big = std::move(on_big);
  uv_tcp_init(loop_, l->tcp);
  l->tcp->data = l;
  listeners_.push_back(l);
  int rc = uv_tcp_bind(l->tcp, &addr.sa.base, 0);
  if (rc == 0) {
    rc = uv_listen(reinterpret_cast<uv_stream_t*>(l->tcp), 128, [](uv_stream_t* server, int st) {
      auto* lst = static_cast<Listener*>(server->data);
      if (lst == nullptr || st < 0) return;
      TcpHub* hub = lst->hub;
      Conn* c = hub->NewConn(lst->on_frame, lst->on_close);
      c->on_big = lst->on_big;
      if (uv_accept(server, reinterpret_cast<uv_stream_t*>(c->tcp)) != 0) {
        hub->Finish(c, UV_ECONNABORTED);
        return;
      }
      c->connected = true;
      if (hub->conns_.size() > hub->options_.max_connections) {
        hub->refused_++;
        hub->Finish(c, kTooManyConnections);
        return;
      }
      hub->StartReading(c);
    });
  }
  if (rc == 0) return Status::OK();
  return Status::Unavailable("cannot listen on TCP " + addr.ToString() + ": " + uv_strerror(rc));
}

TcpHub::ConnId TcpHub::Connect(const NetAddr& addr, FrameFn on_frame, CloseFn on_close) {
  Conn* c = NewConn(std::move(on_frame), std::move(on_close));
  auto* req = new uv_connect_t;
  req->data = this;
  const ConnId id = c->id;
  // The request carries the id, not the Conn*: the connection may be aborted before it lands.
  struct Ctx {
    TcpHub* hub;
    ConnId id;
  };
  req->data = new Ctx{this, id};
  int rc = uv_tcp_connect(req, c->tcp, &addr.sa.base, [](uv_connect_t* r, int status) {
    std::unique_ptr<Ctx> ctx(static_cast<Ctx*>(r->data));
    delete r;
    if (status == UV_ECANCELED) return;  // hub is shutting down
    auto it = ctx->hub->conns_.find(ctx->id);
    if (it == ctx->hub->conns_.end()) return;
    Conn* conn = it->second;
    if (status != 0) {
      ctx->hub->Finish(conn, status);
      return;
    }
    conn->connected = true;
    ctx->hub->StartReading(conn);
    ctx->hub->Flush(conn);
  });
  if (rc != 0) {
    delete static_cast<Ctx*>(req->data);
    delete req;
    // Report asynchronously-equivalent: the caller learns through on_close.
    Finish(c, rc);
  }
  return id;
}

void TcpHub::StartReading(Conn* c) {
  uv_read_start(reinterpret_cast<uv_stream_t*>(c->tcp), &TcpHub::AllocRead, &TcpHub::OnRead);
}

void TcpHub::AllocRead(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  // libuv calls the read callback right after this one, with nothing in between.
  auto* c = static_cast<Conn*>(h->data);
  size_t len = 0;
  uint8_t* space = c != nullptr && !c->closing ? c->decoder->Space(&len) : nullptr;
  if (space != nullptr) {
    c->direct_read = true;
    buf->base = reinterpret_cast<char*>(space);
    buf->len = len;
    return;
  }
  if (c != nullptr) c->direct_read = false;
  AllocBuffer(h, suggested, buf);
}

void TcpHub::OnRead(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
  auto* c = static_cast<Conn*>(s->data);
  const bool direct = c != nullptr && c->direct_read;
  if (c != nullptr) c->direct_read = false;
  std::unique_ptr<char[]> owned(direct ? nullptr : buf->base);  // the decoder owns a direct one
  if (c == nullptr || c->closing) return;
  TcpHub* hub = c->hub;
  if (nread == 0) return;  // EAGAIN: nothing read
  if (nread < 0) {
    hub->Finish(c, nread == UV_EOF ? 0 : static_cast<int>(nread));
    return;
  }
  hub->bytes_received_ += static_cast<uint64_t>(nread);
  hub->Touch(c);
  if (!hub->down_.unlimited()) {
    const double now = hub->NowSeconds();
    hub->down_.Charge(now, static_cast<double>(nread));
    if (const double wait = hub->down_.Delay(now); wait > 0) {
      uv_read_stop(s);
      c->read_paused = true;
      hub->SchedulePacer(wait);
    }
  }
  if (direct) {
    c->decoder->Commit(static_cast<size_t>(nread));
  } else {
    c->decoder->Feed(reinterpret_cast<const uint8_t*>(owned.get()), static_cast<size_t>(nread));
  }
  const ConnId id = c->id;
  while (true) {
    bool ok = true;
    if (c->on_big && c->decoder->BigReady()) {
      ok = Guarded("tcp frame", &hub->callback_exceptions_,
                   [&] { c->on_big(id, c->decoder->TakeBig()); });
    } else {
      auto frame = c->decoder->Next();
      if (!frame) break;
      if (c->on_frame) {
        ok = Guarded("tcp frame", &hub->callback_exceptions_,
                     [&] { c->on_frame(id, std::move(*frame)); });
      }
    }
    // The callback may have closed this connection.
    auto it = hub->conns_.find(id);
    if (it == hub->conns_.end() || it->second->closing) return;
    if (!ok) {
      hub->Finish(c, kHandlerError);
      return;
    }
  }
  if (c->decoder->error()) {
    hub->framing_errors_++;
    hub->Finish(c, kFramingError);
    return;
  }
  if (!c->read_paused && hub->gate_ && !hub->gate_()) {
    uv_read_stop(s);
    c->read_paused = true;
    hub->gate_pauses_++;
    hub->SchedulePacer(kGateRecheckS);
  }
}

bool TcpHub::Send(ConnId id, Bytes payload) {
  return Send(id, std::make_shared<const Bytes>(std::move(payload)));
}

bool TcpHub::Send(ConnId id, std::shared_ptr<const Bytes> payload) {
  if (!payload) return false;
  OutFrame f;
  f.head = std::move(payload);
  return Send(id, std::move(f));
}

bool TcpHub::Send(ConnId id, OutFrame frame) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second->closing || it->second->close_when_flushed || !frame.head ||
      frame.size() == 0 || (frame.tail == nullptr && frame.tail_len != 0)) {
    return false;
  }
  Conn* c = it->second;
  c->queued_bytes += kFrameHeaderBytes + frame.size();
  c->pending.push_back(std::move(frame));
  if (c->connected) Flush(c);
  return true;
}

size_t TcpHub::QueuedBytes(ConnId id) const {
  auto it = conns_.find(id);
  return it == conns_.end() ? 0 : it->second->queued_bytes;
}

double TcpHub::NowSeconds() const { return static_cast<double>(uv_hrtime()) / 1e9; }

void TcpHub::SetRateLimits(double uplink_bytes_per_s, double downlink_bytes_per_s) {
  // Burst: a tenth of a second of traffic, so short-term rates stay close to the cap.
  up_ = TokenBucket(uplink_bytes_per_s, uplink_bytes_per_s * 0.1);
  down_ = TokenBucket(downlink_bytes_per_s, downlink_bytes_per_s * 0.1);
}

void TcpHub::SchedulePacer(double delay_s) {
  if (pacer_ == nullptr) {
    pacer_ = new uv_timer_t;
    uv_timer_init(loop_, pacer_);
    pacer_->data = this;
  }
  const uint64_t delay_ms = static_cast<uint64_t>(std::max(1.0, delay_s * 1000.0 + 0.5));
  const uint64_t due = uv_now(loop_) + delay_ms;
  // One timer serves both buckets and every connection: keep the earliest wake-up.
  if (pacer_armed_ && pacer_due_ms_ <= due) return;
  pacer_armed_ = true;
  pacer_due_ms_ = due;
  uv_timer_start(
      pacer_,
      [](uv_timer_t* t) {
        auto* hub = static_cast<TcpHub*>(t->data);
        if (hub != nullptr) hub->OnPacer();
      },
      delay_ms, 0);
}

void TcpHub::OnPacer() {
  pacer_armed_ = false;
  std::vector<ConnId> ids;
  for (auto& [id, c] : conns_) ids.push_back(id);
  for (ConnId id : ids) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;
    Conn* c = it->second;
    if (c->read_paused) {
      if (const double wait = down_.Delay(NowSeconds()); wait > 0) {
        SchedulePacer(wait);  // woke a little early: timers have millisecond granularity
      } else if (gate_ && !gate_()) {
        SchedulePacer(kGateRecheckS);  // the consumer is still behind
      } else {
        c->read_paused = false;
        StartReading(c);
      }
    }
    it = conns_.find(id);
    if (it != conns_.end() && it->second->connected && !it->second->pending.empty()) {
      Flush(it->second);
    }
  }
}

void TcpHub::Flush(Conn* c) {
  while (!c->pending.empty()) {
    if (const double wait = up_.Delay(NowSeconds()); wait > 0) {
      SchedulePacer(wait);
      return;
    }
    up_.Charge(NowSeconds(), static_cast<double>(kFrameHeaderBytes + c->pending.front().size()));
    auto* w = new TcpWrite;
    w->data = std::move(c->pending.front());
    c->pending.pop_front();
    w->hub = this;
    w->id = c->id;
    // Header, payload (and its tail) go out as buffers of one write: the payload (a parameter
    // chunk is ~1 MB) is not copied into a framed buffer first.
    const OutFrame& out = w->data;
    EncodeFrameHeader(out.size(), w->header);
    // libuv only reads the buffers it is given.
    uv_buf_t b[3] = {uv_buf_init(reinterpret_cast<char*>(w->header), kFrameHeaderBytes),
                     uv_buf_init(reinterpret_cast<char*>(const_cast<uint8_t*>(out.head->data())),
                                 static_cast<unsigned>(out.head->size())),
                     uv_buf_init(reinterpret_cast<char*>(const_cast<uint8_t*>(out.tail)),
                                 static_cast<unsigned>(out.tail_len))};
    const size_t n = kFrameHeaderBytes + out.size();
    int rc = uv_write(
        &w->req, reinterpret_cast<uv_stream_t*>(c->tcp), b, out.tail_len != 0 ? 3 : 2,
        [](uv_write_t* r, int status) {
          std::unique_ptr<TcpWrite> wr(reinterpret_cast<TcpWrite*>(r));
          if (status == UV_ECANCELED) return;  // connection closed under it
          auto it = wr->hub->conns_.find(wr->id);
          if (it == wr->hub->conns_.end()) return;
          Conn* conn = it->second;
          conn->writes_in_flight--;
          conn->queued_bytes -= kFrameHeaderBytes + wr->data.size();
          if (status != 0) {
            conn->hub->Finish(conn, status);
            return;
          }
          conn->hub->Touch(conn);
          if (conn->close_when_flushed && conn->writes_in_flight == 0 && conn->pending.empty()) {
            conn->hub->Finish(conn, 0);
            return;
          }
          TcpHub* hub = conn->hub;
          const ConnId id = conn->id;
          if (hub->on_drain_) {
            Guarded("tcp drain", &hub->callback_exceptions_, [&] { hub->on_drain_(id); });
          }
        });
    if (rc != 0) {
      delete w;
      Finish(c, rc);
      return;
    }
    bytes_sent_ += n;
    c->writes_in_flight++;
  }
}

void TcpHub::Close(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn* c = it->second;
  if (c->writes_in_flight == 0 && c->pending.empty()) {
    Finish(c, 0);
  } else {
    c->close_when_flushed = true;
  }
}

void TcpHub::Abort(ConnId id) {
  auto it = conns_.find(id);
  if (it != conns_.end()) Finish(it->second, 0);
}

void TcpHub::Finish(Conn* c, int status) {
  if (c->closing) return;
  c->closing = true;
  conns_.erase(c->id);
  CloseFn on_close = std::move(c->on_close);
  const ConnId id = c->id;
  // Two handles close; the Conn is freed when the second close callback runs.
  struct Pair {
    Conn* conn;
    int remaining;
  };
  auto* pair = new Pair{c, 2};
  auto done = [](uv_handle_t* h) {
    auto* p = static_cast<Pair*>(h->data);
    if (h->type == UV_TCP) {
      delete reinterpret_cast<uv_tcp_t*>(h);
    } else {
      delete reinterpret_cast<uv_timer_t*>(h);
    }
    if (--p->remaining == 0) {
      delete p->conn;
      delete p;
    }
  };
  c->tcp->data = pair;
  c->idle->data = pair;
  uv_close(reinterpret_cast<uv_handle_t*>(c->tcp), done);
  uv_close(reinterpret_cast<uv_handle_t*>(c->idle), done);
  c->tcp = nullptr;
  c->idle = nullptr;
  if (on_close) Guarded("tcp close", &callback_exceptions_, [&] { on_close(id, status); });
  if (on_closed_) Guarded("tcp close", &callback_exceptions_, [&] { on_closed_(id); });
}

void TcpHub::CloseAll() {
  if (pacer_ != nullptr) {
    CloseAndDelete(pacer_);
    pacer_ = nullptr;
  }
  for (Listener* l : listeners_) {
    l->tcp->data = nullptr;
    uv_close(reinterpret_cast<uv_handle_t*>(l->tcp),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_tcp_t*>(h); });
    delete l;
  }
  listeners_.clear();
  std::vector<Conn*> all;
  for (auto& [id, c] : conns_) all.push_back(c);
  for (Conn* c : all) {
    c->on_close = nullptr;  // shutting down: no callbacks into a dying owner
    Finish(c, 0);
  }
}

int DrainAndCloseLoop(uv_loop_t* loop) {
  uv_walk(
      loop,
      [](uv_handle_t* h, void*) {
        if (!uv_is_closing(h)) {
          // A handle nobody closed: a leak. Close it so the loop can end; the memory is lost
          // (we do not know its owner), which the sanitizer build reports.
          uv_close(h, nullptr);
        }
      },
      nullptr);
  for (int i = 0; i < 100 && uv_run(loop, UV_RUN_NOWAIT) != 0; ++i) {
  }
  return uv_loop_close(loop);
}

}  // namespace meshtrain::transport
