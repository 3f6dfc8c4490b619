// The network behind a node: what a driver implements to carry the node's network outputs.
// The daemon implements it with the libuv transports (daemon/net_endpoint.h), the simulator and
// the tests with a simulated network; the node core itself never sees either (Tarantool's
// swim_transport has one implementation for the server and one for tests).
//
// Contract: nothing an Endpoint call causes may be delivered back to the node synchronously.
// A failed connect, a closed connection, an arriving frame — each becomes a later input
// (ConnClosed, FrameIn, DatagramIn) that the driver feeds after the current batch of outputs.
// Thread-safety: as the implementation's; the node's driver calls it from one thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "node/node.h"

namespace meshtrain::node {

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  virtual void SendDatagram(const std::string& to, const wire::Datagram& msg) = 0;
  // A datagram for member `dest` at `to`, through its relay at `via`. A network
  // without relays (the simulator: no NAT) sends it straight to `to`.
  virtual void SendRelayed(const std::string& to, const std::string& /*via*/,
                           const std::string& /*dest*/, const wire::Datagram& msg) {
    SendDatagram(to, msg);
  }
  // Opens connection `conn` (a node id >= kFirstOutgoingConn) to `to`.
  virtual void Connect(ConnId conn, const std::string& to) = 0;
  virtual void SendFrame(ConnId conn, const wire::Frame& msg) = 0;
  // Streams a snapshot (SendParams). The default encodes every chunk at once and sends them as
  // frames (the simulator and tests); the daemon streams them as the connection drains.
  virtual void SendParams(const node::SendParams& s);
  // The frames of SendParams `s`, encoded at once.
  static std::vector<wire::Frame> ParamFrames(const node::SendParams& s);
  virtual void Close(ConnId conn, bool abort) = 0;
  // Sends a capacity probe train (ProbeLink). A network that cannot probe ignores it: the node
  // then keeps measuring bandwidth from its transfers alone.
  virtual void ProbeLink(const node::ProbeLink& /*probe*/) {}
};

// Carries out the network outputs (SendDatagram, Connect, SendFrame, SendParams, Close) on
// `endpoint`, in order, and returns the other outputs, in order, for the driver.
std::vector<Output> RouteNetwork(std::vector<Output> outputs, Endpoint& endpoint);

// For drivers that mix whole models (the simulator, tests): turns the MixChunk outputs of each
// sender's transfer back into one Mix, in the place of its last chunk; a transfer broken off is
// dropped. Memory: one model per sender with a transfer under way (the daemon folds chunks into
// a running sum instead, daemon/trainer/chunk_mixer.h). Thread-safety: one owner.
class WholeModels {
 public:
  std::vector<Output> Apply(std::vector<Output> outputs);
  // One chunk: the whole Mix when it completes its sender's transfer.
  std::optional<Mix> Add(MixChunk& m);

 private:
  struct Partial {
    uint64_t round = 0;
    uint64_t covered = 0;
    std::vector<float> params;
  };
  std::map<std::string, Partial> partial_;
};

}  // namespace meshtrain::node
