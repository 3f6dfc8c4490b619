// Round trips, rejection reasons and size bounds of the wire codec (docs/contract.md "Wire
// format").
#include "wire/codec.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <memory>

#include "tests/wire/crafted.h"
#include "tests/wire/messages.h"
#include "tests/wire/test_keys.h"
#include "wire/compress.h"
#include "wire/crypto.h"
#include "wire/framing.h"
#include "wire/inbound.h"

namespace meshtrain::wire {
namespace {

using testing::CheckSame;
using testing::Gen;
namespace ms = ::meshtrain::membership;

using testing::MakeKeyring;

template <typename T>
std::optional<T> Decode(const Codec& c, const std::vector<uint8_t>& b, Reject* why);
template <>
std::optional<Datagram> Decode(const Codec& c, const std::vector<uint8_t>& b, Reject* why) {
  return c.DecodeDatagram(b.data(), b.size(), why);
}
template <>
std::optional<Frame> Decode(const Codec& c, const std::vector<uint8_t>& b, Reject* why) {
  return c.DecodeFrame(b.data(), b.size(), why);
}

// Decodes and expects rejection for `want`.
template <typename T>
void ExpectReject(const Codec& c, const std::vector<uint8_t>& b, Reject want) {
  REQUIRE_FALSE(b.empty());
  Reject why = Reject::kTooLarge;
  const auto out = Decode<T>(c, b, &why);
  CHECK_FALSE(out.has_value());
  CHECK(RejectName(why) == std::string(RejectName(want)));
}

Datagram PingDatagram() {
  ms::Packet p;
  p.from = "n1";
  p.from_addr = "127.0.0.1:7950";
  p.from_step = 812;
  p.primary = ms::PingMsg{42, "n2"};
  p.updates.push_back(
      ms::AliveMsg{"n3",
                   "10.0.0.3:7950",
                   7,
                   {"10.0.0.3:7960", true, 9.5f, 3, {{"rack", "r1"}, {"zone", "eu-1 \xC3\xA9"}}}});
  p.updates.push_back(ms::SuspectMsg{"n4", 2, "n1"});
  p.updates.push_back(ms::DeadMsg{"n5", 3, "n5"});
  p.updates.push_back(ms::ProgressMsg{"n6", 1234567890123ull, {}});
  return Datagram{"n1", p, 99};
}

Frame ChunkFrame(uint32_t total, uint32_t offset, uint32_t len) {
  ParamChunk c;
  c.round = 3;
  c.step = 40;
  c.chunk = offset / std::max<uint32_t>(len, 1);
  c.chunks = (total + std::max<uint32_t>(len, 1) - 1) / std::max<uint32_t>(len, 1);
  c.total = total;
  c.offset = offset;
  c.data.assign(len, 0.25f);
  return Frame{"n1", c, 5};
}

TEST_CASE("codec: every message kind round-trips, plaintext and sealed", "[gossip][codec]") {
  for (const bool sealed : {false, true}) {
    CAPTURE(sealed);
    Codec codec("default", sealed ? MakeKeyring() : nullptr);

    const Datagram ping = PingDatagram();
    auto bytes = codec.EncodeDatagram(ping);
    REQUIRE_FALSE(bytes.empty());
    CHECK(bytes[0] == (sealed ? kSealedMarker : kPlainMarker));
    auto d = codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr);
    REQUIRE(d);
    CheckSame(ping, *d);

    for (const ms::Primary& primary :
         {ms::Primary{}, ms::Primary{ms::IndirectPingMsg{1, "n9", "[::1]:7950", false}},
          ms::Primary{ms::AckMsg{UINT32_MAX, ""}}, ms::Primary{ms::AckMsg{3, "203.0.113.7:7950"}},
          ms::Primary{ms::NackMsg{5}}, ms::Primary{ms::RelayRegisterMsg{6}}}) {
      Datagram dg = ping;
      std::get<ms::Packet>(dg.body).primary = primary;
      bytes = codec.EncodeDatagram(dg);
      d = codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr);
      REQUIRE(d);
      CheckSame(dg, *d);
    }

    const Datagram query{"n2", ProgressQuery{17, 300}, 1};
    bytes = codec.EncodeDatagram(query);
    d = codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr);
    REQUIRE(d);
    CheckSame(query, *d);

