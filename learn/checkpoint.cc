#include "learn/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "learn/task.h"

namespace meshtrain::learn {
namespace {

constexpr char kMagic[8] = {'M', 'T', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr size_t kHeaderSize = 48;
// Refuse absurd sizes from a corrupt header before allocating (4 GiB of floats).
constexpr uint64_t kMaxPayload = uint64_t{1} << 32;

uint32_t Crc32(const uint8_t* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, data, chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

void Put32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void Put64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutBytes(std::vector<uint8_t>* out, const std::string& s) {
  Put32(out, static_cast<uint32_t>(s.size()));
  out->insert(out->end(), s.begin(), s.end());
}
void PutFloats(std::vector<uint8_t>* out, const Eigen::VectorXf& v) {
  for (Eigen::Index i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    Put32(out, bits);
  }
}
uint32_t Get32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
uint64_t Get64(const uint8_t* p) { return uint64_t{Get32(p)} | (uint64_t{Get32(p + 4)} << 32); }

// Bounds-checked reader over the payload; every failure is a size disagreement.
class PayloadReader {
 public:
  PayloadReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool U32(uint32_t* v) {
    if (n_ - pos_ < 4) return false;
    *v = Get32(p_ + pos_);
    pos_ += 4;
    return true;
  }
  bool U64(uint64_t* v) {
    if (n_ - pos_ < 8) return false;
    *v = Get64(p_ + pos_);
    pos_ += 8;
    return true;
  }
  bool Bytes(std::string* s) {
    uint32_t len;
    if (!U32(&len) || n_ - pos_ < len) return false;
    s->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return true;
  }
  bool Floats(uint64_t count, Eigen::VectorXf* v) {
    if ((n_ - pos_) / 4 < count) return false;
    v->resize(static_cast<Eigen::Index>(count));
    for (uint64_t i = 0; i < count; ++i) {
      const uint32_t bits = Get32(p_ + pos_ + 4 * i);
      std::memcpy(&(*v)[static_cast<Eigen::Index>(i)], &bits, 4);
    }
    pos_ += 4 * count;
    return true;
  }
  bool AtEnd() const { return pos_ == n_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

std::string Errno() { return std::strerror(errno); }

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Status WriteAll(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("checkpoint " + path + ": write failed: " + Errno());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("checkpoint dir " + dir + ": open failed: " + Errno());
  const int rc = ::fsync(fd);
  const std::string err = rc != 0 ? Errno() : "";
  ::close(fd);
  if (rc != 0) return Status::IOError("checkpoint dir " + dir + ": fsync failed: " + err);
  return Status::OK();
}

Status ReadFile(const std::string& path, std::vector<uint8_t>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("checkpoint " + path + ": not found");
    return Status::IOError("checkpoint " + path + ": open failed: " + Errno());
  }
  out->clear();
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      const std::string err = Errno();
      ::close(fd);
      return Status::IOError("checkpoint " + path + ": read failed: " + err);
    }
    if (r == 0) break;
    out->insert(out->end(), buf, buf + r);
  }
  ::close(fd);
  return Status::OK();
}

}  // namespace

std::string CheckpointData::Meta(const std::string& key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return v;
  }
  return "";
}

std::string PreviousCheckpointPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1)) {
    return path + ".prev";
  }
  return path.substr(0, dot) + ".prev" + path.substr(dot);
}

