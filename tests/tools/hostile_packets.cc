// Test tool for tests/integration/test_hostile_input.py: prints, one per line,
// "CASE udp|tcp HEX" for hostile plaintext buffers that a peer without any key can send. Each is
// a well-formed, verifier-valid envelope of the current cluster, stamped like a real datagram
// (sender clock, a session and a counter), whose only fault is a string that is not valid UTF-8.
// Built with the FlatBuffers generated API directly, bypassing the codec, which would never
// produce them. TCP cases are frame payloads without the 4-byte length prefix.
//
// Usage: hostile_packets [--cluster LABEL]
#include <flatbuffers/flatbuffers.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "wire/crypto.h"
#include "wire/messages.h"
#include "wire/schema/meshtrain_generated.h"

namespace {

namespace fb = ::flatbuffers;
namespace w = ::meshtrain::wire::schema;

const std::string kBad = "\xff\xfe\xfd";  // bytes that never occur in UTF-8

struct Stamp {
  std::string cluster = "default";
  uint64_t session = 0;
  uint64_t counter = 0;
};

std::vector<uint8_t> Finish(fb::FlatBufferBuilder& b, Stamp& st, const std::string& sender,
                            w::Body type, fb::Offset<void> body) {
  const uint64_t now_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  const auto env =
      w::CreateEnvelope(b, meshtrain::wire::kProtocolVersion, b.CreateString(st.cluster),
                        b.CreateString(sender), now_ms, type, body, st.session, ++st.counter);
  w::FinishEnvelopeBuffer(b, env);
  std::vector<uint8_t> out(1 + b.GetSize());
  out[0] = meshtrain::wire::kPlainMarker;
  std::memcpy(out.data() + 1, b.GetBufferPointer(), b.GetSize());
  return out;
}

std::vector<uint8_t> Packet(Stamp& st, w::Update type,
                            const std::function<fb::Offset<void>(fb::FlatBufferBuilder&)>& upd) {
  fb::FlatBufferBuilder b;
  const auto u = upd(b);
  const std::vector<w::Update> types{type};
  const std::vector<fb::Offset<void>> values{u};
  const auto p = w::CreateMembershipPacket(b, b.CreateString("127.0.0.1:9"), 0, w::Primary::NONE, 0,
                                           b.CreateVector(types), b.CreateVector(values));
  return Finish(b, st, "intruder", w::Body::MembershipPacket, p.Union());
}

void Print(const char* name, const char* kind, const std::vector<uint8_t>& bytes) {
  std::printf("%s %s ", name, kind);
  for (uint8_t c : bytes) std::printf("%02x", c);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  Stamp st;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--cluster") == 0) st.cluster = argv[i + 1];
  }
  st.session = std::random_device{}() | 1;

  Print("alive_name", "udp", Packet(st, w::Update::AliveUpdate, [](fb::FlatBufferBuilder& b) {
          return w::CreateAliveUpdateDirect(b, kBad.c_str(), "127.0.0.1:9", 1).Union();
        }));
  Print("suspect_from", "udp", Packet(st, w::Update::SuspectUpdate, [](fb::FlatBufferBuilder& b) {
          return w::CreateSuspectUpdateDirect(b, "ghost", 1, kBad.c_str()).Union();
        }));
  Print("dead_from", "udp", Packet(st, w::Update::DeadUpdate, [](fb::FlatBufferBuilder& b) {
          return w::CreateDeadUpdateDirect(b, "ghost", 1, kBad.c_str()).Union();
        }));
  {
    fb::FlatBufferBuilder b;
    const std::vector<fb::Offset<w::MemberState>> members{
        w::CreateMemberStateDirect(b, kBad.c_str(), "127.0.0.1:9", 1, w::MemberStatus::Alive)};
    const auto pp = w::CreatePushPull(b, false, true, b.CreateVector(members));
    Print("pushpull_name", "tcp", Finish(b, st, "intruder", w::Body::PushPull, pp.Union()));
  }
  {
    fb::FlatBufferBuilder b;
    const std::vector<float> data{0.5f, 0.25f};
    const auto c = w::CreateParamChunk(b, 1, 1, 0, 1, 2, 0, b.CreateVector(data));
    Print("chunk_sender", "tcp", Finish(b, st, kBad, w::Body::ParamChunk, c.Union()));
  }
  return 0;
}
