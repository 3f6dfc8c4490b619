#include "daemon/ops/metrics.h"

#include <cerrno>
#include <cstring>

#include "daemon/ops/json_text.h"

namespace meshtrain::daemon {

MetricsLog::~MetricsLog() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr) std::fclose(file_);
}

Status MetricsLog::Open(const std::string& path) {
  if (path.empty()) return Status::OK();
  std::lock_guard<std::mutex> lock(mu_);
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    return Status::IOError("cannot open metrics file '" + path + "': " + std::strerror(errno));
  }
  return Status::OK();
}

double MetricsLog::Elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void MetricsLog::Write(const std::string& event, nlohmann::json fields) {
  if (!fields.is_object()) fields = {{"value", std::move(fields)}};  // operator[] would throw
  fields["t"] = Elapsed();
  fields["event"] = event;
  const std::string line = JsonText(fields) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace meshtrain::daemon