Status SaveCheckpoint(const std::string& path, const CheckpointData& data) {
  std::vector<uint8_t> payload;
  payload.reserve(64 + data.task.size() +
                  4 * static_cast<size_t>(data.params.size() + data.velocity.size()));
  PutBytes(&payload, data.task);
  Put64(&payload, static_cast<uint64_t>(data.step));
  PutFloats(&payload, data.params);
  PutFloats(&payload, data.velocity);
  Put32(&payload, static_cast<uint32_t>(data.metadata.size()));
  for (const auto& [k, v] : data.metadata) {
    PutBytes(&payload, k);
    PutBytes(&payload, v);
  }

  std::vector<uint8_t> header(kMagic, kMagic + sizeof(kMagic));
  Put32(&header, kCheckpointFormatVersion);
  Put32(&header, kHeaderSize);
  Put64(&header, payload.size());
  Put64(&header, static_cast<uint64_t>(data.params.size()));
  Put64(&header, static_cast<uint64_t>(data.velocity.size()));
  Put32(&header, Crc32(payload.data(), payload.size()));
  Put32(&header, Crc32(header.data(), header.size()));

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("checkpoint " + tmp + ": create failed: " + Errno());
  Status s = WriteAll(fd, header.data(), header.size(), tmp);
  if (s.ok()) s = WriteAll(fd, payload.data(), payload.size(), tmp);
  if (s.ok() && ::fsync(fd) != 0)
    s = Status::IOError("checkpoint " + tmp + ": fsync failed: " + Errno());
  if (::close(fd) != 0 && s.ok()) {
    s = Status::IOError("checkpoint " + tmp + ": close failed: " + Errno());
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }

  // Keep the previous checkpoint only if it is good: never evict a valid .prev with garbage.
  if (Exists(path) && LoadCheckpoint(path).ok()) {
    const std::string prev = PreviousCheckpointPath(path);
    if (::rename(path.c_str(), prev.c_str()) != 0) {
      const Status err =
          Status::IOError("checkpoint " + path + ": rotate to " + prev + " failed: " + Errno());
      ::unlink(tmp.c_str());
      return err;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status err =
        Status::IOError("checkpoint " + tmp + ": rename to " + path + " failed: " + Errno());
    ::unlink(tmp.c_str());
    return err;
  }
  return FsyncDir(DirName(path));
}

Status SaveCheckpointToDir(const std::string& dir, const CheckpointData& data) {
  return SaveCheckpoint(dir + "/" + kCheckpointFileName, data);
}

Result<CheckpointData> LoadCheckpoint(const std::string& path) {
  std::vector<uint8_t> bytes;
  if (Status s = ReadFile(path, &bytes); !s.ok()) return s;
  const std::string where = "checkpoint " + path + ": ";
  if (bytes.size() < kHeaderSize) {
    if (bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
      return Status::Corruption(where + "bad magic (not a meshtrain checkpoint)");
    }
    return Status::Corruption(where + "truncated (expected at least " +
                              std::to_string(kHeaderSize) + " header bytes, got " +
                              std::to_string(bytes.size()) + ")");
  }
  const uint8_t* h = bytes.data();
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption(where + "bad magic (not a meshtrain checkpoint)");
  }
  const uint32_t version = Get32(h + 8);
  if (version != kCheckpointFormatVersion) {
    return Status::Corruption(where + "unsupported format version " + std::to_string(version) +
                              " (this build reads " + std::to_string(kCheckpointFormatVersion) +
                              ")");
  }
  if (Get32(h + 44) != Crc32(h, 44)) {
    return Status::Corruption(where + "header checksum mismatch");
  }
  if (Get32(h + 12) != kHeaderSize) {
    return Status::Corruption(where + "wrong header size " + std::to_string(Get32(h + 12)));
  }
  const uint64_t payload_size = Get64(h + 16);
  const uint64_t num_params = Get64(h + 24);
  const uint64_t num_velocity = Get64(h + 32);
  if (payload_size > kMaxPayload) {
    return Status::Corruption(where + "implausible payload size " + std::to_string(payload_size));
  }
  const uint64_t have = bytes.size() - kHeaderSize;
  if (have < payload_size) {
    return Status::Corruption(where + "truncated (expected " +
                              std::to_string(kHeaderSize + payload_size) + " bytes, got " +
                              std::to_string(bytes.size()) + ")");
  }
  if (have > payload_size) {
    return Status::Corruption(where + std::to_string(have - payload_size) +
                              " trailing bytes after the payload");
  }
  const uint8_t* payload = h + kHeaderSize;
  const uint32_t want_crc = Get32(h + 40);
  const uint32_t got_crc = Crc32(payload, payload_size);
  if (want_crc != got_crc) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "(stored %08x, computed %08x)", want_crc, got_crc);
    return Status::Corruption(where + "checksum mismatch " + buf);
  }

  CheckpointData data;
  PayloadReader r(payload, payload_size);
  uint64_t step = 0;
  uint32_t meta_count = 0;
  const auto sizes_error = [&](const char* what) {
    return Status::Corruption(where + "wrong sizes: " + what + " (header says " +
                              std::to_string(num_params) + " params, " +
                              std::to_string(num_velocity) + " velocity, payload " +
                              std::to_string(payload_size) + " bytes)");
  };
  if (!r.Bytes(&data.task)) return sizes_error("task name overruns the payload");
  if (!r.U64(&step)) return sizes_error("step overruns the payload");
  data.step = static_cast<int64_t>(step);
  if (!r.Floats(num_params, &data.params)) return sizes_error("params overrun the payload");
  if (!r.Floats(num_velocity, &data.velocity)) return sizes_error("velocity overruns the payload");
  if (!r.U32(&meta_count)) return sizes_error("metadata count overruns the payload");
  for (uint32_t i = 0; i < meta_count; ++i) {
    std::string k, v;
    if (!r.Bytes(&k) || !r.Bytes(&v)) return sizes_error("metadata overruns the payload");
    data.metadata.emplace_back(std::move(k), std::move(v));
  }
  if (!r.AtEnd()) return sizes_error("payload has unparsed bytes");
  return data;
}