    const Datagram reply{"n3", ProgressReply{17, 301, true}, 2};
    bytes = codec.EncodeDatagram(reply);
    d = codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr);
    REQUIRE(d);
    CheckSame(reply, *d);

    PushPullMsg pp;
    pp.response = true;
    pp.state.join = true;
    pp.state.from = "n1";
    pp.state.members.push_back(
        {"n1", "127.0.0.1:7950", 4, ms::Status::kAlive, {"", true, 1, 2, {}}, 800});
    pp.state.members.push_back({"n2", "127.0.0.2:7950", 1, ms::Status::kLeft, {}, 0});
    pp.state.members.push_back(
        {"n3", "127.0.0.3:7950", 9, ms::Status::kSuspect, {"127.0.0.3:9000", false, 0, 0, {}}, 7});
    const Frame push{"n1", pp, 3};
    bytes = codec.EncodeFrame(push);
    auto f = codec.DecodeFrame(bytes.data(), bytes.size(), nullptr);
    REQUIRE(f);
    CheckSame(push, *f);

    const Frame chunk = ChunkFrame(1000, 500, 250);
    bytes = codec.EncodeFrame(chunk);
    f = codec.DecodeFrame(bytes.data(), bytes.size(), nullptr);
    REQUIRE(f);
    CheckSame(chunk, *f);

    const Frame ack{"n4", ParamAckMsg{77, 812}, 4};
    bytes = codec.EncodeFrame(ack);
    f = codec.DecodeFrame(bytes.data(), bytes.size(), nullptr);
    REQUIRE(f);
    CheckSame(ack, *f);
    // Rounds count from 1: an acknowledgement of round 0 is meaningless.
    const Frame zero{"n4", ParamAckMsg{0, 812}, 4};
    ExpectReject<Frame>(codec, codec.EncodeFrame(zero), Reject::kSemantic);
  }
}

TEST_CASE("codec: random messages round-trip", "[gossip][codec]") {
  Gen gen(20240601);
  for (const bool sealed : {false, true}) {
    Codec codec("prod-eu", sealed ? MakeKeyring() : nullptr);
    for (int i = 0; i < 300; ++i) {
      const Datagram d = gen.RandomDatagram(codec);
      const auto bytes = codec.EncodeDatagram(d);
      REQUIRE_FALSE(bytes.empty());
      const auto back = codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr);
      REQUIRE(back);
      CheckSame(d, *back);

      const Frame f = gen.RandomFrame(20, 2000);
      const auto fbytes = codec.EncodeFrame(f);
      REQUIRE_FALSE(fbytes.empty());
      const auto fback = codec.DecodeFrame(fbytes.data(), fbytes.size(), nullptr);
      REQUIRE(fback);
      CheckSame(f, *fback);
    }
  }
}

TEST_CASE("codec: envelope mismatches are rejected with their reason", "[gossip][codec]") {
  const auto key_a = MakeKeyring();
  const auto key_b = MakeKeyring();
  Codec plain("default", nullptr);
  Codec other_cluster("staging", nullptr);
  Codec sealed_a("default", key_a);
  Codec sealed_a_other_cluster("staging", key_a);
  Codec sealed_b("default", key_b);
  const Datagram ping = PingDatagram();

  SECTION("cluster mismatch, plaintext") {
    ExpectReject<Datagram>(plain, other_cluster.EncodeDatagram(ping), Reject::kCluster);
  }
  SECTION("cluster mismatch, sealed: the label is the AEAD associated data") {
    ExpectReject<Datagram>(sealed_a, sealed_a_other_cluster.EncodeDatagram(ping), Reject::kAuth);
  }
  SECTION("wrong key") {
    ExpectReject<Datagram>(sealed_a, sealed_b.EncodeDatagram(ping), Reject::kAuth);
    ExpectReject<Frame>(sealed_b, sealed_a.EncodeFrame(ChunkFrame(10, 0, 10)), Reject::kAuth);
  }
  SECTION("plaintext to an encrypted agent and sealed to a plaintext agent") {
    ExpectReject<Datagram>(sealed_a, plain.EncodeDatagram(ping), Reject::kAuth);
    ExpectReject<Datagram>(plain, sealed_a.EncodeDatagram(ping), Reject::kAuth);
    ExpectReject<Frame>(sealed_a, plain.EncodeFrame(ChunkFrame(10, 0, 10)), Reject::kAuth);
    ExpectReject<Frame>(plain, sealed_a.EncodeFrame(ChunkFrame(10, 0, 10)), Reject::kAuth);
  }
  SECTION("protocol version") {
    Codec v2("default", nullptr);
    v2.set_send_version(2);
    ExpectReject<Datagram>(plain, v2.EncodeDatagram(ping), Reject::kVersion);
    v2.set_send_version(0);
    ExpectReject<Frame>(plain, v2.EncodeFrame(ChunkFrame(10, 0, 10)), Reject::kVersion);
  }
  SECTION("a datagram body in a frame and a frame body in a datagram") {
    ExpectReject<Frame>(plain, plain.EncodeDatagram(ping), Reject::kSemantic);
    ExpectReject<Datagram>(plain, plain.EncodeFrame(ChunkFrame(10, 0, 10)), Reject::kSemantic);
  }
  SECTION("sizes") {
    std::vector<uint8_t> big(kMaxDatagramBytes + 1, kPlainMarker);
    ExpectReject<Datagram>(plain, big, Reject::kTooLarge);
    ExpectReject<Datagram>(plain, {kPlainMarker, 1, 2}, Reject::kTooSmall);
    ExpectReject<Datagram>(sealed_a, std::vector<uint8_t>(kSealOverhead + 4, kSealedMarker),
                           Reject::kTooSmall);
    Reject why = Reject::kAuth;
    CHECK_FALSE(plain.DecodeDatagram(nullptr, 0, &why));
    CHECK(why == Reject::kTooSmall);
    std::vector<uint8_t> huge(plain.max_frame_bytes() + 1, kPlainMarker);
    ExpectReject<Frame>(plain, huge, Reject::kTooLarge);
  }
  SECTION("garbage after a valid marker fails verification") {
    std::vector<uint8_t> junk(200, 0x5A);
    junk[0] = kPlainMarker;
    ExpectReject<Datagram>(plain, junk, Reject::kVerify);
    // The same garbage behind a valid seal reaches the verifier too.
    ExpectReject<Datagram>(sealed_a, key_a->Seal(junk.data(), junk.size(), "default"),
                           Reject::kVerify);
  }
}

