// Data-file loader (learn/data_file.h): CSV, .npy pairs, .npz archives (stored and deflated, and
// as NumPy itself writes them when python3-numpy is installed) and IDX, written to a temp dir;
// every malformed-input error names the file and the place; random corruption never crashes.
#include "learn/data_file.h"

#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "learn/data_file_internal.h"
#include "tests/learn/test_util.h"

namespace meshtrain::learn {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using testing::PutBe32;
using testing::TempDir;
using testing::WriteGz;
using testing::WriteRaw;

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

void WriteText(const std::string& path, const std::string& text) { WriteRaw(path, Bytes(text)); }

// The error message of a load that must fail.
std::string LoadError(const std::string& path, const DataFileOptions& opts = {}) {
  Result<LabeledData> r = LoadDataFile(path, opts);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

LabeledData LoadOk(const std::string& path, const DataFileOptions& opts = {}) {
  Result<LabeledData> r = LoadDataFile(path, opts);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// ---- builders ----

void PutLe16(std::vector<uint8_t>* out, uint32_t v) {
  out->push_back(static_cast<uint8_t>(v));
  out->push_back(static_cast<uint8_t>(v >> 8));
}
void PutLe32(std::vector<uint8_t>* out, uint32_t v) {
  PutLe16(out, v & 0xFFFF);
  PutLe16(out, v >> 16);
}

template <typename T>
std::vector<uint8_t> RawOf(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// An .npy file with the header dictionary `header` (padded as NumPy does).
std::vector<uint8_t> NpyWithHeader(std::string header, const std::vector<uint8_t>& raw,
                                   int version = 1) {
  const size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<uint8_t> out = Bytes("\x93NUMPY");
  out.push_back(static_cast<uint8_t>(version));
  out.push_back(0);
  if (version == 1) {
    PutLe16(&out, static_cast<uint32_t>(header.size()));
  } else {
    PutLe32(&out, static_cast<uint32_t>(header.size()));
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), raw.begin(), raw.end());
  return out;
}

// An .npy file: `shape` is the Python tuple text, e.g. "(2, 3)".
std::vector<uint8_t> Npy(const std::string& descr, const std::string& shape,
                         const std::vector<uint8_t>& raw, int version = 1,
                         const std::string& fortran = "False") {
  return NpyWithHeader(
      "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }", raw,
      version);
}

std::vector<uint8_t> RawDeflate(const std::vector<uint8_t>& in) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(in.size())));
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

struct ZipEntry {
  std::string name;
  std::vector<uint8_t> data;
};

// A zip archive as np.savez (stored) or np.savez_compressed (deflate) lays it out.
std::vector<uint8_t> Zip(const std::vector<ZipEntry>& entries, bool deflate) {
  std::vector<uint8_t> out, central;
  for (const ZipEntry& e : entries) {
    const std::vector<uint8_t> body = deflate ? RawDeflate(e.data) : e.data;
    const uint32_t crc = static_cast<uint32_t>(
        crc32(crc32(0, nullptr, 0), e.data.data(), static_cast<uInt>(e.data.size())));
    const uint32_t method = deflate ? 8 : 0;
    const uint32_t offset = static_cast<uint32_t>(out.size());
    PutLe32(&out, 0x04034b50);
    for (uint32_t v : {20u, 0u, method, 0u, 0u}) PutLe16(&out, v);
    for (uint32_t v :
         {crc, static_cast<uint32_t>(body.size()), static_cast<uint32_t>(e.data.size())}) {
      PutLe32(&out, v);
    }
    PutLe16(&out, static_cast<uint32_t>(e.name.size()));
    PutLe16(&out, 0);
    out.insert(out.end(), e.name.begin(), e.name.end());
    out.insert(out.end(), body.begin(), body.end());

    PutLe32(&central, 0x02014b50);
    for (uint32_t v : {20u, 20u, 0u, method, 0u, 0u}) PutLe16(&central, v);
    for (uint32_t v :
         {crc, static_cast<uint32_t>(body.size()), static_cast<uint32_t>(e.data.size())}) {
      PutLe32(&central, v);
    }
    for (uint32_t v : {static_cast<uint32_t>(e.name.size()), 0u, 0u, 0u, 0u}) {
      PutLe16(&central, v);
    }
    PutLe32(&central, 0);
    PutLe32(&central, offset);
    central.insert(central.end(), e.name.begin(), e.name.end());
  }
  const uint32_t dir_offset = static_cast<uint32_t>(out.size());
  out.insert(out.end(), central.begin(), central.end());
  PutLe32(&out, 0x06054b50);
  for (uint32_t v :
       {0u, 0u, static_cast<uint32_t>(entries.size()), static_cast<uint32_t>(entries.size())}) {
    PutLe16(&out, v);
  }
  PutLe32(&out, static_cast<uint32_t>(central.size()));
  PutLe32(&out, dir_offset);
  PutLe16(&out, 0);
  return out;
}

std::vector<uint8_t> Idx(uint8_t ndims, const std::vector<uint32_t>& dims, uint8_t seed = 0) {
  std::vector<uint8_t> b = {0, 0, 0x08, ndims};
  uint64_t total = 1;
  for (uint32_t d : dims) {
    PutBe32(&b, d);
    total *= d;
  }
  for (uint64_t i = 0; i < total; ++i) b.push_back(static_cast<uint8_t>(i * 37 + seed));
  return b;
}

// x: 3 samples of 4 features; y: 3 labels.
const std::vector<float> kX = {0.5f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -1.25f};
const std::vector<int64_t> kY = {2, 0, 1};

std::vector<uint8_t> XNpy(int version = 1) { return Npy("<f4", "(3, 4)", RawOf(kX), version); }
std::vector<uint8_t> YNpy() { return Npy("<i8", "(3,)", RawOf(kY)); }

void CheckXY(const LabeledData& d) {
  REQUIRE(d.size() == 3);
  REQUIRE(d.dim() == 4);
  for (int s = 0; s < 3; ++s) {
    for (int j = 0; j < 4; ++j) CHECK(d.x(j, s) == kX[static_cast<size_t>(s * 4 + j)]);
    CHECK(d.labels[static_cast<size_t>(s)] == kY[static_cast<size_t>(s)]);
  }
}

// ---- CSV ----

TEST_CASE("CSV with a header: label column by default, name or index", "[learn][data_file]") {
  TempDir dir;
  const std::string path = dir.File("data.csv");
  WriteText(path, "a, label ,b\r\n1, 0 ,2\r\n-3,1,4e1\r\n\r\n\n");

  SECTION("default: the last column") {
    const LabeledData d = LoadOk(path);
    REQUIRE(d.size() == 2);
    REQUIRE(d.dim() == 2);
    CHECK((d.channels == 1 && d.height == 1 && d.width == 2));
    CHECK(d.labels == std::vector<int32_t>{2, 40});
    CHECK(d.x(0, 0) == 1.0f);
    CHECK(d.x(1, 0) == 0.0f);
    CHECK(d.x(0, 1) == -3.0f);
    CHECK(d.source_line == std::vector<uint32_t>{2, 3});
    CHECK(d.num_classes() == 41);
  }
  SECTION("by header name") {
    const LabeledData d = LoadOk(path, {"label", std::nullopt});
    CHECK(d.labels == std::vector<int32_t>{0, 1});
    CHECK(d.x(0, 1) == -3.0f);
    CHECK(d.x(1, 1) == 40.0f);
  }
  SECTION("by 0-based index") {
    const LabeledData d = LoadOk(path, {"1", std::nullopt});
    CHECK(d.labels == std::vector<int32_t>{0, 1});
    CHECK(d.x(0, 1) == -3.0f);
    CHECK(d.x(1, 1) == 40.0f);
  }
}

TEST_CASE("CSV without a header", "[learn][data_file]") {
  TempDir dir;
  const std::string path = dir.File("plain.csv");
  WriteText(path, "0,1.5,2\n3.0,-4,5\n");
  const LabeledData d = LoadOk(path, {"0", std::nullopt});
  CHECK(d.labels == std::vector<int32_t>{0, 3});  // "3.0" is an integer label
  CHECK(d.x(0, 0) == 1.5f);
  CHECK(d.x(1, 1) == 5.0f);
  CHECK(d.source_line == std::vector<uint32_t>{1, 2});

  CHECK_THAT(LoadError(path, {"y", std::nullopt}),
             StartsWith(path + ": --label-column \"y\" names a column, but the file has no "
                               "header row"));
  CHECK_THAT(LoadError(path, {"3", std::nullopt}), Contains("out of range: the file has 3"));

  const std::string gz = dir.File("plain.csv.gz");
  WriteGz(gz, Bytes("1,2,0\n3,4,1\n"));
  CHECK(LoadOk(gz).labels == std::vector<int32_t>{0, 1});
}

TEST_CASE("CSV errors name the file, line and column", "[learn][data_file]") {
  TempDir dir;
  const std::string path = dir.File("bad.csv");
  auto error_for = [&](const std::string& text, const std::string& label_column = "") {
    WriteText(path, text);
    return LoadError(path, {label_column, std::nullopt});
  };
  CHECK(error_for("a,b,label\n1,2,0\n1,abc,1\n") ==
        path + ":3: column \"b\" (index 1): expected a number, got \"abc\"");
  CHECK(error_for("1,2,0\n1,x y,1\n") ==
        path + ":2: column index 1: expected a number, got \"x y\"");
  CHECK(error_for("a,b,label\n1,2,0\n1,nan,1\n") ==
        path + ":3: column \"b\" (index 1): expected a finite number, got \"nan\"");
  CHECK(error_for("a,b,label\n1,2,0\n1,2\n") ==
        path + ":3: row has 2 cells, expected 3 (as in line 1)");
  CHECK(error_for("1,2,0\n\n1,2,0\n") == path + ":2: empty line; expected 3 comma-separated cells");
  CHECK(error_for("a,b,label\n1,2,-1\n") ==
        path +
            ":2: label column \"label\" (index 2): expected a non-negative integer class "
            "label, got \"-1\"");
  CHECK_THAT(error_for("1,2,1.5\n"), StartsWith(path + ":1: label column index 2: expected a "
                                                       "non-negative integer class label"));
  CHECK_THAT(error_for("a,b,label\n1,2,0\n", "nope"),
             StartsWith(path + ":1: no column named \"nope\""));
  CHECK(error_for("a,b,label\n") == path + ": no samples");
  CHECK(error_for("\n\n") == path + ": no samples (empty file)");
  CHECK_THAT(error_for("1\n2\n"), StartsWith(path + ":1: found one column"));
  CHECK_THAT(error_for("1,2,0\n1,2,\xff\x01\n"), Contains("got \"\\xff\\x01\""));
}

// ---- .npy ----

TEST_CASE(".npy pairs: dtypes, header versions and shapes", "[learn][data_file]") {
  TempDir dir;
  const std::string x = dir.File("x.npy"), y = dir.File("y.npy");

  SECTION("f4 x (n, d), i8 y, format 1.0") {
    WriteRaw(x, XNpy(1));
    WriteRaw(y, YNpy());
    const LabeledData d = LoadOk(x + "," + y);
    CheckXY(d);
    CHECK((d.channels == 1 && d.height == 1 && d.width == 4));
    CHECK(d.source_line.empty());
  }
  SECTION("f8 x (n, H, W), u1 y, format 2.0") {
    std::vector<double> xv(3 * 2 * 2);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.25 * static_cast<double>(i);
    WriteRaw(x, Npy("<f8", "(3, 2, 2)", RawOf(xv), 2));
    WriteRaw(y, Npy("|u1", "(3,)", {7, 0, 255}, 2));
    const LabeledData d = LoadOk(x + "," + y);
    CHECK((d.channels == 1 && d.height == 2 && d.width == 2));
    CHECK(d.x(3, 2) == 0.25f * 11);
    CHECK(d.labels == std::vector<int32_t>{7, 0, 255});
  }
  SECTION("u1 x (n, C, H, W) is scaled to [0,1]; i2 y, format 3.0") {
    std::vector<uint8_t> xv(2 * 3 * 1 * 2);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<uint8_t>(i * 20);
    WriteRaw(x, Npy("|u1", "(2, 3, 1, 2)", xv, 3));
    WriteRaw(y, Npy("<i2", "(2,)", RawOf(std::vector<int16_t>{1, 4})));
    const LabeledData d = LoadOk(x + "," + y);
    CHECK((d.channels == 3 && d.height == 1 && d.width == 2));
    CHECK(d.x(5, 1) == Approx(220.0f / 255.0f));
    CHECK(d.labels == std::vector<int32_t>{1, 4});
  }
  SECTION("i4 x is converted to float") {
    WriteRaw(x, Npy("<i4", "(3, 1)", RawOf(std::vector<int32_t>{-5, 0, 70000})));
    WriteRaw(y, YNpy());
    const LabeledData d = LoadOk(x + "," + y);
    CHECK(d.x(0, 2) == 70000.0f);
    CHECK(d.x(0, 0) == -5.0f);
  }
}

TEST_CASE(".npy errors name the file, the array and what was expected", "[learn][data_file]") {
  TempDir dir;
  const std::string x = dir.File("x.npy"), y = dir.File("y.npy");
  const std::string pair = x + "," + y;
  WriteRaw(x, XNpy());
  WriteRaw(y, YNpy());

  SECTION("y with a float dtype") {
    WriteRaw(y, Npy("<f4", "(3,)", RawOf(std::vector<float>{0, 1, 2})));
    CHECK(LoadError(pair) == y + ": array 'y': dtype \"<f4\" is not an integer type; expected "
                                 "integer class labels (e.g. <i8 or |u1)");
  }
  SECTION("x of strings, objects, big-endian or structured") {
    for (const char* descr : {"<U5", "|O", ">f4", "<f2", "|b1"}) {
      WriteRaw(x, Npy(descr, "(3, 4)", std::vector<uint8_t>(240)));
      CHECK_THAT(LoadError(pair),
                 StartsWith(x + ": array 'x': unsupported dtype \"" + std::string(descr)));
    }
    WriteRaw(x,
             NpyWithHeader("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3, 4), }",
                           RawOf(kX)));
    CHECK_THAT(LoadError(pair),
               StartsWith(x + ": array 'x': malformed .npy header: 'descr' is not a plain dtype"));
  }
  SECTION("wrong shapes") {
    WriteRaw(y, Npy("<i8", "(3, 1)", RawOf(kY)));
    CHECK(LoadError(pair) == y + ": array 'y' has shape (3, 1); expected a 1-D array of n labels");
    WriteRaw(y, YNpy());
    WriteRaw(x, Npy("<f4", "(12,)", RawOf(kX)));
    CHECK(LoadError(pair) == x + ": array 'x' has shape (12,); expected (n, d), (n, H, W) or "
                                 "(n, C, H, W)");
  }
  SECTION("n mismatch") {
    WriteRaw(y, Npy("<i8", "(2,)", RawOf(std::vector<int64_t>{0, 1})));
    CHECK(LoadError(pair) ==
          y + ": array 'y' has 2 labels, but array 'x' in " + x + " has 3 samples");
  }
  SECTION("truncated data and trailing data") {
    std::vector<uint8_t> bytes = XNpy();
    const size_t full = bytes.size();
    bytes.resize(full - 5);
    WriteRaw(x, bytes);
    CHECK(LoadError(pair) == x + ": array 'x': truncated .npy data: ran out at byte offset " +
                                 std::to_string(full - 5) + " (needs " + std::to_string(full) +
                                 " bytes)");
    bytes.resize(7);
    WriteRaw(x, bytes);
    CHECK_THAT(LoadError(pair), StartsWith(x + ": array 'x': truncated .npy data"));
    bytes = XNpy();
    bytes.push_back(0);
    WriteRaw(x, bytes);
    CHECK_THAT(LoadError(pair), StartsWith(x + ": array 'x': 1 bytes of trailing data"));
  }
  SECTION("fortran order") {
    WriteRaw(x, Npy("<f4", "(3, 4)", RawOf(kX), 1, "True"));
    CHECK_THAT(LoadError(pair),
               StartsWith(x + ": array 'x': fortran_order arrays are not supported"));
  }
  SECTION("non-finite x, negative label, bad version, one file") {
    std::vector<float> bad = kX;
    bad[6] = std::numeric_limits<float>::infinity();
    WriteRaw(x, Npy("<f4", "(3, 4)", RawOf(bad)));
    CHECK(LoadError(pair) == x + ": array 'x': sample 1, value 2 is not a finite float32 number");
    WriteRaw(x, XNpy());
    WriteRaw(y, Npy("<i8", "(3,)", RawOf(std::vector<int64_t>{0, -2, 1})));
    CHECK(LoadError(pair) ==
          y + ": array 'y': sample 1: label -2 is not a class index 0..16777215");
    std::vector<uint8_t> v4 = XNpy();
    v4[6] = 4;
    WriteRaw(x, v4);
    CHECK_THAT(LoadError(pair), Contains("unsupported .npy format version 4.0"));
    CHECK_THAT(LoadError(x), StartsWith(x + ": an .npy file holds one array"));
  }
  SECTION("missing file") {
    Result<LabeledData> r = LoadDataFile(x + "," + dir.File("none.npy"), {});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsNotFound());
    CHECK(r.status().message() == dir.File("none.npy") + ": no such file");
  }
}

