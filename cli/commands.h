// The `meshtrain` subcommands (docs/contract.md "Command line"). Each Add function registers one
// subcommand and its options on the CLI11 app and returns it with the function that runs it
// once parsed; options live in static objects, so call each Add function once, from main().
// Every run function returns the process exit status of cli/exit_codes.h.
// Thread-safety: main thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace meshtrain::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// `agent`: runs an agent in the foreground (cli/agent_command.cc).
Command AddAgentCommand(CLI::App& app);

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