TEST_CASE("codec: semantic checks", "[gossip][codec]") {
  Codec codec("default", nullptr);

  SECTION("sender name") {
    for (const std::string& bad :
         {std::string(), std::string(kMaxSenderBytes + 1, 'x'), std::string("n\n1")}) {
      Datagram d{bad, ProgressQuery{1, 2}};
      ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
    }
    Datagram ok{std::string(kMaxSenderBytes, 'x'), ProgressQuery{1, 2}};
    CHECK(codec.DecodeDatagram(codec.EncodeDatagram(ok).data(), codec.EncodeDatagram(ok).size(),
                               nullptr));
  }
  SECTION("addresses") {
    for (const char* bad : {"", "nonsense", "1.2.3.4", "1.2.3.4:0", "1.2.3.4:65536", "256.1.1.1:80",
                            "1.2.3.4:80x", ":80", "[::1]", "[zz::1]:80", "localhost:80"}) {
      CAPTURE(bad);
      Datagram d = PingDatagram();
      std::get<ms::Packet>(d.body).from_addr = bad;
      ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
    }
    CHECK(ValidWireAddr("127.0.0.1:1"));
    CHECK(ValidWireAddr("10.1.2.3:65535"));
    CHECK(ValidWireAddr("[fe80::1]:7950"));
    Datagram d = PingDatagram();
    std::get<ms::AliveMsg>(std::get<ms::Packet>(d.body).updates[0]).meta.data_addr = "x:1";
    ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
    // The address an ack says it saw the ping come from.
    d = PingDatagram();
    std::get<ms::Packet>(d.body).primary = ms::AckMsg{1, "1.2.3.4:0"};
    ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
  }
  SECTION("reachability: a value past nat is refused") {
    Datagram d = PingDatagram();
    std::get<ms::AliveMsg>(std::get<ms::Packet>(d.body).updates[0]).meta.reach =
        static_cast<ms::Reach>(3);
    ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
    std::get<ms::AliveMsg>(std::get<ms::Packet>(d.body).updates[0]).meta.reach = ms::Reach::kNat;
    const auto bytes = codec.EncodeDatagram(d);
    const auto back = codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr);
    REQUIRE(back);
    CHECK(std::get<ms::AliveMsg>(std::get<ms::Packet>(back->body).updates[0]).meta.reach ==
          ms::Reach::kNat);
  }
  SECTION("member names inside updates") {
    Datagram d = PingDatagram();
    std::get<ms::Packet>(d.body).updates.push_back(ms::ProgressMsg{"", 1, {}});
    ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
    d = PingDatagram();
    std::get<ms::Packet>(d.body).updates.push_back(
        ms::ProgressMsg{std::string(kMaxStringBytes + 1, 'n'), 1, {}});
    ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
  }
  SECTION("published evaluations") {
    for (const ms::Eval& bad :
         {ms::Eval{3, 1.5f, 0.2f}, ms::Eval{3, 0.5f, -3.0f}, ms::Eval{3, 0.5f, std::nanf("")},
          ms::Eval{3, 0.5f, std::numeric_limits<float>::infinity()}}) {
      Datagram d = PingDatagram();
      std::get<ms::Packet>(d.body).updates.push_back(ms::ProgressMsg{"n2", 5, bad});
      ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
    }
    Datagram d = PingDatagram();
    std::get<ms::Packet>(d.body).updates.push_back(ms::ProgressMsg{"n2", 5, {4, 0.25f, 1.5f}});
    const auto bytes = codec.EncodeDatagram(d);
    auto back = codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr);
    REQUIRE(back);
    const auto& ups = std::get<ms::Packet>(back->body).updates;
    CHECK(std::get<ms::ProgressMsg>(ups.back()).eval == ms::Eval{4, 0.25f, 1.5f});
  }
  SECTION("operator tags in metadata") {
    using Tags = std::vector<std::pair<std::string, std::string>>;
    const std::vector<Tags> bad = {
        {{"b", "1"}, {"a", "2"}},                          // unsorted
        {{"a", "1"}, {"a", "2"}},                          // duplicate key
        {{"", "1"}},                                       // empty key
        {{"k y", "1"}},                                    // key outside [A-Za-z0-9_.-]
        {{std::string(kMaxTagKeyBytes + 1, 'k'), ""}},     // long key
        {{"k", std::string(kMaxTagValueBytes + 1, 'v')}},  // long value
        {{"k", "a\nb"}},                                   // control character
        {{"k", "\xff"}},                                   // invalid UTF-8
    };
    for (const Tags& tags : bad) {
      CHECK_FALSE(ValidTags(tags));
      Datagram d = PingDatagram();
      std::get<ms::AliveMsg>(std::get<ms::Packet>(d.body).updates[0]).meta.tags = tags;
      ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
    }
    Tags many;
    for (size_t i = 0; i <= kMaxTags; ++i) many.emplace_back("k" + std::to_string(i), "v");
    CHECK_FALSE(ValidTags(many));
    many.pop_back();
    CHECK(ValidTags(many));
    CHECK(ValidTags({{"a.b-c_D9", ""}, {"zone", "eu \xC3\xA9"}}));
  }
  SECTION("non-finite bandwidth in metadata") {
    Datagram d = PingDatagram();
    std::get<ms::AliveMsg>(std::get<ms::Packet>(d.body).updates[0]).meta.uplink_mbps =
        std::numeric_limits<float>::quiet_NaN();
    ExpectReject<Datagram>(codec, codec.EncodeDatagram(d), Reject::kSemantic);
  }
  SECTION("member status out of range") {
    PushPullMsg pp;
    pp.state.members.push_back({"n1", "1.1.1.1:1", 0, static_cast<ms::Status>(4), {}, 0});
    ExpectReject<Frame>(codec, codec.EncodeFrame(Frame{"n1", pp}), Reject::kSemantic);
  }
  SECTION("push-pull member count") {
    PushPullMsg pp;
    pp.state.members.assign(kMaxPushPullMembers + 1, {"m", "1.1.1.1:1", 0, {}, {}, 0});
    // The encoder refuses to build it; a hostile peer could, and the decoder is the last word.
    CHECK(codec.EncodeFrame(Frame{"n1", pp}).empty());
  }
  SECTION("parameter chunks") {
    CHECK(codec.DecodeFrame(codec.EncodeFrame(ChunkFrame(1000, 750, 250)).data(),
                            codec.EncodeFrame(ChunkFrame(1000, 750, 250)).size(), nullptr));
    Frame f = ChunkFrame(1000, 750, 250);
    std::get<ParamChunk>(f.body).chunk = 4;  // == chunks
    ExpectReject<Frame>(codec, codec.EncodeFrame(f), Reject::kSemantic);
    f = ChunkFrame(1000, 751, 250);  // past the end
    ExpectReject<Frame>(codec, codec.EncodeFrame(f), Reject::kSemantic);
    f = ChunkFrame(1000, 0, 0);  // empty
    ExpectReject<Frame>(codec, codec.EncodeFrame(f), Reject::kSemantic);
    f = ChunkFrame(1000, 0, 250);
    std::get<ParamChunk>(f.body).total = 0;
    ExpectReject<Frame>(codec, codec.EncodeFrame(f), Reject::kSemantic);
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      f = ChunkFrame(1000, 0, 250);
      std::get<ParamChunk>(f.body).data[123] = bad;
      ExpectReject<Frame>(codec, codec.EncodeFrame(f), Reject::kSemantic);
    }
    // The local model's size is enforced once known.
    codec.set_expected_params(1000);
    CHECK(codec.DecodeFrame(codec.EncodeFrame(ChunkFrame(1000, 0, 250)).data(),
                            codec.EncodeFrame(ChunkFrame(1000, 0, 250)).size(), nullptr));
    ExpectReject<Frame>(codec, codec.EncodeFrame(ChunkFrame(1001, 0, 250)), Reject::kSemantic);
  }
}

