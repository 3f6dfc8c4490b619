// The `meshtrain` executable: Serf-style subcommands (docs/contract.md "Command line"). `agent`
// runs the daemon in the foreground (cli/agent_command.cc); the clients talk to a running agent
// over its RPC endpoint (cli/client_commands.cc); simulate, train and evaluate run locally.
// Every subcommand exits as cli/exit_codes.h says: 0, 2 for a usage error, 1 for a runtime error.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/local_model.h"
#include "cli/simulate.h"
#include "daemon/config_file.h"
#include "wire/crypto.h"

namespace {

namespace cli = meshtrain::cli;

cli::Command AddKeygenCommand(CLI::App& app) {
  return {app.add_subcommand("keygen", "Print a new base64 32-byte cluster key"), [] {
            std::printf("%s\n", meshtrain::wire::GenerateKeyBase64().c_str());
            return cli::kExitOk;
          }};
}

cli::Command AddVersionCommand(CLI::App& app) {
  return {app.add_subcommand("version", "Print the version"), [] {
            std::printf("meshtrain %s (protocol 1)\n", MESHTRAIN_VERSION);
            return cli::kExitOk;
          }};
}

// A command-line error from CLI11: --help (and --help-all) print the help and exit 0; anything
// else is a usage error, one line.
int ParseFailure(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
  return cli::UsageError(cli::ParseErrorMessage(e));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meshtrain: a peer-to-peer, serverless learning daemon"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");

  // In the order `meshtrain --help` lists them.
  const std::vector<cli::Command> commands = {
      cli::AddAgentCommand(app),
      cli::AddRunCommand(app),
      cli::AddJoinCommand(app),
      cli::AddLeaveCommand(app),
      cli::AddForceLeaveCommand(app),
      cli::AddMembersCommand(app),
      cli::AddStatusCommand(app),
      AddKeygenCommand(app),
      cli::AddKeysCommand(app),
      cli::AddMonitorCommand(app),
      AddVersionCommand(app),
      {cli::AddSimulateCommand(app), cli::RunSimulateCommand},
      {cli::AddTrainCommand(app), cli::RunTrainCommand},
      {cli::AddEvaluateCommand(app), cli::RunEvaluateCommand},
      cli::AddExportCommand(app),
  };

  // --config is expanded into arguments before parsing, so one parser validates both; `run`
  // passes its agent options (--config included) on, and its command is not parsed.
  std::vector<std::string> args(argv, argv + argc), expanded;
  std::string config_error;
  if (args.size() > 1 && args[1] == "run") {
    cli::TakeRunCommand(&args);
    expanded = args;
  } else if (!meshtrain::daemon::ExpandAgentConfig(args, &expanded, &config_error)) {
    return cli::UsageError(config_error);
  }
  std::vector<std::string> reversed(expanded.rbegin(), expanded.rend() - 1);
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, e);
  }
  for (const cli::Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return cli::kExitOk;
}
