#include "cli/exit_codes.h"

#include <cstdio>

namespace meshtrain::cli {

int UsageError(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return kExitUsage;
}

int RuntimeError(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return kExitRuntime;
}

}  // namespace meshtrain::cli
