// The one error type of every meshtrain library (leveldb's Status): a Status (ok, or a code plus
// a human-readable message that names the file, option or address and the problem) and
// Result<T> (a value or a non-ok Status). Errors are values: nothing throws across a library's
// API, no "" means OK, no int codes; callers test ok() and print message() as is.
//
// Thread-safety: plain values; distinct objects may be used from different threads.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace meshtrain {

class Status {
 public:
  enum class Code { kOk = 0, kNotFound, kInvalidArgument, kCorruption, kIOError, kUnavailable };

  Status() = default;  // ok

  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status IOError(std::string msg) { return Status(Code::kIOError, std::move(msg)); }
  // A resource is busy or missing (an address in use, a peer that cannot be reached).
  static Status Unavailable(std::string msg) {
    return Status(Code::kUnavailable, std::move(msg));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  // The message alone, e.g. "checkpoint /d/ckpt.bin: checksum mismatch (...)"; "" when ok.
  const std::string& message() const { return message_; }
  // "OK" or "<code name>: <message>".
  std::string ToString() const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

// A T or the Status explaining why there is none. Constructing from an ok Status is a programming
// error and is turned into an kInvalidArgument status so the result is never "ok without value".
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design, like absl
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Status::InvalidArgument("Result constructed from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // Precondition: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace meshtrain