Result<LoadedCheckpoint> LoadLatestGood(const std::string& dir) {
  LoadedCheckpoint out;
  bool any_exists = false;
  for (const char* name : {kCheckpointFileName, kPreviousCheckpointFileName}) {
    const std::string path = dir + "/" + name;
    Result<CheckpointData> r = LoadCheckpoint(path);
    if (r.ok()) {
      out.data = std::move(r).value();
      out.path = path;
      return out;
    }
    if (!r.status().IsNotFound()) any_exists = true;
    out.skipped.push_back(r.status().message());
  }
  std::string why;
  for (const std::string& s : out.skipped) why += (why.empty() ? "" : "; ") + s;
  if (!any_exists) return Status::NotFound("no checkpoint in " + dir + " (" + why + ")");
  return Status::Corruption("no valid checkpoint in " + dir + ": " + why);
}

CheckpointData CaptureCheckpoint(const Task& task,
                                 std::vector<std::pair<std::string, std::string>> metadata) {
  CheckpointData data;
  data.task = task.name();
  data.step = task.steps();
  data.params = task.params();
  data.velocity = task.optimizer().velocity();
  data.metadata = std::move(metadata);
  return data;
}

Status RestoreCheckpoint(const CheckpointData& data, Task* task) {
  if (data.task != task->name()) {
    return Status::InvalidArgument("checkpoint is for task \"" + data.task + "\", not \"" +
                                   task->name() + "\"");
  }
  if (static_cast<size_t>(data.params.size()) != task->num_params()) {
    return Status::InvalidArgument("checkpoint has " + std::to_string(data.params.size()) +
                                   " parameters, task " + task->name() + " has " +
                                   std::to_string(task->num_params()));
  }
  if (data.velocity.size() != 0 && data.velocity.size() != data.params.size()) {
    return Status::InvalidArgument("checkpoint velocity has " +
                                   std::to_string(data.velocity.size()) + " entries for " +
                                   std::to_string(data.params.size()) + " parameters");
  }
  task->params() = data.params;
  if (data.velocity.size() != 0) {
    task->optimizer().velocity() = data.velocity;
  } else {
    task->optimizer().ResetVelocity();
  }
  task->set_steps(data.step);
  return Status::OK();
}

}  // namespace meshtrain::learn
