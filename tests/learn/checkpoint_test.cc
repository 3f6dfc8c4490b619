// Checkpoint round trips, atomic rotation and fallback to the previous good file (docs/contract.md
// "Training").
#include "learn/checkpoint.h"

#include <zlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <vector>

#include "learn/mixing.h"
#include "learn/task.h"
#include "tests/learn/test_util.h"

namespace meshtrain::learn {
namespace {

using testing::Contains;
using testing::TempDir;

CheckpointData Sample(int64_t step, float base) {
  CheckpointData d;
  d.task = "synthetic";
  d.step = step;
  d.params = Eigen::VectorXf::LinSpaced(33, base, base + 1);
  d.velocity = Eigen::VectorXf::Constant(33, -base);
  d.metadata = {{"node", "n1"}, {"data_seed", "7"}};
  return d;
}

std::vector<char> Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void Write(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_CASE("checkpoint round trip", "[learn][checkpoint]") {
  TempDir dir;
  const std::string path = dir.File("ckpt.bin");
  const CheckpointData in = Sample(812, 0.5f);
  REQUIRE(SaveCheckpoint(path, in).ok());
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  auto out = LoadCheckpoint(path);
  INFO(out.status().ToString());
  REQUIRE(out.ok());
  CHECK(out->task == "synthetic");
  CHECK(out->step == 812);
  CHECK(out->params == in.params);
  CHECK(out->velocity == in.velocity);
  CHECK(out->metadata == in.metadata);
  CHECK(out->Meta("node") == "n1");
  CHECK(out->Meta("absent").empty());
  CHECK(std::filesystem::file_size(path) == 48 + 4 + 9 + 8 + 33 * 4 * 2 + 4 + (8 + 6) + (8 + 10));

  // Empty velocity and metadata are fine too.
  CheckpointData bare;
  bare.task = "x";
  bare.params = Eigen::VectorXf::Ones(3);
  REQUIRE(SaveCheckpoint(dir.File("bare.bin"), bare).ok());
  auto bare_out = LoadCheckpoint(dir.File("bare.bin"));
  REQUIRE(bare_out.ok());
  CHECK(bare_out->velocity.size() == 0);
}

TEST_CASE("checkpoint capture and restore a task, resuming identically", "[learn][checkpoint]") {
  TempDir dir;
  TaskOptions options;
  auto a = MakeTask("synthetic", options);
  REQUIRE(a.ok());
  for (int i = 0; i < 5; ++i) (*a)->Step();
  REQUIRE(SaveCheckpointToDir(dir.path(), CaptureCheckpoint(**a, {{"node", "n1"}})).ok());

  options.init_seed = 99;  // a different start: everything must come from the checkpoint
  auto b = MakeTask("synthetic", options);
  REQUIRE(b.ok());
  auto loaded = LoadLatestGood(dir.path());
  REQUIRE(loaded.ok());
  CHECK(loaded->skipped.empty());
  REQUIRE(RestoreCheckpoint(loaded->data, b->get()).ok());
  CHECK((*b)->steps() == 5);
  CHECK(ParamsCrc32((*b)->params()) == ParamsCrc32((*a)->params()));
  CHECK((*b)->optimizer().velocity() == (*a)->optimizer().velocity());
  // Same gradient on the same batch + same velocity = same next parameters.
  (*a)->StepOn({1, 2, 3});
  (*b)->StepOn({1, 2, 3});
  CHECK((*b)->params() == (*a)->params());

  // Wrong task or sizes are rejected and leave the task alone.
  CheckpointData wrong = loaded->data;
  wrong.task = "fmnist-mlp";
  CHECK_FALSE(RestoreCheckpoint(wrong, b->get()).ok());
  wrong = loaded->data;
  wrong.params.conservativeResize(10);
  const Status s = RestoreCheckpoint(wrong, b->get());
  CHECK(s.IsInvalidArgument());
  CHECK(Contains(s.message(), "10 parameters"));
  CHECK((*b)->params() == (*a)->params());
}

TEST_CASE("checkpoint corruption is detected with clear errors", "[learn][checkpoint]") {
  TempDir dir;
  const std::string path = dir.File("ckpt.bin");
  REQUIRE(SaveCheckpoint(path, Sample(1, 1.0f)).ok());
  const std::vector<char> good = Read(path);

  SECTION("missing") {
    auto r = LoadCheckpoint(dir.File("nope.bin"));
    CHECK(r.status().IsNotFound());
    CHECK(Contains(r.status().message(), "nope.bin: not found"));
  }
  SECTION("bad magic") {
    std::vector<char> bytes = good;
    bytes[0] = 'X';
    Write(path, bytes);
    auto r = LoadCheckpoint(path);
    CHECK(r.status().IsCorruption());
    CHECK(Contains(r.status().message(), "bad magic"));
  }
  SECTION("truncated payload") {
    std::vector<char> bytes = good;
    bytes.resize(bytes.size() - 10);
    Write(path, bytes);
    auto r = LoadCheckpoint(path);
    CHECK(r.status().IsCorruption());
    CHECK(Contains(r.status().message(), "truncated (expected " + std::to_string(good.size()) +
                                             " bytes, got " + std::to_string(good.size() - 10) +
                                             ")"));
  }
  SECTION("truncated header") {
    std::vector<char> bytes = good;
    bytes.resize(20);
    Write(path, bytes);
    CHECK(Contains(LoadCheckpoint(path).status().message(), "truncated"));
  }
  SECTION("payload bit flip") {
    std::vector<char> bytes = good;
    bytes[100] ^= 0x01;
    Write(path, bytes);
    auto r = LoadCheckpoint(path);
    CHECK(r.status().IsCorruption());
    CHECK(Contains(r.status().message(), "checksum mismatch"));
  }
  SECTION("header bit flip") {
    std::vector<char> bytes = good;
    bytes[25] ^= 0x01;  // number of parameters
    Write(path, bytes);
    CHECK(Contains(LoadCheckpoint(path).status().message(), "header checksum mismatch"));
  }
  SECTION("trailing bytes") {
    std::vector<char> bytes = good;
    bytes.push_back(0);
    Write(path, bytes);
    CHECK(Contains(LoadCheckpoint(path).status().message(), "trailing"));
  }
  SECTION("empty file") {
    Write(path, {});
    CHECK(LoadCheckpoint(path).status().IsCorruption());
  }
}

TEST_CASE("checkpoint sizes must agree with the payload", "[learn][checkpoint]") {
  // Forge a file whose header (with valid checksums) claims more params than the payload has.
  TempDir dir;
  const std::string path = dir.File("ckpt.bin");
  CheckpointData d = Sample(1, 1.0f);
  REQUIRE(SaveCheckpoint(path, d).ok());
  std::vector<char> bytes = Read(path);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
  };
  bytes[24] = 66;  // 66 params instead of 33: velocity then overruns the payload
  // Recompute the header CRC so only the size disagreement remains.
  const uint32_t header_crc = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), 44));
  put32(44, header_crc);
  Write(path, bytes);
  auto r = LoadCheckpoint(path);
  REQUIRE_FALSE(r.ok());
  INFO(r.status().message());
  CHECK(Contains(r.status().message(), "wrong sizes"));
}

