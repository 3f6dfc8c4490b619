#include "daemon/trainer/trainer_protocol.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace meshtrain::daemon::tp {

namespace {

uint64_t Le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

double F64(const uint8_t* p) {
  const uint64_t bits = Le(p, 8);
  double d = 0;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

size_t BodySize(uint16_t type) {
  switch (type) {
    case kAttach:
      return 24;
    case kWaitPermit:
    case kPublish:
      return 8;
    case kMix:
    case kDetach:
    case kFinish:
      return 0;
    case kEval:
      return 24;
    case kConfigure:
      return 32;
    default:
      return std::numeric_limits<size_t>::max();
  }
}

// Steps beyond this are nonsense (2^53: exact as a double, for JSON status and Python).
constexpr uint64_t kMaxStep = uint64_t{1} << 53;

// CONFIGURE's body (32 bytes, checked by the caller).
std::optional<Request> DecodeConfigure(const uint8_t* b, std::string* why) {
  Configure c;
  c.sync_every = static_cast<uint32_t>(Le(b, 4));
  c.fragments = static_cast<uint32_t>(Le(b + 4, 4));
  c.outer = static_cast<uint16_t>(Le(b + 8, 2));
  c.drift = static_cast<uint16_t>(Le(b + 10, 2));
  const auto reserved = static_cast<uint32_t>(Le(b + 12, 4));
  c.outer_lr = F64(b + 16);
  c.outer_momentum = F64(b + 24);
  constexpr uint32_t kMaxSyncEvery = 1u << 24;
  if (c.sync_every == 0 || c.sync_every > kMaxSyncEvery) {
    *why = "configure: sync_every " + std::to_string(c.sync_every) + " is not in 1.." +
           std::to_string(kMaxSyncEvery);
    return std::nullopt;
  }
  if (c.fragments == 0 || c.sync_every % c.fragments != 0) {
    *why = "configure: fragments " + std::to_string(c.fragments) +
           " must be >= 1 and divide sync_every " + std::to_string(c.sync_every);
    return std::nullopt;
  }
  if (c.outer > 2 || c.drift > 2 || reserved != 0) {
    *why = "configure: outer must be 0..2, drift 0..2, reserved 0";
    return std::nullopt;
  }
  if (!(std::isfinite(c.outer_lr) && c.outer_lr > 0 && c.outer_lr <= 1e3) ||
      !(c.outer_momentum >= 0 && c.outer_momentum < 1)) {
    *why = "configure: outer_lr must be in (0, 1000], outer_momentum in [0, 1)";
    return std::nullopt;
  }
  return c;
}

}  // namespace

std::optional<Header> DecodeHeader(const uint8_t* d, std::string* why) {
  if (Le(d, 4) != kMagic) {
    *why = "bad magic: not a meshtrain trainer frame";
    return std::nullopt;
  }
  const auto version = static_cast<uint16_t>(Le(d + 4, 2));
  if (version != kVersion) {
    *why = "unsupported protocol version " + std::to_string(version) + " (the agent speaks " +
           std::to_string(kVersion) + ")";
    return std::nullopt;
  }
  Header h;
  h.type = static_cast<uint16_t>(Le(d + 6, 2));
  h.seq = static_cast<uint32_t>(Le(d + 8, 4));
  h.length = static_cast<uint32_t>(Le(d + 12, 4));
  if (h.length > kMaxBody) {
    *why = "frame body of " + std::to_string(h.length) + " bytes is over the limit of " +
           std::to_string(kMaxBody);
    return std::nullopt;
  }
  if (BodySize(h.type) == std::numeric_limits<size_t>::max()) {
    *why = "unknown request type " + std::to_string(h.type);
    return std::nullopt;
  }
  return h;
}

std::optional<Request> DecodeRequest(const Header& h, const uint8_t* b, std::string* why) {
  // PUBLISH may name a fragment of the model: u64 step, u64 begin, u64 end (24 bytes).
  const bool publish_span = h.type == kPublish && h.length == 24;
  if (h.length != BodySize(h.type) && !publish_span) {
    *why = "request type " + std::to_string(h.type) + " needs a body of " +
           std::to_string(BodySize(h.type)) + " bytes, got " + std::to_string(h.length);
    return std::nullopt;
  }
  switch (h.type) {
    case kAttach: {
      Attach a;
      a.num_params = Le(b, 8);
      const auto dtype = static_cast<uint16_t>(Le(b + 8, 2));
      const auto reserved = static_cast<uint16_t>(Le(b + 10, 2));
      const auto flags = static_cast<uint32_t>(Le(b + 12, 4));
      a.resume_step = static_cast<int64_t>(Le(b + 16, 8));
      if (a.num_params == 0 || a.num_params > kMaxParams) {
        *why = "attach: parameter count " + std::to_string(a.num_params) + " is not in 1.." +
               std::to_string(kMaxParams);
        return std::nullopt;
      }
      if (dtype != kDtypeFloat32) {
        *why = "attach: dtype " + std::to_string(dtype) + " is not supported (1 = float32)";
        return std::nullopt;
      }
      if (reserved != 0 || flags != 0) {
        *why = "attach: reserved fields must be 0";
        return std::nullopt;
      }
      if (a.resume_step < -1 || a.resume_step > static_cast<int64_t>(kMaxStep)) {
        *why = "attach: resume step " + std::to_string(a.resume_step) + " out of range";
        return std::nullopt;
      }
      return a;
    }
    case kWaitPermit:
    case kPublish: {
      const uint64_t step = Le(b, 8);
      if (step > kMaxStep) {
        *why = "step " + std::to_string(step) + " out of range";
        return std::nullopt;
      }
      if (h.type == kWaitPermit) return WaitPermit{step};
      Publish p{step, 0, 0};
      if (publish_span) {
        p.begin = Le(b + 8, 8);
        p.end = Le(b + 16, 8);
        if (p.begin >= p.end || p.end > kMaxParams) {
          *why = "publish: fragment [" + std::to_string(p.begin) + ", " + std::to_string(p.end) +
                 ") is empty or out of range";
          return std::nullopt;
        }
      }
      return p;
    }
    case kMix:
      return MixReq{};
    case kEval: {
      EvalReport e{Le(b, 8), F64(b + 8), F64(b + 16)};
      if (e.step > kMaxStep) {
        *why = "eval: step out of range";
        return std::nullopt;
      }
      if (!std::isfinite(e.loss) || e.loss < 0 || e.loss > 1e30) {
        *why = "eval: loss must be finite and >= 0";
        return std::nullopt;
      }
      if (!(e.accuracy >= 0 && e.accuracy <= 1)) {
        *why = "eval: accuracy must be in [0, 1]";
        return std::nullopt;
      }
      return e;
    }
    case kDetach:
      return Detach{};
    case kFinish:
      return Finish{};
    case kConfigure:
      return DecodeConfigure(b, why);
    default:
      *why = "unknown request type " + std::to_string(h.type);
      return std::nullopt;
  }
}

Writer& Writer::Le(uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

Writer& Writer::F64(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  return Le(bits, 8);
}

Writer& Writer::Str(const std::string& s) {
  out_.insert(out_.end(), s.begin(), s.end());
  return *this;
}

std::vector<uint8_t> EncodeFrame(uint16_t type, uint32_t seq, const std::vector<uint8_t>& body) {
  Writer w;
  w.U32(kMagic).U16(kVersion).U16(type).U32(seq).U32(static_cast<uint32_t>(body.size()));
  std::vector<uint8_t> out = w.Take();
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<uint8_t> EncodeError(uint32_t seq, const std::string& message) {
  return EncodeFrame(kError, seq, Writer().Str(message.substr(0, kMaxBody)).Take());
}

}  // namespace meshtrain::daemon::tp