TEST_CASE("codec: the largest parameter chunk fits in a sealed frame", "[gossip][codec]") {
  Gen gen(7);
  Codec codec(std::string(kMaxClusterBytes, 'c'), MakeKeyring());
  const std::vector<float> params = gen.Floats(2 * kParamChunkFloats + 17);
  const auto chunks = SplitParams(params, 9, 100);
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[2].data.size() == 17);
  ParamAssembler assembler;
  std::optional<ParamAssembler::Model> model;
  // Out of order on purpose.
  for (size_t i : {2, 0, 1}) {
    const auto bytes = codec.EncodeFrame(Frame{std::string(kMaxSenderBytes, 's'), chunks[i]});
    REQUIRE_FALSE(bytes.empty());
    CHECK(bytes.size() <= kMaxParamFrameBytes);
    const auto back = codec.DecodeFrame(bytes.data(), bytes.size(), nullptr);
    REQUIRE(back);
    CHECK_FALSE(model);
    model = assembler.Add(std::get<ParamChunk>(back->body));
  }
  REQUIRE(model);
  CHECK(model->round == 9);
  CHECK(model->step == 100);
  CHECK(model->params == params);
  CHECK(kMaxParamFrameBytes <= kMaxFrameBytes);
}

TEST_CASE("codec: a plain chunk's head and its floats make the frame", "[gossip][codec]") {
  // EncodeChunkHead: the frame up to a view chunk's floats, which then go out from the view.
  std::vector<float> params(300000);
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i) * 0.25f - 7.0f;
  Codec codec("default", nullptr);
  const auto total = static_cast<uint32_t>(params.size());
  for (uint32_t floats : {1u, 3u, 1000u, kParamChunkFloats}) {
    for (uint32_t index : {0u, StreamChunks(total, floats) - 1}) {
      INFO(floats << " floats a chunk, chunk " << index);
      ParamChunk c = EncodeStreamChunk(params.data(), total, index, CompressSpec{}, 5, 9, floats);
      REQUIRE(c.view != nullptr);
      c.final = index == 0;
      const Frame f{"n1", c, 1};
      const auto whole = codec.EncodeFrame(f);
      const auto head = codec.EncodeChunkHead(f);
      REQUIRE_FALSE(head.empty());
      std::vector<uint8_t> joined = head;
      const auto* tail = reinterpret_cast<const uint8_t*>(c.view);
      joined.insert(joined.end(), tail, tail + size_t{c.count} * sizeof(float));
      CHECK(joined == whole);
      auto back = codec.DecodeFrame(joined.data(), joined.size(), nullptr);
      REQUIRE(back);
      CHECK(std::get<ParamChunk>(back->body).data == std::vector<float>(c.view, c.view + c.count));
    }
  }
  // No head where the values cannot be sent as they are: sealed, or no view.
  Codec sealed("default", MakeKeyring());
  ParamChunk c = EncodeStreamChunk(params.data(), total, 0, CompressSpec{}, 5, 9, 1000);
  CHECK(sealed.EncodeChunkHead(Frame{"n1", c, 1}).empty());
  c.data.assign(c.view, c.view + c.count);
  c.view = nullptr;
  CHECK(codec.EncodeChunkHead(Frame{"n1", c, 1}).empty());
}