TEST_CASE("saving rotates the previous good checkpoint; loading falls back to it",
          "[learn][checkpoint]") {
  TempDir dir;
  const std::string newest = dir.File(kCheckpointFileName);
  const std::string prev = dir.File(kPreviousCheckpointFileName);
  CHECK(PreviousCheckpointPath(newest) == prev);
  CHECK(PreviousCheckpointPath("/a.b/ckpt") == "/a.b/ckpt.prev");

  auto none = LoadLatestGood(dir.path());
  CHECK(none.status().IsNotFound());

  REQUIRE(SaveCheckpointToDir(dir.path(), Sample(10, 1.0f)).ok());
  CHECK_FALSE(std::filesystem::exists(prev));
  REQUIRE(SaveCheckpointToDir(dir.path(), Sample(20, 2.0f)).ok());
  REQUIRE(SaveCheckpointToDir(dir.path(), Sample(30, 3.0f)).ok());
  CHECK(LoadCheckpoint(newest)->step == 30);
  CHECK(LoadCheckpoint(prev)->step == 20);

  auto latest = LoadLatestGood(dir.path());
  REQUIRE(latest.ok());
  CHECK(latest->data.step == 30);
  CHECK(latest->path == newest);

  // Newest torn: fall back to the previous one and say why.
  std::vector<char> bytes = Read(newest);
  bytes.resize(bytes.size() / 2);
  Write(newest, bytes);
  latest = LoadLatestGood(dir.path());
  REQUIRE(latest.ok());
  CHECK(latest->data.step == 20);
  CHECK(latest->path == prev);
  REQUIRE(latest->skipped.size() == 1);
  CHECK(Contains(latest->skipped[0], newest));
  CHECK(Contains(latest->skipped[0], "truncated"));

  // Saving over a corrupt newest must not evict the good previous one.
  REQUIRE(SaveCheckpointToDir(dir.path(), Sample(40, 4.0f)).ok());
  CHECK(LoadCheckpoint(newest)->step == 40);
  CHECK(LoadCheckpoint(prev)->step == 20);

  // Crash between rotation and rename: only .prev exists.
  std::filesystem::remove(newest);
  latest = LoadLatestGood(dir.path());
  REQUIRE(latest.ok());
  CHECK(latest->data.step == 20);
  CHECK(Contains(latest->skipped[0], "not found"));

  // Both bad: Corruption naming both files.
  Write(newest, {'g', 'a', 'r', 'b', 'a', 'g', 'e', '!', '!'});
  bytes = Read(prev);
  bytes[60] ^= 0x10;
  Write(prev, bytes);
  latest = LoadLatestGood(dir.path());
  REQUIRE_FALSE(latest.ok());
  CHECK(latest.status().IsCorruption());
  CHECK(Contains(latest.status().message(), "bad magic"));
  CHECK(Contains(latest.status().message(), "checksum mismatch"));
}

TEST_CASE("saving into a missing directory fails cleanly", "[learn][checkpoint]") {
  const Status s = SaveCheckpoint("/nonexistent-dir/ckpt.bin", Sample(1, 1.0f));
  CHECK(s.code() == Status::Code::kIOError);
  CHECK(Contains(s.message(), "/nonexistent-dir/ckpt.bin.tmp"));
}

}  // namespace
}  // namespace meshtrain::learn
