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

#include <string>
#include <vector>

#include "node/node.h"

namespace meshtrain::node {

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  virtual void SendDatagram(const std::string& to, const gossip::Datagram& msg) = 0;
  // Opens connection `conn` (a node id >= kFirstOutgoingConn) to `to`.
  virtual void Connect(ConnId conn, const std::string& to) = 0;
  virtual void SendFrame(ConnId conn, const gossip::Frame& msg) = 0;
  virtual void Close(ConnId conn, bool abort) = 0;
  // Sends a capacity probe train (ProbeLink). A network that cannot probe ignores it: the node
  // then keeps measuring bandwidth from its transfers alone.
  virtual void ProbeLink(const node::ProbeLink& /*probe*/) {}
};

// Carries out the network outputs (SendDatagram, Connect, SendFrame, Close) on `endpoint`, in
// order, and returns the other outputs, in order, for the driver.
std::vector<Output> RouteNetwork(std::vector<Output> outputs, Endpoint& endpoint);

}  // namespace meshtrain::node
