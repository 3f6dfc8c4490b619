// Fresh random cluster keys for the gossip tests.
#pragma once

#include <memory>

#include "wire/crypto.h"

namespace meshtrain::wire::testing {

inline Key NewKey() { return *ParseKeyBase64(GenerateKeyBase64()); }

inline std::shared_ptr<Keyring> MakeKeyring() { return std::make_shared<Keyring>(NewKey()); }

}  // namespace meshtrain::wire::testing
