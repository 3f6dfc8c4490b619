// `meshtrain simulate` (docs/contract.md "Simulator"): registers the subcommand and its options on
// the CLI11 app, and runs the PSP simulator (sim/psp_sim.h) once per requested barrier
// configuration, printing a summary table (or JSON), and optionally a per-node CSV and an SVG plot.
//
// Usage from main():
//   CLI::App* sim = meshtrain::cli::AddSimulateCommand(app);
//   ...  CLI11_PARSE(app, argc, argv);
//   if (sim->parsed()) return meshtrain::cli::RunSimulateCommand();
//
// Thread-safety: the parsed options live in one static object; call both functions from the
// main thread only, AddSimulateCommand once.
#pragma once

#include <CLI/CLI.hpp>

namespace meshtrain::cli {

// Adds the `simulate` subcommand with its options to `app` and returns it.
CLI::App* AddSimulateCommand(CLI::App& app);

// Runs the simulations for the parsed options; returns the process exit code (cli/exit_codes.h:
// 0 on success, 2 with a one-line error on stderr for invalid options, 1 for output files that
// cannot be written).
int RunSimulateCommand();

}  // namespace meshtrain::cli
