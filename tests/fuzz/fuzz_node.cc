// libFuzzer target: random input sequences into node::Node::Step / Tick.
//
// Input: a sequence of operations read with FuzzedDataProvider. Each starts with an opcode and a
// time step (0..2 s of virtual time), then its own fields:
//   datagram / frame (wire bytes decoded by the plain codec, as the agent's inbound path does),
//   structured messages from a small name pool (progress queries and replies, parameter chunks,
//   ParamAcks, push-pulls — so the fuzzer reaches the node's state without first inventing valid
//   FlatBuffers), connection closes, trainer progress, snapshots, plan results, joins, leaves,
//   force-leaves, peer views and ticks.
// Oracle beyond the sanitizers: every output the node produces encodes (datagrams fit or are
// refused cleanly), permits are for the step after the trainer's, frames and closes name a
// connection the node opened or one the driver accepted, and NextDeadline never lies in the past
// of a Tick it asked for.
#include <fuzzer/FuzzedDataProvider.h>

#include <memory>
#include <set>
#include <string>

#include "node/endpoint.h"
#include "node/node.h"
#include "tests/fuzz/fuzz_common.h"

using meshtrain::fuzz::PlainCodec;
namespace node = meshtrain::node;
namespace ms = meshtrain::membership;
namespace wire = meshtrain::wire;

