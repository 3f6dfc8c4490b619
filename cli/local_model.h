// `meshtrain train` (one process, no mesh: a baseline and its samples/s figure) and
// `meshtrain evaluate --model FILE` (a model file's accuracy and loss on a test set). Options live
// in static objects: call the Add functions once from main() and the Run functions after parsing.
// Both exit 2 with one `error:` line for bad options, files or models.
#pragma once

#include <CLI/CLI.hpp>

namespace meshtrain::cli {

CLI::App* AddTrainCommand(CLI::App& app);
int RunTrainCommand();
CLI::App* AddEvaluateCommand(CLI::App& app);
int RunEvaluateCommand();

}  // namespace meshtrain::cli
