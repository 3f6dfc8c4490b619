// libuv transports: a UDP endpoint for membership datagrams, a TCP hub for length-prefixed
// frames (push-pull, parameter transfers, RPC), and small timer/async/signal wrappers.
//
// Ownership follows libuv's rules: every uv handle is heap-allocated, closed with uv_close, and
// freed only in its close callback; the C++ wrapper objects may be destroyed after Close()
// even while the close is still pending. Each handle's `data` is cleared on Close() so a late
// libuv callback cannot reach a dead wrapper.
//
// No exception leaves a libuv callback: every user handler (UDP receive, TCP frame and
// close, timer, async, signal) runs inside a boundary that catches std::exception and anything
// else, counts it (CallbackExceptions(), and per endpoint/hub), reports it through the optional
// error hook, and keeps the loop running. A TCP frame handler that throws has its connection
// aborted (status kHandlerError): its state can no longer be trusted.
//
// Thread-safety: everything here must be used from the loop thread, except Async::Send.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "transport/rate_limit.h"
#include "wire/framing.h"
#include "wire/net_addr.h"

namespace meshtrain::transport {

using ::meshtrain::Status;
using wire::BigFrame;
using wire::FrameDecoder;
using wire::NetAddr;

using Bytes = std::vector<uint8_t>;

// Milliseconds on the loop's monotonic clock.
int64_t LoopNowMs(uv_loop_t* loop);

// Exceptions caught at the libuv boundary since the process started (all loops, all threads).
uint64_t CallbackExceptions();
// Called with where it happened ("udp recv", "tcp frame", ...), the exception's what() and the
// running count, for the 1st, 2nd, 4th, 8th, ... exception (so a hostile peer cannot flood the
// log). It runs on the thread whose loop caught the exception; exceptions it throws are
// swallowed. Set it once, before any loop runs (the daemon logs through spdlog; gossip itself
// has no logger). Empty: count only.
using CallbackErrorHook = std::function<void(const char* where, const char* what, uint64_t count)>;
void SetCallbackErrorHook(CallbackErrorHook hook);

class Timer {
 public:
  explicit Timer(uv_loop_t* loop);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // (Re)arms the timer: fn runs once after `delay_ms`, then every `repeat_ms` if > 0.
  void Start(int64_t delay_ms, std::function<void()> fn, int64_t repeat_ms = 0);
  void Stop();
  void Close();  // idempotent

 private:
  uv_timer_t* handle_;
  std::function<void()> fn_;
};

// Wakes the loop thread from any thread; fn runs on the loop thread (coalesced).
class Async {
 public:
  Async(uv_loop_t* loop, std::function<void()> fn);
  ~Async();
  Async(const Async&) = delete;
  Async& operator=(const Async&) = delete;
  void Send();   // thread-safe
  void Close();  // idempotent, loop thread only

 private:
  uv_async_t* handle_;
  std::function<void()> fn_;
};

class Signal {
 public:
  Signal(uv_loop_t* loop, int signum, std::function<void()> fn);
  ~Signal();
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;
  void Close();

 private:
  uv_signal_t* handle_;
  std::function<void()> fn_;
};

class UdpEndpoint {
 public:
  // Called for every datagram; `from` is the source address.
  using RecvFn = std::function<void(const uint8_t* data, size_t len, const NetAddr& from)>;

  explicit UdpEndpoint(uv_loop_t* loop);
  ~UdpEndpoint();
  UdpEndpoint(const UdpEndpoint&) = delete;
  UdpEndpoint& operator=(const UdpEndpoint&) = delete;

  // Binds and starts receiving. Returns 0 or a libuv error code (see uv_strerror).
  Status Bind(const NetAddr& addr, RecvFn on_recv);
  // Sends one datagram (copied into the request). False if the send could not be queued.
  bool Send(const NetAddr& to, Bytes data);
  void Close();  // idempotent

  uint64_t datagrams_sent() const { return sent_; }
  uint64_t datagrams_received() const { return received_; }
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }
  uint64_t callback_exceptions() const { return callback_exceptions_; }
  // The kernel's receive timestamp (CLOCK_REALTIME, ns) of the datagram being delivered: valid
  // inside the receive callback only (SIOCGSTAMPNS; the time of the call if it is unavailable).
  int64_t ReceiveTimestampNs() const;

 private:
  static void OnRecv(uv_udp_t* h, ssize_t nread, const uv_buf_t* buf, const sockaddr* addr,
                     unsigned flags);
  uv_udp_t* handle_;
  int family_ = AF_INET;  // of the bound address: IPv4 peers of an IPv6 socket are mapped
  RecvFn on_recv_;
  uint64_t sent_ = 0, received_ = 0, bytes_sent_ = 0, bytes_received_ = 0;
  uint64_t callback_exceptions_ = 0;
};

struct TcpOptions {
  size_t max_frame_bytes = 1 << 20;  // larger length prefixes close the connection
  size_t max_connections = 256;      // accepted beyond this are closed at once
  int64_t idle_timeout_ms = 30000;   // no bytes in either direction for this long: close
};

// A frame payload to send: `head`, then `tail_len` bytes at `tail` that `tail_owner` keeps alive
// (a plain parameter chunk's floats, sent from the snapshot they lie in without a copy).
struct OutFrame {
  std::shared_ptr<const Bytes> head;
  const uint8_t* tail = nullptr;
  size_t tail_len = 0;
  std::shared_ptr<const void> tail_owner;
  size_t size() const { return (head ? head->size() : 0) + tail_len; }
};