namespace {

constexpr uint32_t kParams = 8;
const char* const kNames[] = {"self", "n1", "n2", "n3", "n4"};
const char* const kAddrs[] = {"127.0.0.1:7950", "127.0.0.2:7950", "127.0.0.3:7950",
                              "127.0.0.4:7950", "127.0.0.5:7950"};

std::string PickName(FuzzedDataProvider& in) { return kNames[in.ConsumeIntegralInRange(0, 4)]; }
std::string PickAddr(FuzzedDataProvider& in) { return kAddrs[in.ConsumeIntegralInRange(0, 4)]; }

// Connections named by inputs (the node may answer on or close any of them), and the ones the
// node opened (replies and closes on those reach its rounds and push-pulls).
std::set<node::ConnId>* g_named = nullptr;
const std::set<node::ConnId>* g_opened = nullptr;

node::ConnId PickConn(FuzzedDataProvider& in) {
  const uint64_t k = in.ConsumeIntegralInRange<uint64_t>(0, 15);
  node::ConnId id = 0;
  if (k < 6) {
    id = k + 1;  // accepted by the driver
  } else if (k < 14 && !g_opened->empty()) {
    auto it = g_opened->begin();
    std::advance(it, in.ConsumeIntegralInRange<size_t>(0, g_opened->size() - 1));
    id = *it;
  } else {
    id = node::kFirstOutgoingConn + (uint64_t{1} << 40) + k;  // never opened
  }
  g_named->insert(id);
  return id;
}

std::unique_ptr<node::Node> MakeNode(FuzzedDataProvider& in) {
  node::NodeConfig c;
  c.name = "self";
  c.addr = kAddrs[0];
  c.data_addr = kAddrs[0];
  c.membership = ms::Config::Local();
  c.seed = 42;
  c.training = true;
  const uint8_t pol = in.ConsumeIntegralInRange<uint8_t>(0, 5);
  c.barrier.policy = static_cast<meshtrain::sync::Policy>(pol);
  c.barrier.sample = in.ConsumeIntegralInRange<size_t>(0, 4);
  c.barrier.staleness = in.ConsumeIntegralInRange<uint64_t>(0, 4);
  c.select = static_cast<meshtrain::sync::SelectPolicy>(in.ConsumeIntegralInRange<uint8_t>(0, 2));
  c.fanout = in.ConsumeIntegralInRange<size_t>(0, 4);
  c.min_peers = in.ConsumeIntegralInRange<size_t>(0, 2);
  c.expected_params = kParams;
  c.chunk_floats = in.ConsumeIntegralInRange<uint32_t>(1, 8);
  c.compress.kind = static_cast<wire::Encoding>(in.ConsumeIntegralInRange<uint8_t>(0, 4));
  c.compress.topk_fraction = 0.25;
  c.full_every = in.ConsumeIntegralInRange<uint32_t>(0, 3);
  if (in.ConsumeBool()) c.join = {kAddrs[1]};
  c.retry_join = in.ConsumeBool();
  c.overlap_barrier = in.ConsumeBool();
  return std::make_unique<node::Node>(c, 0);
}

wire::ParamChunk Chunk(FuzzedDataProvider& in) {
  wire::ParamChunk ch;
  ch.round = in.ConsumeIntegralInRange<uint64_t>(0, 4);
  ch.step = in.ConsumeIntegralInRange<uint64_t>(0, 50);
  ch.chunks = in.ConsumeIntegralInRange<uint32_t>(1, 3);
  ch.chunk = in.ConsumeIntegralInRange<uint32_t>(0, ch.chunks - 1);
  ch.total = in.ConsumeBool() ? kParams : in.ConsumeIntegralInRange<uint32_t>(1, 16);
  ch.offset = in.ConsumeIntegralInRange<uint32_t>(0, ch.total - 1);
  const uint32_t len = in.ConsumeIntegralInRange<uint32_t>(1, ch.total - ch.offset);
  ch.data.assign(len, in.ConsumeFloatingPointInRange<float>(-1, 1));
  // Compressed transfers: a change against a reference the node may or may not hold,
  // in any encoding, possibly malformed (the node expands and checks what a simulated network
  // hands over unverified).
  ch.base = in.ConsumeIntegralInRange<uint64_t>(0, 4);
  switch (in.ConsumeIntegralInRange<uint8_t>(0, 5)) {
    case 1:
      ch.encoding = 1;
      ch.count = len;
      ch.half.assign(len, in.ConsumeIntegral<uint16_t>());
      ch.data.clear();
      break;
    case 2:
      ch.encoding = 2;
      ch.count = len;
      ch.q.assign(len, in.ConsumeIntegral<int8_t>());
      ch.scales.assign(in.ConsumeIntegralInRange<size_t>(0, 2), in.ConsumeFloatingPoint<float>());
      ch.data.clear();
      break;
    case 3:
      ch.encoding = 3;
      ch.count = len;
      for (uint32_t i = 0; i < len && in.ConsumeBool(); ++i) ch.idx.push_back(i);
      ch.data.resize(ch.idx.size(), 0.5f);
      break;
    case 5:  // sparse: a book, gaps and codes of any bytes
      ch.encoding = 4;
      ch.count = len;
      ch.book.assign(in.ConsumeIntegralInRange<size_t>(0, 5), in.ConsumeFloatingPoint<float>());
      ch.gaps = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 8));
      ch.codes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 4));
      ch.data.clear();
      break;
    case 4:
      ch.encoding = in.ConsumeIntegral<uint8_t>();
      ch.count = in.ConsumeIntegralInRange<uint32_t>(0, len + 1);
      break;
    default:
      break;
  }
  return ch;
}

struct Checker {
  std::set<node::ConnId> opened;  // by Connect outputs
  std::set<node::ConnId> named;   // by inputs
  bool Known(node::ConnId c) const {
    return c < node::kFirstOutgoingConn || opened.count(c) > 0 || named.count(c) > 0;
  }
  uint64_t trainer_step = 0;
  bool overlap = true;

