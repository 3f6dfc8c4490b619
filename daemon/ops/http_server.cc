#include "daemon/ops/http_server.h"

#include <microhttpd.h>

#include <cstring>

#include "daemon/ops/dashboard.h"

namespace meshtrain::daemon {

namespace {
MHD_Result Trampoline(void* cls, MHD_Connection* conn, const char* url, const char* method,
                      const char* version, const char* upload, size_t* upload_size, void** ctx) {
  return HttpServer::Handle(cls, conn, url, method, version, upload, upload_size, ctx) == MHD_YES
             ? MHD_YES
             : MHD_NO;
}
}  // namespace

HttpServer::HttpServer() : bodies_(std::make_shared<Bodies>()) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start(const wire::NetAddr& addr) {
  wire::NetAddr sa = addr;
  const unsigned v6 = addr.family() == AF_INET6 ? MHD_USE_IPv6 : 0;
  daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | v6, addr.port(),
                             nullptr, nullptr, &Trampoline, this, MHD_OPTION_SOCK_ADDR, &sa.sa.base,
                             MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
                             MHD_OPTION_PER_IP_CONNECTION_LIMIT, kMaxPerClient,
                             MHD_OPTION_CONNECTION_TIMEOUT, kTimeoutSeconds,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, kMemoryLimit, MHD_OPTION_END);
  if (daemon_ == nullptr) {
    return Status::Unavailable("cannot serve HTTP on " + addr.ToString() + ": " +
                               std::strerror(errno) + " (is the port in use?)");
  }
  return Status::OK();
}

void HttpServer::Stop() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

void HttpServer::Publish(std::string metrics, std::string state) {
  auto b = std::make_shared<Bodies>();
  b->metrics = std::move(metrics);
  b->state = std::move(state);
  std::lock_guard<std::mutex> lock(mu_);
  bodies_ = std::move(b);
}

std::map<int, uint64_t> HttpServer::Responses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return responses_;
}

void HttpServer::Count(unsigned code) {
  std::lock_guard<std::mutex> lock(mu_);
  responses_[static_cast<int>(code)]++;
}

int HttpServer::Respond(MHD_Connection* conn, unsigned code, const std::string& type,
                        const std::string& body, bool head) {
  MHD_Response* r = MHD_create_response_from_buffer(
      head ? 0 : body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", type.c_str());
  MHD_add_response_header(r, "Cache-Control", "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, "Allow", "GET, HEAD");
  const int rc = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  Count(code);
  return rc;
}

int HttpServer::Handle(void* cls, MHD_Connection* conn, const char* url, const char* method,
                       const char* /*version*/, const char* /*upload*/, size_t* upload_size,
                       void** ctx) {
  auto* self = static_cast<HttpServer*>(cls);
  const bool get = std::strcmp(method, "GET") == 0;
  const bool head = std::strcmp(method, "HEAD") == 0;
  if (!get && !head) {
    // Answer at once; a request body, if any, is discarded unread.
    *upload_size = 0;
    return self->Respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8",
                         "method not allowed: GET or HEAD\n", false);
  }
  if (*ctx == nullptr) {  // first call: headers only; answer on the next call
    *ctx = self;
    return MHD_YES;
  }
  if (*upload_size != 0) {  // a GET with a body: ignore the body
    *upload_size = 0;
    return MHD_YES;
  }
  std::shared_ptr<const Bodies> b;
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    b = self->bodies_;
  }
  const std::string path = url;
  if (path == "/metrics") {
    return self->Respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b->metrics,
                         head);
  }
  if (path == "/api/state") {
    return self->Respond(conn, MHD_HTTP_OK, "application/json", b->state, head);
  }
  if (path == "/" || path == "/index.html") {
    return self->Respond(conn, MHD_HTTP_OK, "text/html; charset=utf-8", DashboardHtml(), head);
  }
  return self->Respond(conn, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", "not found\n", head);
}

}  // namespace meshtrain::daemon
