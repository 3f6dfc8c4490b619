// The CLI's one error path (docs/contract.md "Command line"): every subcommand ends with exit
// status 0 on success, 2 for a usage error (a bad option or value, an unreadable or malformed
// config or input file: the command was wrong and retrying it cannot help) and 1 for a runtime
// error (the agent unreachable or refusing, an RPC error, a malformed reply, an output file
// that cannot be written). Either error is one line on stderr: "error: ...".
// Thread-safety: writes to stderr.
#pragma once

#include <string>

namespace meshtrain::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

// Prints "error: MSG" and returns kExitUsage.
int UsageError(const std::string& msg);
// Prints "error: MSG" and returns kExitRuntime.
int RuntimeError(const std::string& msg);

}  // namespace meshtrain::cli
