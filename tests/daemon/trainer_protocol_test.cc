#include "daemon/trainer/trainer_protocol.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>

namespace tp = meshtrain::daemon::tp;

namespace {

std::vector<uint8_t> Header(uint16_t type, uint32_t length, uint16_t version = tp::kVersion,
                            uint32_t magic = tp::kMagic) {
  return tp::Writer().U32(magic).U16(version).U16(type).U32(7).U32(length).Take();
}

std::optional<tp::Request> Decode(uint16_t type, const std::vector<uint8_t>& body,
                                  std::string* why) {
  std::vector<uint8_t> h = Header(type, static_cast<uint32_t>(body.size()));
  auto header = tp::DecodeHeader(h.data(), why);
  if (!header) return std::nullopt;
  return tp::DecodeRequest(*header, body.data(), why);
}

std::vector<uint8_t> AttachBody(uint64_t n, uint16_t dtype = 1, int64_t resume = -1) {
  return tp::Writer().U64(n).U16(dtype).U16(0).U32(0).U64(static_cast<uint64_t>(resume)).Take();
}

std::vector<uint8_t> ConfigureBody(uint32_t every, uint32_t fragments, uint16_t outer,
                                   uint16_t drift, double lr, double momentum,
                                   uint32_t reserved = 0) {
  return tp::Writer()
      .U32(every)
      .U32(fragments)
      .U16(outer)
      .U16(drift)
      .U32(reserved)
      .F64(lr)
      .F64(momentum)
      .Take();
}

}  // namespace

TEST_CASE("trainer protocol: CONFIGURE says how the trainer syncs", "[daemon][trainer_protocol]") {
  std::string why;
  auto c = Decode(tp::kConfigure, ConfigureBody(100, 4, 2, 2, 0.7, 0.9), &why);
  REQUIRE(c);
  const auto& cfg = std::get<tp::Configure>(*c);
  CHECK(cfg.sync_every == 100);
  CHECK(cfg.fragments == 4);
  CHECK(cfg.outer == 2);
  CHECK(std::string(tp::kDriftNames[cfg.drift]) == "gradient");
  CHECK(cfg.outer_lr == 0.7);
  CHECK(cfg.outer_momentum == 0.9);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto bad = [&](std::vector<uint8_t> body) {
    why.clear();
    return !Decode(tp::kConfigure, body, &why) && !why.empty();
  };
  CHECK(bad(ConfigureBody(0, 1, 0, 0, 1, 0)));          // sync_every 0
  CHECK(bad(ConfigureBody(10, 3, 0, 0, 1, 0)));         // 3 does not divide 10
  CHECK(bad(ConfigureBody(10, 0, 0, 0, 1, 0)));         // no fragments
  CHECK(bad(ConfigureBody(10, 1, 3, 0, 1, 0)));         // no such outer rule
  CHECK(bad(ConfigureBody(10, 1, 0, 3, 1, 0)));         // no such drift correction
  CHECK(bad(ConfigureBody(10, 1, 2, 0, nan, 0.9)));     // lr not finite
  CHECK(bad(ConfigureBody(10, 1, 2, 0, 0.7, 1.0)));     // momentum 1
  CHECK(bad(ConfigureBody(10, 1, 2, 0, 0.7, 0.9, 1)));  // reserved
  CHECK(bad(std::vector<uint8_t>(31)));
}

TEST_CASE("trainer protocol: well-formed requests decode", "[daemon][trainer_protocol]") {
  std::string why;
  auto a = Decode(tp::kAttach, AttachBody(1000, 1, 42), &why);
  REQUIRE(a);
  CHECK(std::get<tp::Attach>(*a).num_params == 1000);
  CHECK(std::get<tp::Attach>(*a).resume_step == 42);
  auto w = Decode(tp::kWaitPermit, tp::Writer().U64(5).Take(), &why);
  REQUIRE(w);
  CHECK(std::get<tp::WaitPermit>(*w).step == 5);
  CHECK(Decode(tp::kMix, {}, &why));
  CHECK(Decode(tp::kDetach, {}, &why));
  auto e = Decode(tp::kEval, tp::Writer().U64(3).F64(0.25).F64(0.875).Take(), &why);
  REQUIRE(e);
  CHECK(std::get<tp::EvalReport>(*e).accuracy == 0.875);
  const auto frame = tp::EncodeFrame(tp::kPublish | tp::kReplyBit, 9, {1, 2});
  REQUIRE(frame.size() == tp::kHeaderBytes + 2);
  auto h = tp::DecodeHeader(frame.data(), &why);
  CHECK_FALSE(h);  // a reply type is not a request
}

TEST_CASE("trainer protocol: malformed input is rejected with a reason",
          "[daemon][trainer_protocol]") {
  std::string why;
  auto bad_header = [&](std::vector<uint8_t> h) {
    why.clear();
    return !tp::DecodeHeader(h.data(), &why) && !why.empty();
  };
  CHECK(bad_header(Header(tp::kAttach, 24, tp::kVersion, 0x12345678)));
  CHECK(bad_header(Header(tp::kAttach, 24, 2)));
  CHECK(bad_header(Header(tp::kAttach, tp::kMaxBody + 1)));
  CHECK(bad_header(Header(0, 0)));
  CHECK(bad_header(Header(tp::kError, 0)));
  CHECK_FALSE(Decode(tp::kAttach, AttachBody(0), &why));
  CHECK_FALSE(Decode(tp::kAttach, AttachBody(tp::kMaxParams + 1), &why));
  CHECK_FALSE(Decode(tp::kAttach, AttachBody(10, 2), &why));
  CHECK_FALSE(Decode(tp::kAttach, AttachBody(10, 1, -2), &why));
  CHECK_FALSE(Decode(tp::kAttach, std::vector<uint8_t>(23), &why));
  CHECK_FALSE(Decode(tp::kMix, {0}, &why));
  CHECK_FALSE(Decode(tp::kWaitPermit, tp::Writer().U64(~uint64_t{0}).Take(), &why));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(Decode(tp::kEval, tp::Writer().U64(1).F64(nan).F64(0.5).Take(), &why));
  CHECK_FALSE(Decode(tp::kEval, tp::Writer().U64(1).F64(-1).F64(0.5).Take(), &why));
  CHECK_FALSE(Decode(tp::kEval, tp::Writer().U64(1).F64(0.1).F64(1.5).Take(), &why));
  CHECK_FALSE(Decode(tp::kEval, tp::Writer().U64(1).F64(0.1).F64(nan).Take(), &why));
}

TEST_CASE("trainer protocol: random bytes never crash the decoder", "[daemon][trainer_protocol]") {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(tp::kHeaderBytes + tp::kMaxBody);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    // Half of the cases get a valid magic and version so the body checks are reached.
    if (i % 2 == 0) {
      auto h = Header(static_cast<uint16_t>(1 + rng() % 6), rng() % 30);
      std::copy(h.begin(), h.end(), buf.begin());
    }
    std::string why;
    auto h = tp::DecodeHeader(buf.data(), &why);
    if (!h) continue;
    REQUIRE(h->length <= tp::kMaxBody);
    if (tp::DecodeRequest(*h, buf.data() + tp::kHeaderBytes, &why)) accepted++;
  }
  CHECK(accepted > 0);
}