TEST_CASE("codec: a fragment transfer covers its range only and says so", "[gossip][codec]") {
  std::vector<float> params(10000);
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i);
  const auto total = static_cast<uint32_t>(params.size());
  const StreamSpan span{2500, 5000};
  for (const char* enc : {"none", "fp16", "int8", "sparse"}) {
    INFO(enc);
    const CompressSpec spec = *ParseCompress(enc);
    const uint32_t chunks = StreamChunks(total, 1000, span);
    CHECK(chunks == 3);  // 1000 + 1000 + 500
    CHECK(StreamChunks(total, 1000) == 10);
    uint64_t covered = 0, bytes = 0;
    Codec codec("default", nullptr);
    for (uint32_t i = 0; i < chunks; ++i) {
      ParamChunk c = EncodeStreamChunk(params.data(), total, i, spec, 5, 9, 1000, span);
      CHECK(c.fragment);
      CHECK(c.chunks == chunks);
      CHECK(c.total == total);
      CHECK(c.offset == 2500 + 1000 * i);
      covered += c.count;
      bytes += ChunkWireBytes(c);
      if (c.view != nullptr) {
        c.data.assign(c.view, c.view + c.count);
        c.view = nullptr;
      }
      const auto wire = codec.EncodeFrame(Frame{"n1", c, 1});
      auto back = codec.DecodeFrame(wire.data(), wire.size(), nullptr);
      REQUIRE(back);
      const auto& d = std::get<ParamChunk>(back->body);
      CHECK(d.fragment);
      CHECK(d.offset == c.offset);
      CHECK(d.chunks == chunks);
    }
    CHECK(covered == 2500);
    CHECK(bytes == StreamWireBytes(params.data(), total, spec, 1000, span));
  }
  // The whole model, or a span that names none, is not a fragment.
  CHECK_FALSE(EncodeStreamChunk(params.data(), total, 0, CompressSpec{}, 5, 9, 1000).fragment);
  CHECK_FALSE(
      EncodeStreamChunk(params.data(), total, 0, CompressSpec{}, 5, 9, 1000, {0, total}).fragment);
  CHECK(StreamChunks(total, 1000, {7000, 3000}) == 10);  // begin >= end: the whole model
}