  void Check(std::vector<node::Output> outs) {
    for (auto& o : outs) {
      if (auto* d = std::get_if<node::SendDatagram>(&o)) {
        (void)PlainCodec().EncodeDatagram(d->msg);  // may refuse an oversize one, never crash
        // Through a relay: to a member by name, never a relay frame in a frame.
        FUZZ_CHECK(d->via.empty() || !d->dest.empty());
        if (!d->via.empty()) FUZZ_CHECK(!std::holds_alternative<wire::RelayFrame>(d->msg.body));
      } else if (auto* r = std::get_if<node::RelayedIn>(&o)) {
        FUZZ_CHECK(!r->via.empty() && !r->via_addr.empty());
      } else if (auto* c = std::get_if<node::Connect>(&o)) {
        FUZZ_CHECK(c->conn >= node::kFirstOutgoingConn);
        FUZZ_CHECK(opened.insert(c->conn).second);
      } else if (auto* f = std::get_if<node::SendFrame>(&o)) {
        FUZZ_CHECK(Known(f->conn));
        (void)PlainCodec().EncodeFrame(f->msg);
      } else if (auto* sp = std::get_if<node::SendParams>(&o)) {
        FUZZ_CHECK(Known(sp->conn));
        for (const auto& frame : node::Endpoint::ParamFrames(*sp)) {
          (void)PlainCodec().EncodeFrame(frame);
        }
      } else if (auto* mc = std::get_if<node::MixChunk>(&o)) {
        FUZZ_CHECK(mc->total == kParams && mc->offset + mc->count() <= kParams);
      } else if (auto* cl = std::get_if<node::Close>(&o)) {
        FUZZ_CHECK(Known(cl->conn));
      } else if (auto* p = std::get_if<node::Permit>(&o)) {
        // The permit for the next step, or (OSP early permit, overlap on) the one after it.
        FUZZ_CHECK(p->step == trainer_step + 1 || (overlap && p->step == trainer_step + 2));
      } else if (auto* m = std::get_if<node::Mix>(&o)) {
        FUZZ_CHECK(m->params.size() == kParams);
      }
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  auto n = MakeNode(in);
  Checker check;
  check.overlap = n->config().overlap_barrier;
  g_named = &check.named;
  g_opened = &check.opened;
  int64_t now = 0;
  n->Start(now);
  check.Check(n->TakeOutput());
  for (int ops = 0; ops < 256 && in.remaining_bytes() > 0; ++ops) {
    const uint8_t op = in.ConsumeIntegralInRange<uint8_t>(0, 15);
    now += in.ConsumeIntegralInRange<int64_t>(0, 2000);
    switch (op) {
      case 0: {  // raw datagram through the codec
        const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 1400));
        auto dg = PlainCodec().DecodeDatagram(bytes.data(), bytes.size(), nullptr);
        if (dg) n->Step(node::DatagramIn{PickAddr(in), std::move(*dg)}, now);
        break;
      }
      case 1: {  // raw frame through the codec
        const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 4096));
        auto f = PlainCodec().DecodeFrame(bytes.data(), bytes.size(), nullptr);
        if (f) n->Step(node::FrameIn{PickConn(in), std::move(*f)}, now);
        break;
      }
      case 2: {
        wire::Datagram dg;
        dg.sender = PickName(in);
        const int kind = in.ConsumeIntegralInRange<int>(0, 2);
        if (kind == 2) {  // a relay frame for a member of the pool, or for us
          const auto inner = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(9, 64));
          dg.body = wire::RelayFrame{PickName(in), inner};
        } else if (kind == 1) {
          dg.body = wire::ProgressQuery{in.ConsumeIntegral<uint32_t>(),
                                        in.ConsumeIntegralInRange<uint64_t>(0, 100)};
        } else {
          dg.body =
              wire::ProgressReply{in.ConsumeIntegralInRange<uint32_t>(0, 20),
                                  in.ConsumeIntegralInRange<uint64_t>(0, 100), in.ConsumeBool()};
        }
        n->Step(node::DatagramIn{PickAddr(in), std::move(dg)}, now);
        break;
      }
      case 3: {  // a membership packet announcing a member
        ms::Packet p;
        p.from = PickName(in);
        p.from_addr = PickAddr(in);
        p.from_step = in.ConsumeIntegralInRange<uint64_t>(0, 100);
        ms::AliveMsg a;
        a.name = PickName(in);
        a.addr = PickAddr(in);
        a.incarnation = in.ConsumeIntegralInRange<uint32_t>(0, 3);
        a.meta.training = in.ConsumeBool();
        a.meta.uplink_mbps = in.ConsumeFloatingPointInRange<float>(0, 100);
        a.meta.downlink_mbps = in.ConsumeFloatingPointInRange<float>(0, 100);
        // NAT and relays: any reach, a relay from the pool, relay registrations.
        a.meta.reach = static_cast<ms::Reach>(in.ConsumeIntegralInRange<uint8_t>(0, 2));
        if (in.ConsumeBool()) a.meta.relay = PickName(in);
        a.meta.serves_relay = in.ConsumeBool();
        if (in.ConsumeBool()) p.primary = ms::RelayRegisterMsg{in.ConsumeIntegral<uint32_t>()};
        p.updates.push_back(a);
        if (in.ConsumeBool())
          p.updates.push_back(ms::ProgressMsg{PickName(in), in.ConsumeIntegral<uint8_t>(), {}});
        wire::Datagram dg;
        dg.sender = p.from;
        dg.body = std::move(p);
        n->Step(node::DatagramIn{PickAddr(in), std::move(dg)}, now);
        break;
      }
      case 4: {
        wire::Frame f;
        f.sender = PickName(in);
        f.body = Chunk(in);
        n->Step(node::FrameIn{PickConn(in), std::move(f)}, now);
        break;
      }
      case 5: {
        wire::Frame f;
        f.sender = PickName(in);
        const uint64_t round = in.ConsumeIntegralInRange<uint64_t>(0, 6);
        const uint64_t step = in.ConsumeIntegralInRange<uint64_t>(0, 100);
        f.body = wire::ParamAckMsg{round, step, in.ConsumeBool()};
        n->Step(node::FrameIn{PickConn(in), std::move(f)}, now);
        break;
      }
      case 6: {
        wire::Frame f;
        f.sender = PickName(in);
        wire::PushPullMsg pp;
        pp.response = in.ConsumeBool();
        pp.state.from = f.sender;
        pp.state.join = in.ConsumeBool();
        ms::MemberState st;
        st.name = PickName(in);
        st.addr = PickAddr(in);
        st.status = static_cast<ms::Status>(in.ConsumeIntegralInRange<uint8_t>(0, 3));
        st.meta.training = in.ConsumeBool();
        st.step = in.ConsumeIntegralInRange<uint64_t>(0, 100);
        pp.state.members.push_back(st);
        f.body = std::move(pp);
        n->Step(node::FrameIn{PickConn(in), std::move(f)}, now);
        break;
      }
      case 7:
        n->Step(node::ConnClosed{PickConn(in), in.ConsumeBool()}, now);
        break;
      case 8: {
        node::TrainerProgress p;
        p.step = in.ConsumeIntegralInRange<uint64_t>(check.trainer_step, check.trainer_step + 2);
        p.training = in.ConsumeBool();
        p.waiting = in.ConsumeBool();
        check.trainer_step = p.step;
        n->Step(p, now);
        break;
      }
      case 9: {
        auto params = std::make_shared<std::vector<float>>(
            in.ConsumeBool() ? kParams : in.ConsumeIntegralInRange<size_t>(0, 12), 0.5f);
        n->Step(node::SnapshotIn{check.trainer_step, params, in.ConsumeBool(), {}}, now);
        break;
      }
      case 10: {
        node::PlanResult r;
        r.id = in.ConsumeIntegralInRange<uint64_t>(0, 4);
        for (int k = in.ConsumeIntegralInRange(0, 3); k > 0; --k)
          r.receivers.push_back(PickName(in));
        n->Step(std::move(r), now);
        break;
      }
      case 11:
        n->Step(node::JoinCmd{in.ConsumeIntegralInRange<uint64_t>(1, 3), {PickAddr(in)}}, now);
        break;
      case 12:
        n->Step(node::LeaveCmd{}, now);
        break;
      case 13:
        n->Step(node::ForceLeaveCmd{1, PickName(in)}, now);
        break;
      case 14: {
        node::PeerView v{PickName(in),
                         PickAddr(in),
                         in.ConsumeBool(),
                         in.ConsumeBool(),
                         in.ConsumeIntegralInRange<uint64_t>(0, 100),
                         10,
                         10};
        n->Step(v, now);
        break;
      }
      default: {
        const int64_t d = n->NextDeadline();
        if (d != meshtrain::sync::kNoDeadline) now = std::max(now, d);
        n->Tick(now);
        break;
      }
    }
    check.Check(n->TakeOutput());
  }
  return 0;
}
