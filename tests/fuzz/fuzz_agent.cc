// libFuzzer target: bytes through the agent's whole receive path, in process (docs/design.md
// "Wire format and input checking").
//
// The same code the agent runs, minus the sockets: each input is split into packets; a packet is
// a datagram or a frame (plain codec, or sealed with FUZZ_SEALED) handed to wire::Inbound
// (size, rate limit, decode, replay), then, when it passes, to node::Node::Step as the daemon's
// driver does (daemon/agent.cc); the node's outputs go through node::RouteNetwork to an endpoint
// that encodes them like daemon/net_endpoint.cc, and its events through the daemon's own writers
// (RecordEvent: metrics JSON lines and log lines; CommandReply; MembersJson / StatusJson's
// member listing) into JsonText. Nothing may throw, crash, leak or hang on any byte sequence.
//
// Input: repeated [kind byte][u16 little-endian length][bytes]. Kind bit 0: datagram or frame;
// bits 1-3: the connection id a frame arrives on (accepted 1..4, or the node's own outgoing
// connections); bit 4: advance virtual time and Tick first. Seeds: valid messages from
// make_corpus (datagrams of every kind, push-pulls, chunks, acks) in this framing.
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <set>

#include "daemon/ops/json_text.h"
#include "daemon/ops/metrics.h"
#include "daemon/ops/status_json.h"
#include "node/endpoint.h"
#include "node/node.h"
#include "tests/fuzz/fuzz_common.h"
#include "wire/inbound.h"

#ifndef FUZZ_SEALED
#define FUZZ_SEALED 0
#endif

namespace ms = meshtrain::membership;
namespace wire = meshtrain::wire;
namespace node = meshtrain::node;
namespace mtd = meshtrain::daemon;  // not `daemon`: unistd.h declares daemon()

namespace {

const wire::Codec& Codec() { return meshtrain::fuzz::TargetCodec(FUZZ_SEALED != 0); }

// Encodes what the node sends, as the daemon's NetEndpoint does, and remembers its connections.
class EncodingEndpoint : public node::Endpoint {
 public:
  std::set<node::ConnId> opened;
  void SendDatagram(const std::string&, const wire::Datagram& msg) override {
    (void)Codec().EncodeDatagram(msg);
  }
  void Connect(node::ConnId conn, const std::string&) override { opened.insert(conn); }
  void SendFrame(node::ConnId, const wire::Frame& msg) override { (void)Codec().EncodeFrame(msg); }
  void Close(node::ConnId, bool) override {}
};

mtd::MetricsLog& Metrics() {
  static mtd::MetricsLog* log = [] {
    auto* m = new mtd::MetricsLog();
    FUZZ_CHECK(m->Open("/dev/null").ok());
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>()));
    return m;
  }();
  return *log;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mtd::MetricsLog& metrics = Metrics();
  wire::Inbound inbound(&Codec());
  node::NodeConfig c;
  c.name = "self";
  c.cluster = meshtrain::fuzz::kCluster;
  c.addr = "127.0.0.1:7950";
  c.data_addr = c.addr;
  c.membership = ms::Config::Local();
  c.seed = 7;
  c.training = true;
  c.barrier.policy = meshtrain::sync::Policy::kPssp;
  c.expected_params = 8;
  node::Node n(c, 0);
  EncodingEndpoint ep;
  int64_t now = 0;
  auto execute = [&] {
    for (auto& o : node::RouteNetwork(n.TakeOutput(), ep)) {
      if (mtd::RecordEvent(o, &metrics)) continue;
      if (auto* done = std::get_if<node::CommandDone>(&o)) {
        (void)mtd::JsonText(mtd::CommandReply(*done));
      }
    }
  };
  n.Start(now);
  execute();
  size_t pos = 0;
  for (int packets = 0; packets < 64 && pos + 3 <= size; ++packets) {
    const uint8_t kind = data[pos];
    const size_t len =
        std::min<size_t>(data[pos + 1] | (size_t{data[pos + 2]} << 8), size - pos - 3);
    const std::vector<uint8_t> wire =
        meshtrain::fuzz::TargetWire(FUZZ_SEALED != 0, data + pos + 3, len);
    pos += 3 + len;
    if (kind & 0x10) {
      now += 50 * (kind >> 5);
      n.Tick(now);
      execute();
    }
    if ((kind & 1) == 0) {
      auto dg = inbound.OnDatagram(wire.data(), wire.size(), "127.0.0.2:7950", now / 1000.0);
      if (dg) n.Step(node::DatagramIn{"127.0.0.2:7950", std::move(*dg)}, now);
    } else {
      const uint8_t k = (kind >> 1) & 7;
      node::ConnId conn = k < 4 || ep.opened.empty() ? k + 1 : *ep.opened.rbegin();
      auto f = inbound.OnFrame(wire.data(), wire.size());
      if (f) n.Step(node::FrameIn{conn, std::move(*f)}, now);
    }
    execute();
  }
  // What `members` and the metrics file would show of everything that was accepted.
  (void)mtd::JsonText(mtd::MembersJson(n.Members()));
  return 0;
}
