// The keyring file in --data-dir: round trip, mode 0600, corrupt files refused with
// one line naming the file.
#include "daemon/keyring_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace meshtrain::daemon {
namespace {

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "mt-keyring-XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

wire::Key KeyOf(uint8_t b) {
  wire::Key k{};
  k.fill(b);
  return k;
}

}  // namespace

TEST_CASE("keyring file: round trip keeps the primary first, mode 0600", "[keyring]") {
  const std::string dir = TempDir();
  const std::string path = KeyringPath(dir);
  CHECK(KeyringPath("").empty());
  CHECK(LoadKeyring(path).status().IsNotFound());
  wire::Keyring ring(KeyOf(1));
  ring.Install(KeyOf(2));
  ring.Install(KeyOf(3));
  REQUIRE(ring.Use(KeyOf(3)));
  REQUIRE(SaveKeyring(path, ring).ok());
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto loaded = LoadKeyring(path);
  REQUIRE(loaded.ok());
  CHECK((*loaded)->Keys() == ring.Keys());
  CHECK((*loaded)->Primary() == KeyOf(3));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("keyring file: corrupt contents are refused with one line", "[keyring]") {
  const std::string dir = TempDir();
  const std::string path = KeyringPath(dir);
  const std::string good = wire::KeyToBase64(KeyOf(7));
  for (const std::string& text :
       {std::string(""), std::string("\n\n"), std::string("not-base64\n"), good + "\nAAAA\n",
        good + "\n" + std::string(20000, 'A'), std::string("\xff\xfe\n", 3)}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    auto r = LoadKeyring(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsCorruption());
    CHECK(r.status().message().find(path) != std::string::npos);
    CHECK(r.status().message().find('\n') == std::string::npos);
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good << "\r\n\n";
  CHECK(LoadKeyring(path).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace meshtrain::daemon
