// Helpers shared by the learn tests: one Fashion-MNIST load per test binary, and a per-test
// scratch directory under the system temp dir.
#pragma once

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

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

}  // namespace meshtrain::learn::testing