// ---- .npz ----

TEST_CASE(".npz archives, stored and deflated", "[learn][data_file]") {
  TempDir dir;
  const std::string path = dir.File("data.npz");
  for (bool deflate : {false, true}) {
    INFO("deflate " << deflate);
    // Extra members are ignored, order does not matter.
    WriteRaw(path, Zip({{"meta.npy", YNpy()}, {"y.npy", YNpy()}, {"x.npy", XNpy(2)}}, deflate));
    CheckXY(LoadOk(path));
  }
}

TEST_CASE(".npz errors", "[learn][data_file]") {
  TempDir dir;
  const std::string path = dir.File("data.npz");
  const std::string corrupt = path + ": corrupt .npz (zip) archive: ";

  SECTION("missing y") {
    WriteRaw(path, Zip({{"x.npy", XNpy()}}, true));
    CHECK(LoadError(path) == path +
                                 ": no array 'y' (member y.npy); expected np.savez(path, "
                                 "x=..., y=...)");
  }
  SECTION("CRC mismatch") {
    std::vector<uint8_t> zip = Zip({{"x.npy", XNpy()}, {"y.npy", YNpy()}}, false);
    zip[30 + 5 + 100] ^= 0x40;  // a byte of x's float data (after the 30+5-byte local header)
    WriteRaw(path, zip);
    CHECK_THAT(LoadError(path), StartsWith(corrupt + "member x.npy: CRC-32 mismatch"));
  }
  SECTION("truncated archive") {
    for (bool deflate : {false, true}) {
      std::vector<uint8_t> zip = Zip({{"x.npy", XNpy()}, {"y.npy", YNpy()}}, deflate);
      for (size_t keep : {zip.size() - 1, zip.size() / 2, size_t{21}, size_t{0}}) {
        std::vector<uint8_t> cut(zip.begin(), zip.begin() + static_cast<long>(keep));
        WriteRaw(path, cut);
        CHECK_THAT(LoadError(path), StartsWith(corrupt));
      }
    }
  }
  SECTION("deflate data cut inside the member") {
    const std::vector<uint8_t> x = XNpy();
    std::vector<uint8_t> zip = Zip({{"x.npy", x}, {"y.npy", YNpy()}}, true);
    // The central directory (x's entry first) claims more bytes than the deflate stream holds.
    const size_t central = zip.size() - 22 - 2 * (46 + 5);
    const uint32_t more = static_cast<uint32_t>(x.size() + 10);
    for (int k = 0; k < 4; ++k) zip[central + 24 + k] = static_cast<uint8_t>(more >> (8 * k));
    WriteRaw(path, zip);
    CHECK_THAT(LoadError(path), StartsWith(corrupt +
                                           "member x.npy: deflate data is truncated or "
                                           "corrupt after " +
                                           std::to_string(x.size())));
  }
  SECTION("not a zip") {
    WriteText(path, "hello");
    CHECK(LoadError(path) == corrupt + "too short for a zip archive (truncated?)");
  }
}

