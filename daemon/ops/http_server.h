// The agent's HTTP endpoint (--http ADDR): GET /metrics (Prometheus text), GET /
// (the dashboard, built into the binary), GET /api/state (the dashboard's JSON). HTTP parsing
// is libmicrohttpd's, on its own thread: a slow or hostile client can hold at most its share of
// the connection limit until the connection timeout, and never blocks the agent's loop, which
// only publishes ready-made response bodies (Publish) every few hundred milliseconds.
//
// Limits: 64 connections, 16 per client address, 10 s connection timeout (slowloris), 16 KiB
// of request memory (headers beyond it get 431), GET and HEAD only (others get 405).
// Thread-safety: Publish and counters may be called from any thread; Start/Stop from one.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "wire/net_addr.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace meshtrain::daemon {

class HttpServer {
 public:
  static constexpr unsigned kMaxConnections = 64;
  static constexpr unsigned kMaxPerClient = 16;
  static constexpr unsigned kTimeoutSeconds = 10;
  static constexpr size_t kMemoryLimit = 16 * 1024;

  HttpServer();
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  Status Start(const wire::NetAddr& addr);
  void Stop();

  // The bodies served from now on.
  void Publish(std::string metrics, std::string state);
  std::map<int, uint64_t> Responses() const;  // status code -> count

  // libmicrohttpd's access handler (internal; called on its thread).
  static int Handle(void* cls, MHD_Connection* conn, const char* url, const char* method,
                    const char* version, const char* upload, size_t* upload_size, void** ctx);

 private:
  struct Bodies {
    std::string metrics;
    std::string state;
  };
  int Respond(MHD_Connection* conn, unsigned code, const std::string& type, const std::string& body,
              bool head);
  void Count(unsigned code);

  MHD_Daemon* daemon_ = nullptr;
  mutable std::mutex mu_;
  std::shared_ptr<const Bodies> bodies_;  // guarded by mu_
  std::map<int, uint64_t> responses_;     // guarded by mu_
};

}  // namespace meshtrain::daemon
