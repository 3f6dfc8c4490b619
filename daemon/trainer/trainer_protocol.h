// The external-trainer protocol (docs/contract.md "Command line"): length-prefixed binary
// frames on a Unix stream socket between the agent and one local trainer process. Parameters do
// not travel here: they live in a shared-memory file both map (see
// daemon/trainer/external_trainer.h).
//
// Every frame is a 16-byte header then `length` bytes of body, all little-endian:
//   u32 magic 0x5452544d ("MTRT")  u16 version (1)  u16 type  u32 seq  u32 length (<= 4096)
// Requests (trainer -> agent) and their replies (type | 0x80, same seq):
//   ATTACH 1      u64 num_params, u16 dtype (1 = float32), u16 0, u32 flags (0), i64 resume_step
//                 (-1: none)                      -> u64 step, u64 num_params, u32 have_params,
//                                                    u32 path length, path of the shared memory
//   WAIT_PERMIT 2 u64 step                        -> u64 step, u32 training, u32 0
//   PUBLISH 3     u64 step [u64 begin, u64 end]   -> u64 step
//                 (24 bytes: only floats [begin, end) of the snapshot go out: a fragment)
//   MIX 4         (empty)                         -> u32 mixed, u32 flags, u64 step
//                 flags: 1 = adopted (the parameters were replaced: a join with state,
//                 which also sets the step, or a finished peer's final model),
//                 2 = a finished peer's final model replaced the parameters (evaluate now:
//                 the mesh-wide stop with --target-accuracy; once per peer and step)
//   EVAL 5        u64 step, f64 loss, f64 accuracy -> u32 stop, u32 0
//                 (a report that meets --target-accuracy makes the shared memory's content,
//                 i.e. the parameters just evaluated, the final model offered to the peers)
//   DETACH 6      (empty)                         -> (empty), then the agent closes
//   FINISH 7      (empty)                         -> u32 models, u32 crc32, u64 step
//                 training is over: the shared memory is this node's final model (a trainer
//                 that mixes every step and left its last MIX's parameters as they were: the
//                 snapshot its last PUBLISH made, docs/design.md "One model at the end"). The reply
//                 comes once the mesh's consensus model (the average of every
//                 finished node's final model) is in the shared memory; `models` it averages,
//                 `crc32` of its bytes. Peers still training keep it waiting.
//   CONFIGURE 8   u32 sync_every, u32 fragments, u16 outer (0 avg, 1 sgd, 2 nesterov),
//                 u16 drift (0 none, 1 params, 2 gradient), u32 0, f64 outer_lr,
//                 f64 outer_momentum                -> (empty)
//                 how the trainer syncs (MeshOptimizer): status shows it, and a MIX after a
//                 PUBLISH of a multi-step sync waits for the models of the peers it waited for
//                 (docs/design.md "Mixing"). Optional; any time after ATTACH.
// An ERROR frame (type 0xff, body: a UTF-8 message) answers a rejected request; the agent then
// closes the connection.
//
// Decoding is pure and treats every byte as untrusted: wrong magic, version or type, a body over
// the limit or of the wrong size for its type, non-finite numbers, out-of-range values are
// errors with a one-line reason. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace meshtrain::daemon::tp {

constexpr uint32_t kMagic = 0x5452544d;
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 16;
constexpr size_t kMaxBody = 4096;
constexpr uint64_t kMaxParams = uint64_t{1} << 28;  // 1 GiB of float32
constexpr uint16_t kDtypeFloat32 = 1;
constexpr uint32_t kMixAdopted = 1;
constexpr uint32_t kMixFinished = 2;
// WAIT_PERMIT reply flag: a model to adopt (a join with state) waits; the next MIX hands it over.
constexpr uint32_t kWaitAdoptWaiting = 1;

enum Type : uint16_t {
  kAttach = 1,
  kWaitPermit = 2,
  kPublish = 3,
  kMix = 4,
  kEval = 5,
  kDetach = 6,
  kFinish = 7,
  kConfigure = 8,
  kReplyBit = 0x80,
  kError = 0xff,
};

struct Header {
  uint16_t type = 0;
  uint32_t seq = 0;
  uint32_t length = 0;
};

struct Attach {
  uint64_t num_params = 0;
  int64_t resume_step = -1;
};
struct WaitPermit {
  uint64_t step = 0;
};
struct Publish {
  uint64_t step = 0;
  // Streaming fragments: only floats [begin, end) go out (end = 0: the whole model).
  uint64_t begin = 0;
  uint64_t end = 0;
};
struct MixReq {};
struct EvalReport {
  uint64_t step = 0;
  double loss = 0;
  double accuracy = 0;
};
struct Detach {};
struct Finish {};
// How the trainer syncs, as it runs it (MeshOptimizer's arguments).
struct Configure {
  uint32_t sync_every = 1;
  uint32_t fragments = 1;
  uint16_t outer = 0;  // learn::OuterStep::Kind: 0 avg, 1 sgd, 2 nesterov
  uint16_t drift = 0;  // 0 none, 1 params, 2 gradient
  double outer_lr = 1.0;
  double outer_momentum = 0.0;
};
constexpr const char* kDriftNames[] = {"none", "params", "gradient"};

using Request =
    std::variant<Attach, WaitPermit, Publish, MixReq, EvalReport, Detach, Finish, Configure>;

// Parses a header from kHeaderBytes bytes; nullopt with *why on a bad magic, version, type or
// length (the stream cannot be resynchronised after that).
std::optional<Header> DecodeHeader(const uint8_t* data, std::string* why);
// Parses a request body of the header's type; nullopt with *why when malformed.
std::optional<Request> DecodeRequest(const Header& h, const uint8_t* body, std::string* why);

// Frames (header + body).
std::vector<uint8_t> EncodeFrame(uint16_t type, uint32_t seq, const std::vector<uint8_t>& body);
std::vector<uint8_t> EncodeError(uint32_t seq, const std::string& message);

// Little-endian body writer for replies (and for the tests' requests).
class Writer {
 public:
  Writer& U16(uint16_t v) { return Le(v, 2); }
  Writer& U32(uint32_t v) { return Le(v, 4); }
  Writer& U64(uint64_t v) { return Le(v, 8); }
  Writer& F64(double v);
  Writer& Str(const std::string& s);
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  Writer& Le(uint64_t v, int bytes);
  std::vector<uint8_t> out_;
};

}  // namespace meshtrain::daemon::tp