TEST_CASE("codec: parameter reassembly ignores stale, duplicate and overlapping chunks",
          "[gossip][codec]") {
  const std::vector<float> a(10, 1.0f), b(10, 2.0f);
  const auto ca = SplitParams(a, 1, 10, 4);  // 4 + 4 + 2
  const auto cb = SplitParams(b, 2, 20, 4);
  REQUIRE(ca.size() == 3);
  ParamAssembler asm_;
  CHECK_FALSE(asm_.Add(ca[0]));
  CHECK_FALSE(asm_.Add(ca[0]));  // duplicate
  CHECK_FALSE(asm_.Add(cb[1]));  // round 2 supersedes the unfinished round 1
  CHECK_FALSE(asm_.Add(ca[1]));  // stale
  CHECK_FALSE(asm_.Add(ca[2]));
  CHECK_FALSE(asm_.Add(cb[0]));
  auto m = asm_.Add(cb[2]);
  REQUIRE(m);
  CHECK(m->round == 2);
  CHECK(m->params == b);
  CHECK_FALSE(asm_.Add(cb[2]));  // late duplicate of a finished round

  // The sender restarted: its rounds count from 0 again, starting with chunk 0.
  CHECK_FALSE(asm_.Add(SplitParams(a, 0, 1, 4)[1]));  // not chunk 0: stale
  const auto restarted = SplitParams(a, 0, 1, 4);
  CHECK_FALSE(asm_.Add(restarted[0]));
  CHECK_FALSE(asm_.Add(restarted[1]));
  m = asm_.Add(restarted[2]);
  REQUIRE(m);
  CHECK(m->round == 0);
  CHECK(m->params == a);

  // Chunks that claim to complete the model but overlap leave a gap: dropped.
  ParamChunk x = cb[0], y = cb[1], z = cb[2];
  for (ParamChunk* c : {&x, &y, &z}) c->round = 3;
  asm_.Reset();
  y.offset = 0;  // overlaps x; floats 4..7 never arrive
  z.data.resize(4);
  z.offset = 6;
  CHECK_FALSE(asm_.Add(x));
  CHECK_FALSE(asm_.Add(y));
  CHECK_FALSE(asm_.Add(z));
  CHECK_FALSE(asm_.in_progress());
}

