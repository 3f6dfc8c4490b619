// Writes the seed corpus of every fuzz target: valid messages of each kind, encoded the way the
// target reads its input (see each fuzz_*.cc), so libFuzzer starts from inputs that pass the
// marker, AEAD and verifier and mutates from there. Deterministic except for AEAD nonces.
// Usage: make_corpus OUT_DIR   (creates OUT_DIR/<target>/seed_NNN)
#include <sys/stat.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "learn/model_file.h"
#include "tests/fuzz/fuzz_common.h"
#include "wire/compress.h"
#include "wire/framing.h"

namespace {

namespace g = meshtrain::wire;
namespace ms = meshtrain::membership;
using Bytes = std::vector<uint8_t>;

std::string out_dir;

void Write(const std::string& target, const Bytes& data) {
  static std::vector<std::pair<std::string, int>> counts;
  int n = 0;
  for (auto& [t, c] : counts) {
    if (t == target) n = ++c;
  }
  if (n == 0) {
    counts.emplace_back(target, 0);
    mkdir((out_dir + "/" + target).c_str(), 0755);
  }
  char name[32];
  std::snprintf(name, sizeof(name), "/seed_%03d", n);
  FILE* f = std::fopen((out_dir + "/" + target + name).c_str(), "wb");
  if (f == nullptr) {
    std::perror(target.c_str());
    std::exit(1);
  }
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
}

Bytes Prefixed(uint8_t mode, const Bytes& rest) {
  Bytes v{mode};
  v.insert(v.end(), rest.begin(), rest.end());
  return v;
}

// The FlatBuffer of a plaintext encoding (without the marker byte).
Bytes Unmarked(const Bytes& plain) { return Bytes(plain.begin() + 1, plain.end()); }

std::vector<g::Datagram> Datagrams() {
  std::vector<g::Datagram> out;
  std::mt19937 rng(7);
  const std::vector<ms::Primary> primaries = {std::monostate{},
                                              ms::PingMsg{1, "n2"},
                                              ms::PingMsg{2, ""},
                                              ms::IndirectPingMsg{3, "n3", "10.0.0.3:7950", true},
                                              ms::AckMsg{4, "192.0.2.4:7950"},
                                              ms::NackMsg{5},
                                              ms::RelayRegisterMsg{6}};
  for (size_t i = 0; i < primaries.size(); ++i) {
    ms::Packet p;
    p.from_addr = "127.0.0.1:7950";
    p.from_step = rng() % 1000;
    p.primary = primaries[i];
    if (i % 2 == 0) {
      p.updates.push_back(
          ms::AliveMsg{"n3", "10.0.0.3:7950", 7, {"10.0.0.3:7960", true, 9.5f, 3, {}}});
      p.updates.push_back(ms::SuspectMsg{"n4", 2, "n1"});
    }
    if (i % 3 == 0) {
      p.updates.push_back(ms::DeadMsg{"n5", 3, "n5"});
      p.updates.push_back(ms::ProgressMsg{"n6", 123456, {}});
      p.updates.push_back(ms::AliveMsg{"n7", "[::1]:7950", 1, {}});
    }
    out.push_back(g::Datagram{"n1", p, 1700000000000 + i});
  }
  // Relays: a relayed member's alive message, and relay frames whose inner datagram
  // is a ping (plaintext and sealed) or itself a relay frame (refused: frames do not nest).
  ms::Meta relayed;
  relayed.reach = ms::Reach::kNat;
  relayed.relay = "n1";
  ms::Packet alive;
  alive.from_addr = "127.0.0.1:7950";
  alive.updates.push_back(ms::AliveMsg{"n8", "203.0.113.8:40001", 3, relayed});
  out.push_back(g::Datagram{"n1", alive, 1700000000050});
  g::Datagram inner = out[1];
  inner.session = 0x5EED0009;
  inner.counter = 1;
  const Bytes plain_inner = meshtrain::fuzz::PlainCodec().EncodeDatagram(inner);
  out.push_back(g::Datagram{"n4", g::RelayFrame{"n2", plain_inner}, 1700000000060});
  out.push_back(
      g::Datagram{"n4", g::RelayFrame{"n2", meshtrain::fuzz::SealedCodec().EncodeDatagram(inner)},
                  1700000000070});
  g::Datagram nested = out.back();
  nested.session = 0x5EED0009;
  nested.counter = 2;
  out.push_back(
      g::Datagram{"n4", g::RelayFrame{"n2", meshtrain::fuzz::PlainCodec().EncodeDatagram(nested)},
                  1700000000080});
  out.push_back(g::Datagram{"n2", g::ProgressQuery{17, 300}, 1700000000100});
  out.push_back(g::Datagram{"n3", g::ProgressReply{17, 301, true}, 1700000000200});
  out.push_back(g::Datagram{"n3", g::ProgressReply{18, 0, false}, 0});
  // Stamped like a real sender's (the fuzz codecs have no session of their own); the last one
  // is left unstamped.
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    out[i].session = 0x5EED0000 + i % 3;
    out[i].counter = i + 1;
  }
  return out;
}

