// libFuzzer target: the readers of user-supplied files — training data (learn/data_file_internal.h:
// CSV, .npz, .npy pair, IDX pair), layer specs (learn/network.h: ParseModelSpec + Network::Build)
// and model files (learn/model_file.h).
// Input: one selector byte, then the file's bytes. Selector % 6: 0 CSV (bit 3 set: label column
// "1"), 1 .npz, 2 x.npy with a fixed valid y.npy, 3 IDX images with fixed labels, 4 a layer spec
// built for a 1x28x28 input, 5 a model file.
// Oracles: the sanitizers and no escaping exception; a rejection is one printable ASCII line
// starting with the file's name; accepted data has a matrix of dim() x size() and labels >= 0;
// an accepted spec re-parses from its canonical text to the same canonical text; an accepted
// model file's parameter count matches its spec.
#include <string>
#include <vector>

#include "learn/data_file_internal.h"
#include "learn/model_file.h"
#include "learn/network.h"
#include "tests/fuzz/fuzz_common.h"

namespace learn = meshtrain::learn;
namespace dfi = meshtrain::learn::data_file_internal;

namespace {

void CheckMessage(const std::string& m, const std::string& prefix) {
  FUZZ_CHECK(prefix.empty() || m.rfind(prefix, 0) == 0);
  FUZZ_CHECK(m.find('\n') == std::string::npos);
  for (char c : m) FUZZ_CHECK(c >= 0x20 && c <= 0x7e);
}

void CheckData(const meshtrain::Result<learn::LabeledData>& r, const std::string& prefix) {
  if (!r.ok()) {
    CheckMessage(r.status().message(), prefix);
    return;
  }
  FUZZ_CHECK(static_cast<size_t>(r->x.rows()) == r->dim());
  FUZZ_CHECK(static_cast<size_t>(r->x.cols()) == r->size());
  for (int32_t y : r->labels) FUZZ_CHECK(y >= 0);
}

std::vector<uint8_t> ValidLabelsNpy() {
  std::string h = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(h.size()), 0};
  b.insert(b.end(), h.begin(), h.end());
  for (int i = 0; i < 3; ++i) {
    b.push_back(static_cast<uint8_t>(i));
    b.insert(b.end(), 7, 0);
  }
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::vector<uint8_t> b(data + 1, data + size);
  static const std::vector<uint8_t> y = ValidLabelsNpy();
  static const std::vector<uint8_t> labels = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3};  // IDX, 3 labels
  switch (data[0] % 6) {
    case 0: {
      const std::string_view text(reinterpret_cast<const char*>(b.data()), b.size());
      CheckData(dfi::ParseCsv("c.csv", text, (data[0] & 8) ? "1" : ""), "c.csv:");
      break;
    }
    case 1:
      CheckData(dfi::ParseNpz("z.npz", b), "z.npz:");
      break;
    case 2: {
      auto r = dfi::ParseNpyPair("x.npy", b, "y.npy", y);
      if (!r.ok()) {
        const std::string& m = r.status().message();
        CheckMessage(m, m.rfind("y.npy:", 0) == 0 ? "y.npy:" : "x.npy:");
      } else {
        CheckData(r, "");
      }
      break;
    }
    case 3:
      CheckData(dfi::ParseIdxPair("i", b, "l", labels), "");
      break;
    case 4: {
      const std::string text(b.begin(), b.end());
      auto spec = learn::ParseModelSpec(text);
      if (!spec.ok()) {
        CheckMessage(spec.status().message(), "");
        break;
      }
      auto again = learn::ParseModelSpec(spec->text);
      FUZZ_CHECK(again.ok() && again->text == spec->text);
      auto net = learn::Network<float>::Build(spec.value(), learn::TensorShape{1, 28, 28});
      if (!net.ok()) CheckMessage(net.status().message(), "");
      break;
    }
    case 5: {
      auto m = learn::ParseModelFile("m.npz", b);
      if (!m.ok()) {
        CheckMessage(m.status().message(), "m.npz:");
        break;
      }
      auto spec = learn::ParseModelSpec(m->spec);
      FUZZ_CHECK(spec.ok());
      auto net = learn::Network<float>::Build(
          spec.value(),
          learn::TensorShape{m->input_shape[0], m->input_shape[1], m->input_shape[2]});
      FUZZ_CHECK(net.ok() && net->NumParams() == m->params.size());
      break;
    }
  }
  return 0;
}
