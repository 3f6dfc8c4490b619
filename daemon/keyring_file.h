// The cluster keyring persisted in --data-dir: `<data-dir>/keyring`, one base64 key
// per line, primary first, mode 0600, replaced atomically (write, fsync, rename) after every
// change a `meshtrain keys` rotation makes, so a rotation survives a restart. As in Serf, an
// existing keyring file takes precedence over --encrypt at start.
// Thread-safety: free functions; callers serialize writes (the loop thread).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "wire/crypto.h"

namespace meshtrain::daemon {

std::string KeyringPath(const std::string& data_dir);  // "" when data_dir is empty

// Writes `keyring` to `path` (0600, atomic). IOError on failure.
Status SaveKeyring(const std::string& path, const wire::Keyring& keyring);

// Reads a keyring file: NotFound when there is none, Corruption (one line, naming the file and
// line) when it is not 1..64 lines of base64 32-byte keys.
Result<std::shared_ptr<wire::Keyring>> LoadKeyring(const std::string& path);

}  // namespace meshtrain::daemon
