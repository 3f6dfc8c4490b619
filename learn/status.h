// learn/ uses the project's one error type (base/status.h) under its own namespace.
#pragma once

#include "base/status.h"

namespace meshtrain::learn {

using ::meshtrain::Result;
using ::meshtrain::Status;

}  // namespace meshtrain::learn
