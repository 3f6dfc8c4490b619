#include "daemon/net_endpoint.h"

#include <spdlog/spdlog.h>

namespace meshtrain::daemon {

using transport::TcpHub;
using wire::NetAddr;

NetEndpoint::NetEndpoint(const wire::Codec* codec, transport::UdpEndpoint* udp, TcpHub* tcp,
                         Feed feed, OnReply on_reply)
    : codec_(codec), udp_(udp), tcp_(tcp), feed_(std::move(feed)), on_reply_(std::move(on_reply)) {}

void NetEndpoint::SendDatagram(const std::string& to_addr, const wire::Datagram& msg) {
  auto to = NetAddr::Parse(to_addr);
  if (!to) return;
  transport::Bytes bytes = codec_->EncodeDatagram(msg);
  if (bytes.empty()) {
    oversize_drops_++;
    spdlog::warn("dropping a datagram to {} that does not fit in {} bytes", to_addr,
                 wire::kMaxDatagramBytes);
    return;
  }
  udp_->Send(*to, std::move(bytes));
}

void NetEndpoint::SendRelayed(const std::string& to_addr, const std::string& via,
                              const std::string& dest, const wire::Datagram& msg) {
  // The datagram as it would go straight to the member (sealed by us), inside a frame of ours
  // to its relay.
  wire::Datagram frame;
  frame.sender = msg.sender;
  wire::RelayFrame rf;
  rf.dest = dest;
  rf.inner = codec_->EncodeDatagram(msg);
  if (rf.inner.empty() || rf.inner.size() > wire::kMaxRelayInnerBytes) {
    oversize_drops_++;
    spdlog::warn("dropping a datagram to {} (through relay {}) that does not fit in {} bytes",
                 to_addr, via, wire::kMaxRelayInnerBytes);
    return;
  }
  frame.body = std::move(rf);
  SendDatagram(via, frame);
}

TcpHub::ConnId NetEndpoint::HubId(node::ConnId id) const {
  if (id < node::kFirstOutgoingConn) return id;
  auto it = hub_id_.find(id);
  return it == hub_id_.end() ? 0 : it->second;
}

void NetEndpoint::Connect(node::ConnId id, const std::string& to_addr) {
  auto to = NetAddr::Parse(to_addr);
  if (!to) {
    feed_(node::ConnClosed{id, false});
    return;
  }
  // A connect that fails at once calls the close handler inside TcpHub::Connect(); the close is
  // queued like any other input and the id is never registered.
  connecting_ = id;
  connect_failed_ = false;
  const TcpHub::ConnId hid = tcp_->Connect(
      *to, [this, id](TcpHub::ConnId, transport::Bytes&& payload) { on_reply_(id, payload); },
      [this, id](TcpHub::ConnId hid, int status) {
        if (connecting_ == id) connect_failed_ = true;
        hub_id_.erase(id);
        node_id_.erase(hid);
        feed_(node::ConnClosed{id, status == 0});
      });
  connecting_ = 0;
  if (!connect_failed_) {
    hub_id_[id] = hid;
    node_id_[hid] = id;
  }
}

void NetEndpoint::SendFrame(node::ConnId conn, const wire::Frame& msg) {
  TcpHub::ConnId hid = HubId(conn);
  if (hid == 0) return;
  if (streamer_ != nullptr && streamer_->Streaming(hid)) {
    streamer_->After(hid, codec_->EncodeFrame(msg));  // after the snapshot on its way
  } else {
    tcp_->Send(hid, codec_->EncodeFrame(msg));
  }
}

void NetEndpoint::SendParams(const node::SendParams& s) {
  if (streamer_ == nullptr) return node::Endpoint::SendParams(s);
  if (TcpHub::ConnId hid = HubId(s.conn)) streamer_->Start(hid, s);
}

void NetEndpoint::Close(node::ConnId conn, bool abort) {
  TcpHub::ConnId hid = HubId(conn);
  if (hid == 0) return;
  if (abort) {
    if (streamer_ != nullptr) streamer_->Cancel(hid);
    tcp_->Abort(hid);
  } else if (streamer_ != nullptr) {
    streamer_->CloseAfter(hid);  // after a snapshot on its way
  } else {
    tcp_->Close(hid);
  }
}

}  // namespace meshtrain::daemon
