// Durable checkpoints of a node's training state (docs/contract.md "Training"): task name, step,
// parameters, optimizer velocity and free-form metadata, in one file written atomically (temp file
// in the same directory, write, fsync, rename, fsync the directory) so a crash leaves either the
// old or the new file, never a torn one.
//
// File format (all integers little-endian, floats IEEE-754 binary32 little-endian):
//   header, 48 bytes:
//     0  magic "MTCKPT\0\1"           8 bytes
//     8  u32 format version (1)
//    12  u32 header size (48)
//    16  u64 payload size in bytes
//    24  u64 number of parameters
//    32  u64 number of velocity entries (0 = no optimizer state)
//    40  u32 CRC32 (zlib) of the payload
//    44  u32 CRC32 of header bytes [0, 44)
//   payload:
//     u32 task-name length, bytes; i64 step; f32 params[n]; f32 velocity[m];
//     u32 metadata count, then per entry u32 key length, key, u32 value length, value
//
// Rotation: a directory holds ckpt.bin (newest) and ckpt.prev.bin (the one before). Saving moves
// the current file to the .prev name only if it is itself valid, so a corrupt newest file never
// evicts the previous good one. LoadLatestGood falls back to .prev and reports what it skipped.
//
// Thread-safety: functions are reentrant; concurrent saves to the same path are not supported
// (one agent owns a data dir).
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "learn/status.h"

namespace meshtrain::learn {

class Task;

inline constexpr char kCheckpointFileName[] = "ckpt.bin";
inline constexpr char kPreviousCheckpointFileName[] = "ckpt.prev.bin";
inline constexpr uint32_t kCheckpointFormatVersion = 1;

struct CheckpointData {
  std::string task;  // MakeTask name, e.g. "fmnist-mlp"
  int64_t step = 0;
  Eigen::VectorXf params;
  Eigen::VectorXf velocity;  // empty when the optimizer state is not saved
  std::vector<std::pair<std::string, std::string>> metadata;  // e.g. {"node", "n1"}

  // Value of the first entry with this key, or "" when absent.
  std::string Meta(const std::string& key) const;
};

// "d/ckpt.bin" -> "d/ckpt.prev.bin"; a name without an extension gets ".prev" appended.
std::string PreviousCheckpointPath(const std::string& path);

// Writes `data` to `path` atomically, first rotating a valid existing `path` to
// PreviousCheckpointPath(path). The temp file is path + ".tmp".
Status SaveCheckpoint(const std::string& path, const CheckpointData& data);
// SaveCheckpoint(dir + "/ckpt.bin", data).
Status SaveCheckpointToDir(const std::string& dir, const CheckpointData& data);

// Reads and validates one checkpoint file. Errors (with the path in the message): NotFound,
// Corruption for bad magic, unsupported version, truncation (expected vs. got bytes), checksum
// mismatch, trailing bytes or sizes that disagree with the payload.
Result<CheckpointData> LoadCheckpoint(const std::string& path);

struct LoadedCheckpoint {
  CheckpointData data;
  std::string path;                  // the file actually used
  std::vector<std::string> skipped;  // "<path>: <why>" for each newer file that was rejected
};

// Loads dir/ckpt.bin, falling back to dir/ckpt.prev.bin when the newest is missing or invalid.
// NotFound when neither exists; otherwise Corruption listing every reason when none is valid.
Result<LoadedCheckpoint> LoadLatestGood(const std::string& dir);

// The task's name, steps, params and velocity (plus caller metadata).
CheckpointData CaptureCheckpoint(const Task& task,
                                 std::vector<std::pair<std::string, std::string>> metadata = {});

// Copies a checkpoint into a task after checking that the task name and the parameter and
// velocity sizes match (InvalidArgument otherwise; the task is left unchanged then).
Status RestoreCheckpoint(const CheckpointData& data, Task* task);

}  // namespace meshtrain::learn