std::vector<g::Frame> Frames() {
  std::vector<g::Frame> out;
  for (size_t members : {0, 1, 3}) {
    g::PushPullMsg pp;
    pp.response = members == 1;
    pp.state.join = members == 3;
    for (size_t i = 0; i < members; ++i) {
      pp.state.members.push_back({"m" + std::to_string(i),
                                  "10.0.0." + std::to_string(i + 1) + ":7950",
                                  static_cast<uint32_t>(i),
                                  static_cast<ms::Status>(i % 4),
                                  {i % 2 ? "10.0.0.9:7960" : "", i % 2 == 0, 1.5f, 2.5f, {}},
                                  i * 10});
    }
    out.push_back(g::Frame{"n1", pp, 1700000000000});
  }
  std::vector<float> params(40);
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.25f * static_cast<float>(i);
  for (const auto& c : g::SplitParams(params, 3, 40, 16)) out.push_back(g::Frame{"n2", c, 5});
  out.push_back(g::Frame{"n2", g::SplitParams(params, 4, 41, 64)[0], 6});
  // Compressed transfers (--compress): every encoding, full and as a change against a reference.
  for (const char* spec : {"fp16", "int8", "topk:0.2"}) {
    for (uint64_t base : {uint64_t{0}, uint64_t{3}}) {
      for (const auto& c :
           g::EncodeTransfer(params, *g::ParseCompress(spec), 5, 42, base, 16).chunks) {
        out.push_back(g::Frame{"n2", c, 6});
      }
    }
  }
  out.push_back(g::Frame{"n5", g::ParamAckMsg{5, 42, true}, 10});
  const g::Key key = meshtrain::fuzz::FuzzKey();
  for (const auto op : {g::KeyOpKind::kInstall, g::KeyOpKind::kUse, g::KeyOpKind::kRemove}) {
    out.push_back(g::Frame{"n3", g::KeyOpMsg{op, key, 9}, 7});
  }
  out.push_back(g::Frame{"n3", g::KeyOpMsg{g::KeyOpKind::kList, std::nullopt, 10}, 8});
  const std::string fp = g::KeyFingerprint(key);
  out.push_back(g::Frame{"n4", g::KeyOpReplyMsg{9, true, "", {fp, "0123456789abcdef"}, fp}, 9});
  out.push_back(g::Frame{"n4", g::KeyOpReplyMsg{10, false, "key is not installed", {}, ""}, 9});
  out.push_back(g::Frame{"n5", g::ParamAckMsg{3, 40}, 10});
  return out;
}

// 7-byte ParamAssembler records (fuzz_param_assembler.cc).
Bytes Record(uint8_t round, uint8_t step, uint8_t chunk, uint8_t chunks, uint8_t total,
             uint8_t offset, uint8_t len) {
  return {round, step, chunk, chunks, total, offset, len};
}

