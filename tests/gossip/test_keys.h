// Fresh random cluster keys for the gossip tests.
#pragma once

#include <memory>

#include "gossip/crypto.h"

namespace meshtrain::gossip::testing {

inline Key NewKey() { return *ParseKeyBase64(GenerateKeyBase64()); }

inline std::shared_ptr<Keyring> MakeKeyring() { return std::make_shared<Keyring>(NewKey()); }

}  // namespace meshtrain::gossip::testing
