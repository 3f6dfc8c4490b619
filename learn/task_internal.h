// Shared between learn/task.cc (the preset table and MakeTask) and learn/network_task.cc.
#pragma once

#include <memory>
#include <string>

#include "learn/network.h"
#include "learn/task.h"

namespace meshtrain::learn {

// A task training `spec` on Fashion-MNIST (inputs standardized when `standardize`, unless
// options.standardize_inputs says otherwise) or on options' data files. `name` is what the task
// reports (a preset name or the spec text).
Result<std::unique_ptr<Task>> MakeNetworkTask(const std::string& name, const ModelSpec& spec,
                                              bool standardize, const TaskOptions& options);

}  // namespace meshtrain::learn