// A set of TCP connections speaking length-prefixed frames (4-byte big-endian length).
// Connections are identified by ConnId (never reused); a closed id is simply ignored.
class TcpHub {
 public:
  using ConnId = uint64_t;
  using FrameFn = std::function<void(ConnId, Bytes&& payload)>;
  // Takes a large frame (FrameDecoder::kDirectBytes or more) in the buffer it was read into.
  using BigFrameFn = std::function<void(ConnId, BigFrame&& frame)>;
  // status 0 = orderly close (ours or the peer's EOF); otherwise a libuv error code, or
  // kFramingError / kIdleTimeout / kTooManyConnections.
  using CloseFn = std::function<void(ConnId, int status)>;
  static constexpr int kFramingError = -100001;
  static constexpr int kIdleTimeout = -100002;
  static constexpr int kTooManyConnections = -100003;
  static constexpr int kHandlerError = -100004;  // the frame handler threw

  TcpHub(uv_loop_t* loop, TcpOptions options);
  ~TcpHub();
  TcpHub(const TcpHub&) = delete;
  TcpHub& operator=(const TcpHub&) = delete;

  // Listens on addr; frames from accepted connections go to on_frame. Returns 0 or a uv error.
  // With on_big, large frames go there as read instead of being copied out for on_frame.
  Status Listen(const NetAddr& addr, FrameFn on_frame, CloseFn on_close = nullptr,
                BigFrameFn on_big = nullptr);
  // Starts a connection; Send() may be called at once (writes queue until connected).
  ConnId Connect(const NetAddr& addr, FrameFn on_frame, CloseFn on_close);
  // Queues one frame. False if the connection is unknown or closing.
  bool Send(ConnId id, Bytes payload);
  // The same for a payload shared with other connections (sent as is, never copied).
  bool Send(ConnId id, std::shared_ptr<const Bytes> payload);
  // The same for a payload in two pieces (OutFrame: neither is copied).
  bool Send(ConnId id, OutFrame frame);
  // Bytes queued on `id` and not yet handed to the kernel (frames and their headers).
  size_t QueuedBytes(ConnId id) const;
  // Called after every completed write of a connection that stays open (a producer that keeps
  // QueuedBytes() bounded sends its next frames then), and after any connection closed.
  void SetDrainObserver(std::function<void(ConnId)> fn) { on_drain_ = std::move(fn); }
  void SetCloseObserver(std::function<void(ConnId)> fn) { on_closed_ = std::move(fn); }
  // Closes once queued writes have flushed (graceful); Abort closes at once.
  void Close(ConnId id);
  void Abort(ConnId id);
  void CloseAll();  // listeners and connections; idempotent

  // Caps this hub's traffic (bytes per second, <= 0 = none): outgoing frames are paced, and
  // reading pauses while the downlink bucket is in debt (the sender's TCP window then throttles
  // it). Applies to all connections of the hub.
  void SetRateLimits(double uplink_bytes_per_s, double downlink_bytes_per_s);
  // A consumer's backpressure: while `open()` is false, connections stop reading after the
  // frames in hand (the data waits in the kernel's socket buffers and TCP's window holds the
  // sender back) and look again every kGateRecheckS. Called on the loop thread; keep it cheap.
  static constexpr double kGateRecheckS = 0.005;
  void SetReadGate(std::function<bool()> open) { gate_ = std::move(open); }
  uint64_t gate_pauses() const { return gate_pauses_; }

  size_t num_connections() const { return conns_.size(); }
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }
  uint64_t framing_errors() const { return framing_errors_; }
  uint64_t refused_connections() const { return refused_; }
  uint64_t callback_exceptions() const { return callback_exceptions_; }

 private:
  struct Conn;
  struct Listener;
  Conn* NewConn(FrameFn on_frame, CloseFn on_close);
  void StartReading(Conn* c);
  void Flush(Conn* c);
  void Finish(Conn* c, int status);
  void Touch(Conn* c);
  void SchedulePacer(double delay_s);
  void OnPacer();
  double NowSeconds() const;
  // A large frame's payload is read straight into its buffer (FrameDecoder::Space).
  static void AllocRead(uv_handle_t* h, size_t suggested, uv_buf_t* buf);
  static void OnRead(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf);

  TokenBucket up_{0, 0};
  TokenBucket down_{0, 0};
  std::function<bool()> gate_;
  uint64_t gate_pauses_ = 0;
  uv_timer_t* pacer_ = nullptr;
  bool pacer_armed_ = false;
  uint64_t pacer_due_ms_ = 0;  // loop time the armed pacer fires at

  uv_loop_t* loop_;
  TcpOptions options_;
  std::function<void(ConnId)> on_drain_, on_closed_;
  ConnId next_id_ = 1;
  std::unordered_map<ConnId, Conn*> conns_;
  std::vector<Listener*> listeners_;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0, framing_errors_ = 0, refused_ = 0;
  uint64_t callback_exceptions_ = 0;
};

// Closes every handle still open on the loop and runs it until they are gone. Returns the
// result of uv_loop_close (0 when nothing leaked).
int DrainAndCloseLoop(uv_loop_t* loop);

}  // namespace meshtrain::transport
