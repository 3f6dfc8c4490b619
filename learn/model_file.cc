#include "learn/model_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "learn/data_file_internal.h"
#include "learn/network.h"

namespace meshtrain::learn {
namespace {

namespace dfi = data_file_internal;

void Put16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, static_cast<uint16_t>(v & 0xffff));
  Put16(out, static_cast<uint16_t>(v >> 16));
}

// An .npy (format 1.0) image of `count` elements of `descr` with `shape_text` ("(5,)").
std::string Npy(const std::string& descr, const std::string& shape_text, const void* data,
                size_t bytes) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n', padded with spaces to 64 bytes.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  Put16(&out, static_cast<uint16_t>(header.size()));
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  return out;
}

// A stored zip of the given (name, content) members.
std::string Zip(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string out, dir;
  for (const auto& [name, content] : members) {
    const uint32_t crc = static_cast<uint32_t>(crc32(crc32(0, nullptr, 0),
                                                     reinterpret_cast<const Bytef*>(content.data()),
                                                     static_cast<uInt>(content.size())));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    // (C++17 lambdas cannot capture structured bindings.)
    const uint32_t content_size = static_cast<uint32_t>(content.size());
    const uint16_t name_size = static_cast<uint16_t>(name.size());
    auto common = [&](std::string* h) {
      Put16(h, 20);    // version needed
      Put16(h, 0);     // flags
      Put16(h, 0);     // stored
      Put16(h, 0);     // time
      Put16(h, 0x21);  // date 1980-01-01
      Put32(h, crc);
      Put32(h, content_size);
      Put32(h, content_size);
      Put16(h, name_size);
      Put16(h, 0);  // extra
    };
    Put32(&out, dfi::kLocalHeader);
    common(&out);
    out += name;
    out += content;
    Put32(&dir, dfi::kCentralHeader);
    Put16(&dir, 20);  // version made by
    common(&dir);
    Put16(&dir, 0);  // comment
    Put16(&dir, 0);  // disk
    Put16(&dir, 0);  // internal attributes
    Put32(&dir, 0);  // external attributes
    Put32(&dir, offset);
    dir += name;
  }
  const uint32_t dir_offset = static_cast<uint32_t>(out.size());
  out += dir;
  Put32(&out, dfi::kEndOfCentralDir);
  Put16(&out, 0);
  Put16(&out, 0);
  Put16(&out, static_cast<uint16_t>(members.size()));
  Put16(&out, static_cast<uint16_t>(members.size()));
  Put32(&out, static_cast<uint32_t>(dir.size()));
  Put32(&out, dir_offset);
  Put16(&out, 0);
  return out;
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IOError(path + ": write failed: " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace

Status WriteModelFile(const std::string& path, const ModelFile& model) {
  if (model.params.size() >= (size_t{1} << 30)) {
    return Status::InvalidArgument(path + ": model too large for an .npz without zip64");
  }
  const int64_t shape[3] = {model.input_shape[0], model.input_shape[1], model.input_shape[2]};
  const int64_t step[1] = {model.step};
  const float transform[2] = {model.input_shift, model.input_scale};
  const std::string zip = Zip({
      {"params.npy", Npy("<f4", "(" + std::to_string(model.params.size()) + ",)",
                         model.params.data(), model.params.size() * sizeof(float))},
      {"spec.npy", Npy("|u1", "(" + std::to_string(model.spec.size()) + ",)", model.spec.data(),
                       model.spec.size())},
      {"input_shape.npy", Npy("<i8", "(3,)", shape, sizeof(shape))},
      {"step.npy", Npy("<i8", "(1,)", step, sizeof(step))},
      {"input_transform.npy", Npy("<f4", "(2,)", transform, sizeof(transform))},
  });
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(tmp + ": cannot create: " + std::strerror(errno));
  Status s = WriteAll(fd, zip, tmp);
  if (s.ok() && ::fsync(fd) != 0)
    s = Status::IOError(tmp + ": fsync failed: " + std::strerror(errno));
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::IOError(tmp + ": rename to " + path + " failed: " + std::strerror(errno));
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Result<ModelFile> ReadModelFile(const std::string& path) {
  Result<std::vector<uint8_t>> bytes = dfi::ReadDataBytes(path);
  if (!bytes.ok()) return bytes.status();
  return ParseModelFile(path, bytes.value());
}

Result<ModelFile> ParseModelFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::vector<std::string> names = {"params", "spec", "input_shape", "step",
                                          "input_transform"};
  Result<std::vector<std::vector<uint8_t>>> members = dfi::ExtractNpzMembers(path, bytes, names);
  if (!members.ok()) return members.status();
  std::vector<dfi::NpyArray> arrays;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::vector<uint8_t>& m = members.value()[i];
    Result<dfi::NpyArray> a =
        dfi::ParseNpy(path + ": array '" + names[i] + "'", m.data(), m.size());
    if (!a.ok()) return a.status();
    arrays.push_back(a.value());
  }
  auto bad = [&](const std::string& array, const std::string& expected, const dfi::NpyArray& a) {
    return Status::InvalidArgument(path + ": array '" + array + "' is " + a.descr + " " +
                                   a.ShapeText() + ", expected " + expected +
                                   " (not a meshtrain model file?)");
  };
  const dfi::NpyArray& p = arrays[0];
  const dfi::NpyArray& sp = arrays[1];
  const dfi::NpyArray& sh = arrays[2];
  const dfi::NpyArray& st = arrays[3];
  const dfi::NpyArray& tr = arrays[4];
  if (p.kind != 'f' || p.itemsize != 4 || p.shape.size() != 1) return bad("params", "<f4 (P,)", p);
  if (sp.kind != 'u' || sp.itemsize != 1 || sp.shape.size() != 1 || sp.count > 65536) {
    return bad("spec", "|u1 (L,), L <= 65536", sp);
  }
  if (sh.kind != 'i' || sh.itemsize != 8 || sh.count != 3)
    return bad("input_shape", "<i8 (3,)", sh);
  if (st.kind != 'i' || st.itemsize != 8 || st.count != 1) return bad("step", "<i8 (1,)", st);
  if (tr.kind != 'f' || tr.itemsize != 4 || tr.count != 2) {
    return bad("input_transform", "<f4 (2,)", tr);
  }
  ModelFile model;
  model.params.resize(p.count);
  if (p.count > 0) std::memcpy(model.params.data(), p.data, p.count * sizeof(float));
  for (float v : model.params) {
    if (!std::isfinite(v)) return Status::InvalidArgument(path + ": params hold NaN or inf");
  }
  model.spec.assign(reinterpret_cast<const char*>(sp.data), sp.count);
  for (int i = 0; i < 3; ++i) {
    int64_t v;
    std::memcpy(&v, sh.data + 8 * i, 8);
    if (v < 1 || v > 65536) {
      return Status::InvalidArgument(path + ": input_shape[" + std::to_string(i) +
                                     "] = " + std::to_string(v) + " is outside 1..65536");
    }
    model.input_shape[static_cast<size_t>(i)] = static_cast<int>(v);
  }
  std::memcpy(&model.step, st.data, 8);
  std::memcpy(&model.input_shift, tr.data, 4);
  std::memcpy(&model.input_scale, tr.data + 4, 4);
  if (!std::isfinite(model.input_shift) || !std::isfinite(model.input_scale)) {
    return Status::InvalidArgument(path + ": input_transform is not finite");
  }
  Result<ModelSpec> spec = ParseModelSpec(model.spec);
  if (!spec.ok()) return Status::InvalidArgument(path + ": " + spec.status().message());
  Result<Network<float>> net = Network<float>::Build(
      spec.value(), TensorShape{model.input_shape[0], model.input_shape[1], model.input_shape[2]});
  if (!net.ok()) return Status::InvalidArgument(path + ": " + net.status().message());
  if (net->NumParams() != model.params.size()) {
    return Status::InvalidArgument(path + ": " + std::to_string(model.params.size()) +
                                   " parameters, but its spec needs " +
                                   std::to_string(net->NumParams()));
  }
  return model;
}

}  // namespace meshtrain::learn