void Append(Bytes* to, const Bytes& more) { to->insert(to->end(), more.begin(), more.end()); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  mkdir(out_dir.c_str(), 0755);
  const g::Codec& plain = meshtrain::fuzz::PlainCodec();
  const g::Codec& sealed = meshtrain::fuzz::SealedCodec();
  using meshtrain::fuzz::kRawWire;
  using meshtrain::fuzz::kSealRest;

  for (const auto& d : Datagrams()) {
    const Bytes wire = plain.EncodeDatagram(d);
    Write("fuzz_datagram_plain", wire);
    Write("fuzz_datagram_sealed", Prefixed(kSealRest, Unmarked(wire)));
  }
  Write("fuzz_datagram_sealed", Prefixed(kRawWire, sealed.EncodeDatagram(Datagrams()[0])));
  Write("fuzz_datagram_sealed", Prefixed(kRawWire, sealed.EncodeDatagram(Datagrams().back())));

  Bytes stream;
  for (const auto& f : Frames()) {
    const Bytes wire = plain.EncodeFrame(f);
    Write("fuzz_frame_plain", wire);
    Write("fuzz_frame_sealed", Prefixed(kSealRest, Unmarked(wire)));
    if (stream.size() < 2000) Append(&stream, g::EncodeFramed(wire));
  }
  Write("fuzz_frame_sealed", Prefixed(kRawWire, sealed.EncodeFrame(Frames()[0])));
  Write("fuzz_frame_sealed", Prefixed(kRawWire, sealed.EncodeFrame(Frames().back())));

  // Frame streams: limit selector, read-size seed, stream.
  Write("fuzz_frame_decoder", Prefixed(0xFF, Prefixed(0x11, stream)));
  Write("fuzz_frame_decoder", Prefixed(0x04, Prefixed(0x22, stream)));  // limit 65: errors
  Bytes small;
  for (uint8_t n = 1; n <= 8; ++n) Append(&small, g::EncodeFramed(Bytes(n, n)));
  Write("fuzz_frame_decoder", Prefixed(0x00, Prefixed(0x33, small)));
  Append(&small, {0, 0, 0, 0});  // a zero length prefix
  Write("fuzz_frame_decoder", Prefixed(0x01, Prefixed(0x44, small)));

  // Parameter reassembly: a 3-chunk model of 30 floats in order, reversed, with a duplicate,
  // a newer round interrupting, and a restart (chunk 0 of an older round).
  Bytes in_order, reversed, dup, newer, restart;
  for (uint8_t i = 0; i < 3; ++i) Append(&in_order, Record(1, 5, i, 3, 30, 10 * i, 10));
  for (int i = 2; i >= 0; --i) {
    const auto u = static_cast<uint8_t>(i);
    Append(&reversed, Record(1, 5, u, 3, 30, 10 * u, 10));
  }
  Append(&dup, Record(1, 5, 0, 3, 30, 0, 10));
  Append(&dup, Record(1, 5, 0, 3, 30, 0, 10));
  Append(&dup, in_order);
  Append(&newer, Record(1, 5, 0, 3, 30, 0, 10));
  Append(&newer, Record(2, 6, 0, 2, 20, 0, 10));
  Append(&newer, Record(2, 6, 1, 2, 20, 10, 10));
  Append(&restart, in_order);
  Append(&restart, Record(0x80, 1, 0, 1, 8, 0, 8));
  for (const Bytes* b : {&in_order, &reversed, &dup, &newer, &restart}) {
    Write("fuzz_param_assembler", *b);
  }

  // Replay guard schedules (sender, session, counter, stamp/clock) and rate limiter schedules.
  std::mt19937 rng(11);
  for (int s = 0; s < 4; ++s) {
    Bytes rg, rl;
    uint8_t counter = 1;
    for (int i = 0; i < 64; ++i) {
      rg.push_back(static_cast<uint8_t>(rng() % 6));
      rg.push_back(static_cast<uint8_t>(s * 2 + (i > 40)));  // a restart two thirds in
      rg.push_back(rng() % 4 == 0 ? static_cast<uint8_t>(rng()) : counter++);
      rg.push_back(static_cast<uint8_t>(((rng() % (s + 1)) << 4) | (i > 40 ? 0x0f : rng() % 8)));
      rl.push_back(static_cast<uint8_t>(rng() % 8));
      rl.push_back(static_cast<uint8_t>(i % 20 == 19 ? 255 : rng() % (s * 8 + 1)));
    }
    Write("fuzz_replay_guard", rg);
    Write("fuzz_rate_limiter", rl);
  }

  // Inbound path: mode byte (0 plaintext wire, 1 seal the rest, 2 sealed wire) + buffer.
  for (const auto& d : Datagrams()) {
    const Bytes wire = plain.EncodeDatagram(d);
    Write("fuzz_inbound_datagram", Prefixed(0, wire));
    Write("fuzz_inbound_datagram", Prefixed(1, Unmarked(wire)));
  }
  Write("fuzz_inbound_datagram", Prefixed(2, sealed.EncodeDatagram(Datagrams()[0])));
  for (const auto& f : Frames()) {
    const Bytes wire = plain.EncodeFrame(f);
    Write("fuzz_inbound_frame", Prefixed(0, wire));
    Write("fuzz_inbound_frame", Prefixed(1, Unmarked(wire)));
  }
  Write("fuzz_inbound_frame", Prefixed(2, sealed.EncodeFrame(Frames()[0])));

  // Config files (daemon/config_file.h).
  for (const char* text :
       {"# agent\n[agent]\nname = \"n1\"\nbind = \"127.0.0.1:7950\"\n",
        "join = [\"127.0.0.1:7960\", \"127.0.0.1:7970\"]\nretry-join = true\nfanout = 3\n",
        "probe_interval = 500 # ms\ncluster = \"caf\xc3\xa9\"\nverbose = false\r\n",
        "name = \"a\\\"b\"\nbad line\n", "config = \"x\"\n"}) {
    const std::string s(text);
    Write("fuzz_config_file", Bytes(s.begin(), s.end()));
  }

  // RPC requests (the CLI's JSON frames).
  for (const char* json :
       {R"({"cmd":"members"})", R"({"cmd":"status"})", R"({"cmd":"leave"})", R"({"cmd":"export"})",
        R"({"cmd":"monitor","level":"debug"})",
        R"({"cmd":"join","addrs":["127.0.0.1:7950","[::1]:7951"]})",
        R"({"cmd":"force-leave","name":"n2"})", R"({"cmd":"keys","op":"list"})",
        R"({"cmd":"keys","op":"install","key":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8="})",
        R"({"cmd":"keys","op":"use","key":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8="})",
        R"({"cmd":"keys","op":"remove","key":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8="})",
        R"({"cmd":"status","token":"0123456789abcdef0123456789abcdef"})",
        R"({"cmd":"members","token":"x","extra":[1,2.5,null,true,{"a":"\u00e9"}]})"}) {
    const std::string s(json);
    Write("fuzz_rpc", Bytes(s.begin(), s.end()));
  }
  // fuzz_agent_*: [kind][u16 length][message] packets (fuzz_agent.cc): every datagram and frame
  // alone, and all of them in one input so the node gets a member, a push-pull and a transfer.
  for (const bool seal : {false, true}) {
    const char* target = seal ? "fuzz_agent_sealed" : "fuzz_agent_plain";
    Bytes all;
    auto packet = [&](uint8_t kind, const Bytes& wire) {
      const Bytes body = seal ? Prefixed(kSealRest, Unmarked(wire)) : wire;
      Bytes p = {kind, static_cast<uint8_t>(body.size() & 0xff),
                 static_cast<uint8_t>(body.size() >> 8)};
      Append(&p, body);
      Write(target, p);
      Append(&all, p);
    };
    for (const auto& d : Datagrams()) packet(0x00, plain.EncodeDatagram(d));
    for (const auto& f : Frames()) packet(0x01, plain.EncodeFrame(f));
    Write(target, all);
  }
  // fuzz_user_files (fuzz_user_files.cc): [selector][file bytes].
  auto user_file = [](uint8_t selector, const Bytes& file) {
    Bytes b = {selector};
    Append(&b, file);
    Write("fuzz_user_files", b);
  };
  auto text = [](const std::string& s) { return Bytes(s.begin(), s.end()); };
  user_file(0, text("a,b,label\n1.5,-2,0\n3e2,4,1\n"));
  user_file(8, text("1,0,2\n3,1,4\n"));
  user_file(
      3, {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  for (const char* spec : {"conv(16,5),relu,maxpool(2),conv(32,5,1,2),relu,avgpool(2,2),flatten,"
                           "dense(128),layernorm,tanh,dropout(0.5),dense(10),mse",
                           "dense(10)", "flatten,sigmoid,dense(4),xent"}) {
    user_file(4, text(spec));
  }
  {
    meshtrain::learn::ModelFile m;
    m.spec = "dense(3)";
    m.input_shape = {1, 1, 2};
    m.step = 7;
    m.params = {0.5f, -1, 2, 0, 1, 1, 0, 0, 1};
    const std::string path = out_dir + "/model.npz";
    if (meshtrain::learn::WriteModelFile(path, m).ok()) {
      FILE* f = std::fopen(path.c_str(), "rb");
      Bytes file;
      for (int c; f != nullptr && (c = std::fgetc(f)) != EOF;)
        file.push_back(static_cast<uint8_t>(c));
      if (f != nullptr) std::fclose(f);
      std::remove(path.c_str());
      user_file(5, file);
      user_file(1, file);  // a valid zip for the .npz reader, without x and y
    }
  }
  std::printf("make_corpus: wrote seeds under %s\n", out_dir.c_str());
  return 0;
}