// ---- IDX ----

TEST_CASE("IDX pairs, plain and gzip, labels file found from the images name",
          "[learn][data_file]") {
  TempDir dir;
  const std::vector<uint8_t> images = Idx(3, {4, 3, 2});
  const std::vector<uint8_t> labels = Idx(1, {4}, 1);
  SECTION("plain IMAGES,LABELS") {
    const std::string i = dir.File("a.idx3"), l = dir.File("b.idx1");
    WriteRaw(i, images);
    WriteRaw(l, labels);
    const LabeledData d = LoadOk(i + "," + l);
    REQUIRE(d.size() == 4);
    CHECK((d.channels == 1 && d.height == 3 && d.width == 2));
    CHECK(d.x(5, 0) == Approx(images[16 + 5] / 255.0f));
    CHECK(d.x(0, 3) == Approx(images[16 + 18] / 255.0f));
    CHECK(d.labels == std::vector<int32_t>{labels[8], labels[9], labels[10], labels[11]});
  }
  SECTION("gzip, labels derived") {
    const std::string i = dir.File("train-images-idx3-ubyte.gz");
    WriteGz(i, images);
    WriteGz(dir.File("train-labels-idx1-ubyte.gz"), labels);
    CHECK(LoadOk(i).size() == 4);
    const std::string other = dir.File("my-images.idx");
    WriteRaw(other, images);
    WriteRaw(dir.File("my-labels.idx"), labels);
    CHECK(LoadOk(other).size() == 4);
    const std::string no_name = dir.File("pixels.idx");
    WriteRaw(no_name, images);
    CHECK_THAT(LoadError(no_name), StartsWith(no_name + ": cannot derive the IDX labels file"));
  }
  SECTION("format found by magic; 2-D images are flat features") {
    const std::string i = dir.File("images.bin"), l = dir.File("labels.bin");
    WriteRaw(i, Idx(2, {4, 5}));
    WriteRaw(l, labels);
    const LabeledData d = LoadOk(i);
    CHECK((d.channels == 1 && d.height == 1 && d.width == 5));
  }
}

