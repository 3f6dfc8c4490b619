// UTF-8 at the edge: the strict validator, and every string field of every decoded
// message refusing bytes that are not valid UTF-8 (which a JSON serializer would choke on).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "wire/codec.h"
#include "wire/messages.h"

namespace meshtrain::wire {
namespace {

namespace ms = ::meshtrain::membership;

const std::string kBad = "\xff\xfe\xfd";  // invalid UTF-8 (0xff never occurs in it)

TEST_CASE("utf8: the validator is strict", "[gossip][utf8]") {
  for (const char* ok :
       {"", "n1", "caf\xc3\xa9", "\xe2\x82\xac", "\xed\x9f\xbf" /* U+D7FF */,
        "\xee\x80\x80" /* U+E000 */, "\xef\xbf\xbf" /* U+FFFF */, "\xf0\x90\x80\x80" /* U+10000 */,
        "\xf4\x8f\xbf\xbf" /* U+10FFFF */, "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80"}) {
    CAPTURE(ok);
    CHECK(ValidUtf8(ok));
  }
  const std::vector<std::string> bad = {
      "\xff\xfe\xfd",
      "\x80",              // stray continuation
      "a\xbf",             // stray continuation
      "\xc0\xaf",          // overlong '/'
      "\xc1\xbf",          // overlong
      "\xe0\x80\xaf",      // overlong 3-byte
      "\xe0\x9f\xbf",      // overlong 3-byte (U+07FF)
      "\xf0\x80\x80\xaf",  // overlong 4-byte
      "\xf0\x8f\xbf\xbf",  // overlong 4-byte (U+FFFF)
      "\xed\xa0\x80",      // U+D800 (high surrogate)
      "\xed\xbf\xbf",      // U+DFFF (low surrogate)
      "\xf4\x90\x80\x80",  // U+110000
      "\xf5\x80\x80\x80",  // lead byte beyond U+10FFFF
      "\xf8\x88\x80\x80\x80",
      "\xc3",              // truncated
      "\xe2\x82",          // truncated
      "\xf0\x90\x80",      // truncated
      "\xc3\x28",          // bad continuation
      "\xe2\x28\xa1",      // bad continuation
      "\xf0\x90\x28\xbc",  // bad continuation
      std::string("ok\0\xff", 4),
  };
  for (const std::string& b : bad) {
    CAPTURE(b);
    CHECK_FALSE(ValidUtf8(b));
    CHECK_FALSE(NoControlChars(b));
    CHECK_FALSE(ValidName(b, 64));
    CHECK_FALSE(ValidNodeName(b));
    CHECK_FALSE(ValidClusterLabel(b));
    CHECK_FALSE(ValidAddr(b + ":80"));
  }
  // Control characters, C0, DEL and C1 (U+0080..U+009F), are refused in names.
  for (const char* ctl : {"a\nb", "\x7f", "\xc2\x9b[2J", "\xc2\x80"}) {
    CAPTURE(ctl);
    CHECK_FALSE(NoControlChars(ctl));
  }
  CHECK(NoControlChars("\xc2\xa0 caf\xc3\xa9"));
}

TEST_CASE("utf8: every string field of a datagram is checked", "[gossip][utf8]") {
  for (const bool sealed : {false, true}) {
    CAPTURE(sealed);
    std::shared_ptr<Keyring> keyring;
    if (sealed) keyring = std::make_shared<Keyring>(*ParseKeyBase64(GenerateKeyBase64()));
    Codec codec("default", keyring);
    codec.set_session(42);
    auto expect_semantic = [&](const Datagram& d) {
      const auto wire = codec.EncodeDatagram(d);
      REQUIRE_FALSE(wire.empty());
      Reject why{};
      CHECK_FALSE(codec.DecodeDatagram(wire.data(), wire.size(), &why));
      CHECK(why == Reject::kSemantic);
    };
    const auto packet = [](std::vector<ms::Update> updates, ms::Primary primary = {}) {
      ms::Packet p;
      p.from_addr = "127.0.0.1:7950";
      p.primary = std::move(primary);
      p.updates = std::move(updates);
      return p;
    };
    // Sanity: the same messages with valid names are accepted.
    const Datagram good{"n1", packet({ms::AliveMsg{"n\xc3\xa9", "127.0.0.1:1", 1, {}},
                                      ms::SuspectMsg{"n2", 1, "n3"}, ms::DeadMsg{"n2", 1, "n3"},
                                      ms::ProgressMsg{"n2", 5, {}}},
                                     ms::PingMsg{1, "n2"})};
    const auto wire = codec.EncodeDatagram(good);
    REQUIRE(codec.DecodeDatagram(wire.data(), wire.size(), nullptr));

    expect_semantic(Datagram{kBad, ProgressQuery{1, 2}});
    expect_semantic(Datagram{"n1", packet({ms::AliveMsg{kBad, "127.0.0.1:1", 1, {}}})});
    expect_semantic(Datagram{"n1", packet({ms::SuspectMsg{kBad, 1, "n3"}})});
    expect_semantic(Datagram{"n1", packet({ms::SuspectMsg{"n2", 1, kBad}})});
    expect_semantic(Datagram{"n1", packet({ms::DeadMsg{kBad, 1, "n3"}})});
    expect_semantic(Datagram{"n1", packet({ms::DeadMsg{"n2", 1, kBad}})});
    expect_semantic(Datagram{"n1", packet({ms::ProgressMsg{kBad, 1, {}}})});
    expect_semantic(Datagram{"n1", packet({}, ms::PingMsg{1, kBad})});
    expect_semantic(Datagram{"n1", packet({}, ms::IndirectPingMsg{1, kBad, "127.0.0.1:1"})});
    expect_semantic(Datagram{"n1", packet({}, ms::IndirectPingMsg{1, "n2", kBad + ":1"})});
    ms::Meta meta;
    meta.data_addr = "127.0.0.1:" + kBad;
    expect_semantic(Datagram{"n1", packet({ms::AliveMsg{"n2", "127.0.0.1:1", 1, meta}})});
    Datagram bad_addr{"n1", packet({})};
    std::get<ms::Packet>(bad_addr.body).from_addr = kBad + ":1";
    expect_semantic(bad_addr);
  }
}

TEST_CASE("utf8: every string field of a frame is checked", "[gossip][utf8]") {
  Codec codec("default", nullptr);
  auto expect_semantic = [&](const Frame& f) {
    const auto wire = codec.EncodeFrame(f);
    REQUIRE_FALSE(wire.empty());
    Reject why{};
    CHECK_FALSE(codec.DecodeFrame(wire.data(), wire.size(), &why));
    CHECK(why == Reject::kSemantic);
  };
  PushPullMsg pp;
  pp.state.members.push_back({"n1", "127.0.0.1:1", 1, ms::Status::kAlive, {}, 0});
  Frame f{"n1", pp};
  auto wire = codec.EncodeFrame(f);
  REQUIRE(codec.DecodeFrame(wire.data(), wire.size(), nullptr));

  PushPullMsg bad = pp;
  bad.state.members[0].name = kBad;
  expect_semantic(Frame{"n1", bad});
  bad = pp;
  bad.state.members[0].meta.data_addr = kBad;
  expect_semantic(Frame{"n1", bad});
  expect_semantic(Frame{kBad, pp});

  ParamChunk chunk;
  chunk.chunks = 1;
  chunk.total = 2;
  chunk.data = {1.0f, 2.0f};
  expect_semantic(Frame{kBad, chunk});
  expect_semantic(Frame{"n1\xc0\xaf", ParamAckMsg{1, 2}});

  // KeyOpReply error text: the encoder refuses it, so craft it with a valid one and patch the
  // bytes in place (same length, plaintext).
  KeyOpReplyMsg reply;
  reply.seq = 1;
  reply.error = "zzz";
  wire = codec.EncodeFrame(Frame{"n1", reply});
  REQUIRE_FALSE(wire.empty());
  const std::string zzz = "zzz";
  auto at = std::search(wire.begin(), wire.end(), zzz.begin(), zzz.end());
  REQUIRE(at != wire.end());
  std::copy(kBad.begin(), kBad.end(), at);
  Reject why{};
  CHECK_FALSE(codec.DecodeFrame(wire.data(), wire.size(), &why));
  CHECK(why == Reject::kSemantic);
  reply.error = kBad;
  CHECK_FALSE(ValidKeyOpReply(reply));
}

}  // namespace
}  // namespace meshtrain::wire
