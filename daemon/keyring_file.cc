#include "daemon/keyring_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace meshtrain::daemon {

namespace {
constexpr size_t kMaxKeys = 64;
constexpr std::streamsize kMaxBytes = 16 * 1024;
}  // namespace

std::string KeyringPath(const std::string& data_dir) {
  return data_dir.empty() ? std::string() : data_dir + "/keyring";
}

Status SaveKeyring(const std::string& path, const wire::Keyring& keyring) {
  std::string text;
  for (const wire::Key& k : keyring.Keys()) text += wire::KeyToBase64(k) + "\n";
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("cannot write " + tmp + ": " + std::strerror(errno));
  fchmod(fd, 0600);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = std::strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return Status::IOError("cannot write " + tmp + ": " + err);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!synced || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    unlink(tmp.c_str());
    return Status::IOError("cannot replace " + path + ": " + err);
  }
  return Status::OK();
}

Result<std::shared_ptr<wire::Keyring>> LoadKeyring(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return Status::NotFound(path);
    return Status::IOError("cannot read " + path + ": " + std::strerror(errno));
  }
  std::string text(static_cast<size_t>(kMaxBytes) + 1, '\0');
  in.read(text.data(), kMaxBytes + 1);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxBytes)) {
    return Status::Corruption("keyring file " + path + " is larger than 16 KiB");
  }
  std::vector<wire::Key> keys;
  size_t line_no = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    line_no++;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto key = wire::ParseKeyBase64(line);
    if (!key) {
      return Status::Corruption("keyring file " + path + " line " + std::to_string(line_no) +
                                ": not a base64 32-byte key");
    }
    keys.push_back(*key);
  }
  if (keys.empty() || keys.size() > kMaxKeys) {
    return Status::Corruption("keyring file " + path + ": expected 1 to 64 keys, found " +
                              std::to_string(keys.size()));
  }
  auto ring = std::make_shared<wire::Keyring>(keys.front());
  for (size_t i = 1; i < keys.size(); ++i) ring->Install(keys[i]);
  return ring;
}

}  // namespace meshtrain::daemon