TEST_CASE("IDX: Debian's Fashion-MNIST test set loads as LoadIdxPair reads it",
          "[learn][data_file]") {
  const std::string dir = kDefaultFashionMnistDir;
  const std::string images = dir + "/t10k-images-idx3-ubyte.gz";
  const LabeledData d = LoadOk(images);  // labels file derived: t10k-labels-idx1-ubyte.gz
  Result<ImageSet> ref = LoadIdxPair(images, dir + "/t10k-labels-idx1-ubyte.gz");
  REQUIRE(ref.ok());
  REQUIRE(d.size() == 10000);
  CHECK((d.channels == 1 && d.height == 28 && d.width == 28));
  CHECK(d.num_classes() == 10);
  for (size_t i : {size_t{0}, size_t{4321}, size_t{9999}}) {
    CHECK(d.labels[i] == ref->labels[i]);
    for (size_t j = 0; j < ref->dim(); j += 97) {
      CHECK(d.x(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(i)) == ref->pixel(i, j));
    }
  }
}

TEST_CASE("IDX errors: truncation offset, counts, magic", "[learn][data_file]") {
  TempDir dir;
  const std::string i = dir.File("t-images-idx3-ubyte"), l = dir.File("t-labels-idx1-ubyte");
  std::vector<uint8_t> images = Idx(3, {4, 3, 2});
  WriteRaw(l, Idx(1, {4}));

  images.resize(30);
  WriteRaw(i, images);
  CHECK(LoadError(i) == i + ": truncated IDX file: data ran out at byte offset 30 (the header "
                            "announces 40 bytes)");
  images.resize(9);
  WriteRaw(i, images);
  CHECK(LoadError(i) == i + ": truncated IDX file: data ran out at byte offset 9 inside the "
                            "header (16 bytes)");
  WriteGz(i, Idx(3, {4, 3, 2}));
  std::vector<uint8_t> gz;
  {
    std::FILE* f = std::fopen(i.c_str(), "rb");
    REQUIRE(f != nullptr);
    int c;
    while ((c = std::fgetc(f)) != EOF) gz.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
  }
  gz.resize(gz.size() - 12);  // cut the gzip trailer and some data
  WriteRaw(i, gz);
  CHECK_THAT(LoadError(i), StartsWith(i + ": "));

  WriteRaw(i, Idx(3, {5, 3, 2}));
  CHECK(LoadError(i) == l + ": 4 labels for 5 images in " + i);
  std::vector<uint8_t> bad = Idx(3, {4, 3, 2});
  bad[2] = 0x0D;  // float elements
  WriteRaw(i, bad);
  CHECK(LoadError(i) == i + ": bad IDX magic number 0x00000d03 (expected "
                            "0x00000801..0x00000804: only unsigned-byte elements, type 0x08, "
                            "are supported)");
  WriteRaw(i, Idx(3, {4, 3, 2}));
  WriteRaw(l, Idx(2, {4, 1}));
  CHECK(LoadError(i) == l + ": bad IDX magic number 0x00000802 (expected 0x00000801)");
  std::vector<uint8_t> trailing = Idx(1, {4});
  trailing.push_back(9);
  WriteRaw(l, trailing);
  CHECK_THAT(LoadError(i), StartsWith(l + ": 1 bytes of trailing data after byte offset 12"));
}

