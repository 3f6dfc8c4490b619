// What the agent prepares before it binds anything: the metrics file, the cluster key, the
// --data-dir and the peers to rejoin from its snapshot.
// Thread-safety: call once, before the loop runs.
#pragma once

#include <memory>

#include "daemon/config.h"
#include "daemon/ops/metrics.h"
#include "learn/status.h"
#include "wire/crypto.h"

namespace meshtrain::daemon {

// Opens the metrics file, parses --encrypt into *keyring (left null without a key), creates
// --data-dir and appends the addresses of its peer snapshot to config->join. An error names the
// option and the problem.
learn::Status PrepareAgent(AgentConfig* config, MetricsLog* metrics,
                           std::shared_ptr<wire::Keyring>* keyring);

}  // namespace meshtrain::daemon
