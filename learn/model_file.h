// Trained models as NumPy .npz files (`meshtrain export`, the final model an agent
// writes to --data-dir at leave, `meshtrain evaluate --model FILE`). Members:
//   params.npy       float32 (P,): the flat parameter vector, layer by layer in spec order
//   spec.npy         uint8 (L,): the layer spec, UTF-8 (Python: bytes(z["spec"]).decode())
//   input_shape.npy  int64 (3,): C, H, W of one sample
//   step.npy         int64 (1,): the training step the parameters are from
//   input_transform.npy  float32 (2,): shift, scale: inputs are fed as (x - shift) * scale, x as
//                    loaded (bytes scaled to [0,1]); the fmnist presets standardize
// Written as a stored (uncompressed) zip with CRC-32s, to a temporary file that is fsynced and
// renamed over the target, so a crash never leaves a half-written model. Read back with the same
// verification as user data (learn/data_file.h): sizes, CRCs, dtypes, shapes; then the spec must
// parse, build for the input shape and have exactly P parameters.
//
// Thread-safety: reentrant functions of their arguments.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "learn/status.h"

namespace meshtrain::learn {

struct ModelFile {
  std::string spec;  // canonical layer spec (learn/network.h)
  std::array<int, 3> input_shape{1, 1, 1};
  int64_t step = 0;
  float input_shift = 0.0f;
  float input_scale = 1.0f;
  std::vector<float> params;
};

Status WriteModelFile(const std::string& path, const ModelFile& model);
Result<ModelFile> ReadModelFile(const std::string& path);
// The same checks on a file's bytes; `where` starts every error message.
Result<ModelFile> ParseModelFile(const std::string& where, const std::vector<uint8_t>& bytes);

}  // namespace meshtrain::learn