// ---- input shape, labels, dispatch ----

TEST_CASE("input shape (--input-shape) parsing and override", "[learn][data_file]") {
  CHECK(ParseInputShape("1,28,28").value() == std::array<int, 3>{1, 28, 28});
  CHECK(ParseInputShape("65536,1,1").ok());
  for (const char* bad : {"", "1,2", "1,2,3,4", "0,1,1", "1,,2", "a,b,c", "1, 2,3", "-1,2,3",
                          "65537,1,1", "1,2,3,"}) {
    INFO(bad);
    Result<std::array<int, 3>> r = ParseInputShape(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), StartsWith(std::string("--input-shape \"") + bad + "\": "));
  }
  TempDir dir;
  const std::string path = dir.File("img.csv");
  WriteText(path, "1,2,3,4,0\n5,6,7,8,1\n");
  DataFileOptions opts;
  opts.input_shape = std::array<int, 3>{1, 2, 2};
  const LabeledData d = LoadOk(path, opts);
  CHECK((d.channels == 1 && d.height == 2 && d.width == 2));
  opts.input_shape = std::array<int, 3>{1, 3, 2};
  CHECK(LoadError(path, opts) ==
        path + ": --input-shape 1,3,2 has 6 values per sample, but the data has 4");
}

TEST_CASE("CheckLabels names the line or the sample", "[learn][data_file]") {
  TempDir dir;
  const std::string csv = dir.File("l.csv");
  WriteText(csv, "f,y\n1,0\n2,5\n");
  const LabeledData d = LoadOk(csv);
  CHECK(CheckLabels(d, 6, csv).ok());
  CHECK(CheckLabels(d, 3, csv).message() ==
        csv + ":3: label 5 out of range for a model with 3 outputs");
  LabeledData plain = d;
  plain.source_line.clear();
  CHECK(CheckLabels(plain, 3, "y.npy").message() ==
        "y.npy: sample 1: label 5 out of range for a model with 3 outputs");
}

