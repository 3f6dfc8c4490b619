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
// else is a usage error, one line. A value refused by a validator reads as the configuration's
// own errors do: "invalid --barrier 'x': expected ...".
int ParseFailure(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
  std::string msg = e.what();
  const size_t colon = msg.find(": ");
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr && msg.rfind("-", 0) == 0 &&
      colon != std::string::npos) {
    const std::string rest = msg.substr(colon + 2);
    const bool quoted = !rest.empty() && (rest[0] == '\'' || rest[0] == '"');
    msg = "invalid " + msg.substr(0, colon) + (quoted ? " " : ": ") + rest;
  }
  return cli::UsageError(msg);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meshtrain: a peer-to-peer, serverless learning daemon"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");

  // In the order `meshtrain --help` lists them.
  const std::vector<cli::Command> commands = {
      cli::AddAgentCommand(app),
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

  // --config is expanded into arguments before parsing, so one parser validates both.
  std::vector<std::string> args(argv, argv + argc), expanded;
  std::string config_error;
  if (!meshtrain::daemon::ExpandAgentConfig(args, &expanded, &config_error)) {
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
