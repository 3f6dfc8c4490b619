#include "base/status.h"

namespace meshtrain {

std::string Status::ToString() const {
  const char* name = "OK";
  switch (code_) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      name = "NotFound";
      break;
    case Code::kInvalidArgument:
      name = "InvalidArgument";
      break;
    case Code::kCorruption:
      name = "Corruption";
      break;
    case Code::kIOError:
      name = "IOError";
      break;
    case Code::kUnavailable:
      name = "Unavailable";
      break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace meshtrain