// docs/contract.md "Wire format": the membership core fills datagrams from EstimatePacketOverhead +
// EstimateSize without encoding; the encoding must never be larger, or full packets would not fit.
TEST_CASE("codec: encoded datagrams never exceed the membership size estimates",
          "[gossip][codec]") {
  Gen gen(99);
  size_t max_bytes = 0, min_slack = SIZE_MAX, packets = 0, updates = 0;
  for (const bool sealed : {false, true}) {
    for (const std::string& cluster :
         {std::string("default"), std::string(kMaxClusterBytes, 'k')}) {
      Codec codec(cluster, sealed ? MakeKeyring() : nullptr);
      const size_t budget = kMaxDatagramBytes - codec.DatagramOverhead();
      for (int i = 0; i < 2000; ++i) {
        // Long member names (up to kMaxStringBytes) stress the per-string padding.
        const size_t max_name = i % 2 ? kMaxSenderBytes : kMaxStringBytes;
        const std::string sender = gen.Name();
        const ms::Packet p = gen.Packet(sender, budget, max_name);
        size_t bound = ms::EstimatePacketOverhead(p) + codec.DatagramOverhead();
        for (const ms::Update& u : p.updates) bound += ms::EstimateSize(u);
        REQUIRE(bound <= kMaxDatagramBytes);
        const auto bytes = codec.EncodeDatagram(Datagram{sender, p, gen.U(0, UINT64_MAX)});
        REQUIRE_FALSE(bytes.empty());
        REQUIRE(bytes.size() <= bound);
        max_bytes = std::max(max_bytes, bytes.size());
        min_slack = std::min(min_slack, bound - bytes.size());
        ++packets;
        updates += p.updates.size();
      }
    }
  }
  // Envelope-only bound: an empty packet with the longest sender and cluster.
  Codec codec(std::string(kMaxClusterBytes, 'k'), MakeKeyring());
  ms::Packet empty{std::string(kMaxSenderBytes, 's'), "255.255.255.255:65535", UINT64_MAX, {}, {}};
  const auto bytes = codec.EncodeDatagram(Datagram{empty.from, empty, UINT64_MAX});
  CHECK(bytes.size() <= ms::EstimatePacketOverhead(empty) + codec.DatagramOverhead());
  WARN("size bound: " << packets << " packets, " << updates << " updates, largest " << max_bytes
                      << " B, smallest slack " << min_slack
                      << " B; DatagramOverhead(sealed, 'default') = "
                      << Codec("default", MakeKeyring()).DatagramOverhead() << " B");
}

TEST_CASE("codec: the wall clock stamps messages whose sent_ms is unset", "[gossip][codec]") {
  Codec codec("default", nullptr);
  const Datagram unset{"n1", ProgressQuery{1, 2}};
  auto bytes = codec.EncodeDatagram(unset);
  CHECK(codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr)->sent_ms == 0);  // no clock
  uint64_t now = 1700000000123;
  codec.set_wall_clock([&now] { return now; });
  bytes = codec.EncodeDatagram(unset);
  CHECK(codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr)->sent_ms == now);
  now += 5;
  bytes = codec.EncodeFrame(Frame{"n1", KeyOpMsg{KeyOpKind::kList, std::nullopt, 3}});
  CHECK(codec.DecodeFrame(bytes.data(), bytes.size(), nullptr)->sent_ms == now);
  // An explicit time wins (the caller may stamp it itself).
  bytes = codec.EncodeDatagram(Datagram{"n1", ProgressQuery{1, 2}, 42});
  CHECK(codec.DecodeDatagram(bytes.data(), bytes.size(), nullptr)->sent_ms == 42);
}

TEST_CASE("codec: reject names and counters", "[gossip][codec]") {
  RejectCounters counters;
  for (size_t i = 0; i < kNumRejects; ++i) {
    const auto r = static_cast<Reject>(i);
    CHECK(std::string(RejectName(r)) != "unknown");
    for (size_t k = 0; k <= i; ++k) counters.add(r);
  }
  CHECK(counters.get(Reject::kTooLarge) == 1);
  CHECK(counters.get(Reject::kSemantic) == 7);
  CHECK(counters.get(Reject::kRateLimited) == kNumRejects);  // the last reason
  CHECK(std::string(RejectName(Reject::kReplay)) == "replay");
  CHECK(std::string(RejectName(Reject::kRateLimited)) == "rate_limited");
  CHECK(counters.total() == kNumRejects * (kNumRejects + 1) / 2);
  CHECK(ValidClusterLabel("default"));
  CHECK_FALSE(ValidClusterLabel(""));
  CHECK_FALSE(ValidNodeName(std::string(kMaxSenderBytes + 1, 'n')));
}

}  // namespace
}  // namespace meshtrain::wire

