// libFuzzer target: the agent's config-file parser (daemon/config_file.h: ConfigTextArgs).
// Input: the file's contents.
// Oracles: the sanitizers and no escaping exception; a rejection has a one-line reason naming
// the file and line, in valid UTF-8; an accepted file yields "--key" flags ([a-z0-9-], never
// --config) each followed by at most one value, and every argument is valid UTF-8 without NUL
// (names, labels and addresses come from here and reach the agent's JSON output).
#include <string>
#include <vector>

#include "daemon/config_file.h"
#include "tests/fuzz/fuzz_common.h"
#include "wire/messages.h"

namespace g = meshtrain::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  std::string error;
  if (!meshtrain::daemon::ConfigTextArgs(text, "fuzz.toml", &args, &error)) {
    FUZZ_CHECK(error.rfind("fuzz.toml:", 0) == 0);
    FUZZ_CHECK(error.find('\n') == std::string::npos);
    FUZZ_CHECK(g::ValidUtf8(error));
    return 0;
  }
  bool after_flag = false;
  for (const std::string& a : args) {
    FUZZ_CHECK(g::ValidUtf8(a) && a.find('\0') == std::string::npos);
    if (a.rfind("--", 0) == 0 && a.size() > 2 &&
        a.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", 2) == std::string::npos) {
      FUZZ_CHECK(a != "--config");
      after_flag = true;
    } else {
      FUZZ_CHECK(after_flag);  // a value follows its flag
      after_flag = false;
    }
  }
  return 0;
}
