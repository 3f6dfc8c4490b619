// The `meshtrain` subcommands (docs/contract.md "Command line"). Each Add function registers one
// subcommand and its options on the CLI11 app and returns it with the function that runs it
// once parsed; options live in static objects, so call each Add function once, from main().
// Every run function returns the process exit status of cli/exit_codes.h.
// Thread-safety: main thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace meshtrain::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// `agent`: runs an agent in the foreground (cli/agent_command.cc).
Command AddAgentCommand(CLI::App& app);

// `run`: an agent and a training script together (cli/run_command.cc). main() hands it what
// follows the first `--` (removed from args) before parsing: the command to run.
Command AddRunCommand(CLI::App& app);
void TakeRunCommand(std::vector<std::string>* args);

// Parses `meshtrain agent` options (args: what follows `agent`; --config FILE is read) into
// *config, finalised, as `meshtrain agent` would; false with a one-line *error on a usage error.
bool ParseAgentArgs(const std::vector<std::string>& args, daemon::AgentConfig* config,
                    std::string* error);

// CLI11's message for a parse error, in the configuration's own words for a refused value
// ("invalid --barrier 'x': expected ...").
std::string ParseErrorMessage(const CLI::ParseError& e);

// The clients of a running agent's RPC endpoint (cli/client_commands.cc), each with --rpc and
// --rpc-token.
Command AddJoinCommand(CLI::App& app);
Command AddLeaveCommand(CLI::App& app);
Command AddForceLeaveCommand(CLI::App& app);
Command AddMembersCommand(CLI::App& app);
Command AddStatusCommand(CLI::App& app);
Command AddKeysCommand(CLI::App& app);
Command AddMonitorCommand(CLI::App& app);
Command AddExportCommand(CLI::App& app);

}  // namespace meshtrain::cli