namespace meshtrain::wire {
namespace {

// Buffers a hostile peer could build (tests/wire/crafted.h), plaintext and sealed.
TEST_CASE("codec: relay frames carry a sealed datagram unchanged; nesting is refused",
          "[gossip][codec][relay]") {
  for (const bool sealed : {false, true}) {
    CAPTURE(sealed);
    Codec codec("default", sealed ? MakeKeyring() : nullptr);
    codec.set_session(0x1234);
    Inbound inbound(&codec);
    // A relayed node's metadata travels with the relay's name.
    Datagram ping = PingDatagram();
    auto& alive = std::get<ms::AliveMsg>(std::get<ms::Packet>(ping.body).updates[0]);
    alive.meta.relay = "r1";
    alive.meta.serves_relay = true;
    const std::vector<uint8_t> inner = codec.EncodeDatagram(ping);
    REQUIRE_FALSE(inner.empty());
    Datagram frame{"n7", RelayFrame{"n2", inner}, 5};
    const auto bytes = codec.EncodeDatagram(frame);
    REQUIRE_FALSE(bytes.empty());
    auto d = inbound.OnDatagram(bytes.data(), bytes.size(), "10.0.0.7:7950", 1.0);
    REQUIRE(d);
    const auto& rf = std::get<RelayFrame>(d->body);
    CHECK(rf.dest == "n2");
    CHECK(rf.inner == inner);  // the bytes as sealed by their sender
    auto in = inbound.OnRelayed(rf.inner.data(), rf.inner.size(), "10.0.0.7:7950", 1.0);
    REQUIRE(in);
    CheckSame(ping, *in);
    CHECK(std::get<ms::AliveMsg>(std::get<ms::Packet>(in->body).updates[0]).meta.relay == "r1");
    // The same inner bytes again: a replay.
    CHECK_FALSE(inbound.OnRelayed(rf.inner.data(), rf.inner.size(), "10.0.0.7:7950", 1.0));
    CHECK(inbound.rejects().get(Reject::kReplay) == 1);
    // A relay frame inside a relay frame is refused and counted.
    const auto nested = codec.EncodeDatagram(frame);
    CHECK_FALSE(inbound.OnRelayed(nested.data(), nested.size(), "10.0.0.7:7950", 1.0));
    CHECK(inbound.nested() == 1);
    CHECK(inbound.rejects().get(Reject::kSemantic) == 1);
    // Oversized inner bytes are refused before decoding.
    const std::vector<uint8_t> big(kMaxRelayInnerBytes + 1, 0x5A);
    CHECK_FALSE(inbound.OnRelayed(big.data(), big.size(), "10.0.0.7:7950", 1.0));
    CHECK(inbound.rejects().get(Reject::kTooLarge) == 1);
    // The encoder refuses what the decoder would: a bad destination, too many inner bytes.
    CHECK(codec.EncodeDatagram(Datagram{"n7", RelayFrame{"", inner}, 5}).empty());
    CHECK(codec.EncodeDatagram(Datagram{"n7", RelayFrame{"n\n2", inner}, 5}).empty());
    CHECK(codec.EncodeDatagram(Datagram{"n7", RelayFrame{"n2", big}, 5}).empty());
    // A relay name that is not a member name is refused in metadata.
    alive.meta.relay = std::string(kMaxSenderBytes + 1, 'r');
    ExpectReject<Datagram>(codec, codec.EncodeDatagram(ping), Reject::kSemantic);
    alive.meta.relay = "r\x7f";
    ExpectReject<Datagram>(codec, codec.EncodeDatagram(ping), Reject::kSemantic);
  }
}

TEST_CASE("codec: hand-crafted envelopes get the expected verdict", "[gossip][codec]") {
  const auto cases = testing::CraftedCases();
  for (const bool sealed : {false, true}) {
    const auto keyring = sealed ? MakeKeyring() : nullptr;
    Codec codec("default", keyring);
    for (const auto& c : cases) {
      CAPTURE(sealed, c.what);
      std::vector<uint8_t> bytes;
      if (sealed) {
        bytes = keyring->Seal(c.fb.data(), c.fb.size(), "default");
      } else {
        bytes.push_back(kPlainMarker);
        bytes.insert(bytes.end(), c.fb.begin(), c.fb.end());
      }
      Reject why = Reject::kTooLarge;
      const bool ok = c.frame ? codec.DecodeFrame(bytes.data(), bytes.size(), &why).has_value()
                              : codec.DecodeDatagram(bytes.data(), bytes.size(), &why).has_value();
      CHECK(ok == !c.want.has_value());
      if (!ok && c.want) CHECK(std::string(RejectName(why)) == RejectName(*c.want));
    }
  }
}

}  // namespace

TEST_CASE("codec: a final model's chunks say so, others do not", "[gossip][codec]") {
  Codec codec("default", nullptr);
  for (const bool final : {false, true}) {
    Frame f = ChunkFrame(64, 0, 64);
    std::get<ParamChunk>(f.body).final = final;
    const auto bytes = codec.EncodeFrame(f);
    auto d = codec.DecodeFrame(bytes.data(), bytes.size(), nullptr);
    REQUIRE(d);
    CHECK(std::get<ParamChunk>(d->body).final == final);
    ParamAssembler asm_;
    auto model = asm_.Add(std::get<ParamChunk>(d->body));
    REQUIRE(model);
    CHECK(model->final == final);
  }
}

}  // namespace meshtrain::wire