TEST_CASE("unknown formats and bad path lists", "[learn][data_file]") {
  TempDir dir;
  const std::string path = dir.File("data.txt");
  WriteText(path, "1,2,3\n");
  CHECK_THAT(LoadError(path), StartsWith(path + ": unknown data format"));
  CHECK_THAT(LoadError(path + ",a,b"), StartsWith(path + ",a,b: expected one file or two"));
  const std::string csv = dir.File("d.csv");
  WriteText(csv, "1,2,3\n");
  CHECK_THAT(LoadError(csv + "," + csv), StartsWith(csv + ": a CSV data set is one file"));
  CHECK(LoadDataFile(dir.File("missing.csv"), {}).status().IsNotFound());
}

// One line of printable ASCII: file bytes echoed in a message are escaped.
bool Printable(const std::string& message) {
  for (char c : message) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// ---- hostile input: random corruption never crashes and always names the file ----

TEST_CASE("random corruption of every format yields an error naming the file",
          "[learn][data_file]") {
  namespace dfi = data_file_internal;
  std::mt19937 rng(15);
  const std::vector<uint8_t> x = XNpy(), y = YNpy();
  const std::vector<uint8_t> stored = Zip({{"x.npy", x}, {"y.npy", y}}, false);
  const std::vector<uint8_t> deflated = Zip({{"x.npy", x}, {"y.npy", y}}, true);
  const std::vector<uint8_t> csv = Bytes("a,b,label\n1,2,0\n3,4,1\n5,6,2\n");
  const std::vector<uint8_t> images = Idx(3, {4, 3, 2}), labels = Idx(1, {4});
  // Truncates, or overwrites 1-4 bytes — half of the time inside the first `hot` bytes (the
  // .npy header, the IDX header) or, for hot < 0, the last -hot bytes (the zip directory).
  auto mutate = [&](std::vector<uint8_t> b, long hot = 0) {
    if (rng() % 4 == 0) {
      b.resize(rng() % (b.size() + 1));
      return b;
    }
    const size_t span =
        hot == 0 ? b.size() : std::min(b.size(), static_cast<size_t>(std::labs(hot)));
    const size_t base = hot < 0 && rng() % 2 ? b.size() - span : 0;
    const bool focused = hot != 0 && rng() % 2;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = focused ? base + rng() % span : rng() % b.size();
      b[at] = static_cast<uint8_t>(rng());
    }
    return b;
  };
  // Rejections start with one of the paths and are one printable line; results are consistent.
  auto check = [](const Result<LabeledData>& r, const std::string& path,
                  const std::string& other_path = "") {
    if (!r.ok()) {
      const std::string& m = r.status().message();
      REQUIRE_THAT(
          m, StartsWith(path + ":") || StartsWith((other_path.empty() ? path : other_path) + ":"));
      REQUIRE(Printable(m));
    } else {
      REQUIRE(r->x.cols() == static_cast<Eigen::Index>(r->size()));
      REQUIRE(static_cast<size_t>(r->x.rows()) == r->dim());
      REQUIRE(r->labels.size() == r->size());
    }
  };
  for (int iter = 0; iter < 3000; ++iter) {
    // A mutated shape can make x's n disagree with y's: that error names y.
    check(dfi::ParseNpyPair("x.npy", mutate(x, 64), "y.npy", y), "x.npy", "y.npy");
    check(dfi::ParseNpyPair("x.npy", x, "y.npy", mutate(y, 64)), "y.npy");
    check(dfi::ParseNpz("s.npz", mutate(stored, -120)), "s.npz");
    check(dfi::ParseNpz("d.npz", mutate(deflated, -120)), "d.npz");
    const std::vector<uint8_t> c = mutate(csv);
    check(dfi::ParseCsv("c.csv",
                        std::string_view(reinterpret_cast<const char*>(c.data()), c.size()), ""),
          "c.csv");
    check(dfi::ParseIdxPair("i", mutate(images, 16), "l", labels), "i", "l");
  }
}

