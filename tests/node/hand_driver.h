// A node core driven by hand in virtual time (tests/node/*_test.cc): datagrams in, outputs
// collected, ticks run millisecond by millisecond. Tests derive from it and add their mesh.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "node/node.h"

namespace meshtrain::node::testing {

struct HandDriver {
  std::unique_ptr<Node> n;
  TimeMs now = 0;
  std::vector<Output> out;

  // n0 at 10.0.0.1:7950, training, with SWIM (local profile) that sends no probes in a test
  // (nobody here answers them: no suspicions), no --min-peers; fanout 3.
  static NodeConfig Config(uint64_t seed, sync::SelectPolicy select) {
    NodeConfig c;
    c.name = "n0";
    c.addr = "10.0.0.1:7950";
    c.data_addr = c.addr;
    c.membership = membership::Config::Local();
    c.membership.name = c.name;
    c.membership.addr = c.addr;
    c.membership.probe_interval = 10 * 60 * 1000;
    c.seed = seed;
    c.training = true;
    c.select = select;
    c.fanout = 3;
    c.min_peers = 0;
    return c;
  }
  void Start(NodeConfig c) {
    n = std::make_unique<Node>(std::move(c), 0);
    n->Start(0);
    Drain();
  }

  // A membership packet from `from` (its sender is p.from).
  void Datagram(const std::string& from, const membership::Packet& p) {
    wire::Datagram dg;
    dg.sender = p.from;
    dg.body = p;
    n->Step(DatagramIn{from, std::move(dg)}, now);
    Drain();
  }
  void Drain() {
    for (Output& o : n->TakeOutput()) out.push_back(std::move(o));
  }
  // `from` asks for our model on connection `conn`: what was sent on it (if anything), and
  // whether it was closed.
  std::optional<SendParams> StateRequest(ConnId conn, const std::string& from, uint64_t step,
                                         bool* closed) {
    out.clear();
    wire::Frame f;
    f.sender = from;
    f.body = wire::StateRequestMsg{step};
    n->Step(FrameIn{conn, std::move(f)}, now);
    Drain();
    std::optional<SendParams> sent;
    *closed = false;
    for (const Output& o : out) {
      if (const auto* sp = std::get_if<SendParams>(&o); sp && sp->conn == conn) sent = *sp;
      if (const auto* c = std::get_if<Close>(&o); c && c->conn == conn) *closed = true;
    }
    return sent;
  }
  void RunUntil(TimeMs until) {
    for (; now <= until; ++now) {
      if (n->NextDeadline() <= now) n->Tick(now);
      Drain();
    }
  }
};

}  // namespace meshtrain::node::testing
