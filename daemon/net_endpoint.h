// node::Endpoint over the libuv transports: datagrams are encoded (and sealed) by the codec and
// sent on the UDP endpoint; connections and frames go through the data TcpHub. Connections the
// node opens are known to it by node ids, mapped here to the hub's ids; accepted connections
// keep the hub's id.
//
// Nothing is delivered back synchronously: a close — even one reported inside TcpHub::Connect
// when the connect fails at once (EMFILE, ...) — goes to `feed`, which queues it while the driver
// executes outputs. Thread-safety: loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "daemon/link_prober.h"
#include "daemon/param_streamer.h"
#include "node/endpoint.h"
#include "transport/transport.h"
#include "wire/codec.h"

namespace meshtrain::daemon {

class NetEndpoint : public node::Endpoint {
 public:
  using Feed = std::function<void(node::Input)>;
  // A frame that arrived on a connection the node opened, as received (not yet checked).
  using OnReply = std::function<void(node::ConnId, const transport::Bytes&)>;

  NetEndpoint(const wire::Codec* codec, transport::UdpEndpoint* udp, transport::TcpHub* tcp,
              Feed feed, OnReply on_reply);

  void SendDatagram(const std::string& to, const wire::Datagram& msg) override;
  void SendRelayed(const std::string& to, const std::string& via, const std::string& dest,
                   const wire::Datagram& msg) override;
  void Connect(node::ConnId conn, const std::string& to) override;
  void SendFrame(node::ConnId conn, const wire::Frame& msg) override;
  // Streamed by the ParamStreamer when one is set, else encoded at once.
  void SendParams(const node::SendParams& s) override;
  void Close(node::ConnId conn, bool abort) override;
  void ProbeLink(const node::ProbeLink& probe) override {
    if (prober_ != nullptr) prober_->Send(probe);
  }
  void set_prober(LinkProber* prober) { prober_ = prober; }
  void set_streamer(ParamStreamer* streamer) { streamer_ = streamer; }

  // Aborts connection `conn` (a node id) at once, e.g. after a bad reply.
  void Abort(node::ConnId conn) { Close(conn, true); }
  // True if `hub_id` is a connection the node opened (its closes are reported by Connect's
  // handler, not the listener's).
  bool IsOutgoing(transport::TcpHub::ConnId hub_id) const { return node_id_.count(hub_id) > 0; }
  uint64_t oversize_drops() const { return oversize_drops_; }

 private:
  transport::TcpHub::ConnId HubId(node::ConnId id) const;

  const wire::Codec* codec_;
  transport::UdpEndpoint* udp_;
  transport::TcpHub* tcp_;
  Feed feed_;
  OnReply on_reply_;
  std::map<node::ConnId, transport::TcpHub::ConnId> hub_id_;  // outgoing: node id -> hub id
  std::map<transport::TcpHub::ConnId, node::ConnId> node_id_;
  node::ConnId connecting_ = 0;  // the connect in progress, to see a failure inside Connect()
  bool connect_failed_ = false;
  uint64_t oversize_drops_ = 0;
  LinkProber* prober_ = nullptr;
  ParamStreamer* streamer_ = nullptr;
};

}  // namespace meshtrain::daemon