// ---- NumPy itself ----

// Debian's python3 (pyenv shims may shadow it with one lacking numpy).
std::string PythonWithNumpy() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    const std::string cmd = std::string(py) + " -c 'import numpy' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

TEST_CASE("files written by NumPy (np.save, np.savez, np.savez_compressed)", "[learn][data_file]") {
  const std::string python = PythonWithNumpy();
  if (python.empty()) {
    WARN("skipped: python3 with numpy not found (Debian package python3-numpy)");
    return;
  }
  TempDir dir;
  const std::string script = dir.File("make.py");
  WriteText(script,
            "import sys, numpy as np\n"
            "d = sys.argv[1]\n"
            "x = (np.arange(5 * 2 * 3, dtype=np.float32) / 7).reshape(5, 2, 3)\n"
            "y = np.array([0, 3, 1, 2, 3], dtype=np.int64)\n"
            "np.savez(d + '/s.npz', x=x, y=y)\n"
            "np.savez_compressed(d + '/c.npz', x=x, y=y)\n"
            "np.save(d + '/x.npy', x.astype(np.float64))\n"
            "np.save(d + '/y.npy', y.astype(np.uint8))\n"
            "np.save(d + '/xf.npy', np.asfortranarray(x))\n");
  REQUIRE(std::system((python + " " + script + " " + dir.path()).c_str()) == 0);
  for (const std::string& path :
       {dir.File("s.npz"), dir.File("c.npz"), dir.File("x.npy") + "," + dir.File("y.npy")}) {
    INFO(path);
    const LabeledData d = LoadOk(path);
    REQUIRE(d.size() == 5);
    CHECK((d.channels == 1 && d.height == 2 && d.width == 3));
    CHECK(d.labels == std::vector<int32_t>{0, 3, 1, 2, 3});
    for (int s = 0; s < 5; ++s) {
      for (int j = 0; j < 6; ++j) CHECK(d.x(j, s) == Approx(static_cast<float>(s * 6 + j) / 7.0f));
    }
  }
  CHECK_THAT(LoadError(dir.File("xf.npy") + "," + dir.File("y.npy")),
             Contains("fortran_order arrays are not supported"));
}

}  // namespace
}  // namespace meshtrain::learn
