// `meshtrain agent --config FILE`: the agent's options in a small TOML subset, turned into
// command-line arguments so that one parser (CLI11) validates both, and flags given on the
// command line win over the file.
//
//   # comment
//   [agent]                      (section headers are accepted and ignored)
//   name = "n1"
//   bind = "127.0.0.1:7950"
//   join = ["127.0.0.1:7960", "127.0.0.1:7970"]
//   retry-join = true            (booleans: true adds the flag, false omits it)
//   fanout = 3
//   probe_interval = 500         (underscores and dashes are the same)
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::daemon {

// Reads FILE into "--key value" arguments. False with a one-line *error (naming the file and
// line) when the file cannot be read or a line is malformed or not valid UTF-8.
bool ConfigFileArgs(const std::string& path, std::vector<std::string>* args, std::string* error);

// The parser behind ConfigFileArgs, on the file's contents; `origin` names it in errors. Every
// argument it returns is valid UTF-8 (each line is checked), and the error line never
// repeats bytes that are not. Never throws (bar std::bad_alloc).
bool ConfigTextArgs(std::string_view text, const std::string& origin,
                    std::vector<std::string>* args, std::string* error);

// Finds `--config FILE` / `--config=FILE` after the `agent` subcommand in argv and returns the
// argument list with the file's options inserted right after `agent` (before the command-line
// ones, so those take precedence). Returns argv unchanged when there is no --config.
bool ExpandAgentConfig(const std::vector<std::string>& argv, std::vector<std::string>* out,
                       std::string* error);

}  // namespace meshtrain::daemon
