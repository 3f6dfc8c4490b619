// Helpers shared by the learn tests: one Fashion-MNIST load per test binary, and a per-test
// scratch directory under the system temp dir.
#pragma once

#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "learn/dataset.h"

namespace meshtrain::learn::testing {

// The real data set from the Debian package, loaded once (FAILs the calling test if missing).
inline std::shared_ptr<const FashionMnist> SharedFashionMnist() {
  static Result<std::shared_ptr<const FashionMnist>> loaded =
      LoadFashionMnist(kDefaultFashionMnistDir);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  return loaded.value();
}

// A fresh empty directory, removed (with its files) when the object dies.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/meshtrain-learn-XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    REQUIRE(made != nullptr);
    path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;  // best effort: a leftover temp dir is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Appends v as 4 big-endian bytes (IDX headers).
inline void PutBe32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

inline void WriteRaw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Writes `bytes` gzip-compressed.
inline void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) {
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
  }
  REQUIRE(gzclose(f) == Z_OK);
}

}  // namespace meshtrain::learn::testing
