#include "sim/node_net.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace meshtrain::sim {
namespace {

// Wire sizes of the small messages (envelope included), bytes.
constexpr size_t kQueryBytes = 48;
constexpr size_t kReplyBytes = 56;
constexpr size_t kAckBytes = 48;
constexpr size_t kFrameHeaderBytes = 64;
constexpr size_t kMemberStateBytes = 64;  // per member of a push-pull
constexpr int kMaxRetransmits = 10;

struct Later {
  bool operator()(const SimEvent& a, const SimEvent& b) const {
    return a.at != b.at ? a.at > b.at : a.seq > b.seq;
  }
};

size_t DatagramBytes(const wire::Datagram& d) {
  if (const auto* p = std::get_if<membership::Packet>(&d.body)) {
    size_t bytes = membership::EstimatePacketOverhead(*p) + wire::kEnvelopeOverhead;
    for (const membership::Update& u : p->updates) bytes += membership::EstimateSize(u);
    return bytes;
  }
  return std::holds_alternative<wire::ProgressQuery>(d.body) ? kQueryBytes : kReplyBytes;
}

// Only frames and closes depend on a connection; every other input is admitted.
bool OnConnection(const node::Input& in) {
  return std::holds_alternative<node::FrameIn>(in) || std::holds_alternative<node::ConnClosed>(in);
}

}  // namespace

NodeNet::NodeNet(size_t nodes, const NetModel& model, size_t param_bytes, uint64_t seed)
    : model_(model),
      param_bytes_(param_bytes),
      rng_(seed),
      names_(nodes),
      up_(nodes, 1),
      uplink_free_(nodes, 0),
      downlink_free_(nodes, 0),
      traffic_(nodes) {
  for (size_t i = 0; i < nodes; ++i) names_[i] = "n" + std::to_string(i);
  wheel_.resize(static_cast<size_t>(kWheelMs));
}

size_t NodeNet::Upcoming(const SimEvent** first) const {
  if (!far_.empty() && far_.front().at == cur_) return 0;
  const std::vector<SimEvent>& bucket = wheel_[static_cast<size_t>(cur_ & (kWheelMs - 1))];
  if (pos_ >= bucket.size()) return 0;
  *first = bucket.data() + pos_;
  return bucket.size() - pos_;
}

void NodeNet::Push(TimeMs at, SimEvent::Kind kind, uint32_t node, uint32_t slot, uint8_t input) {
  at = std::max(at, cur_);
  const SimEvent ev{at, seq_++, node, slot, kind, input};
  if (at - cur_ < kWheelMs) {
    std::vector<SimEvent>& bucket = wheel_[static_cast<size_t>(at & (kWheelMs - 1))];
    if (bucket.capacity() == 0 && !spare_.empty()) {
      bucket.swap(spare_.back());
      spare_.pop_back();
    }
    bucket.push_back(ev);
    ++in_wheel_;
  } else {
    far_.push_back(ev);
    std::push_heap(far_.begin(), far_.end(), Later());
  }
}

bool NodeNet::PopUntil(TimeMs until, SimEvent* ev) {
  for (;;) {
    // An event that waited in far_ for this millisecond was pushed before any event of its
    // bucket (it was out of the wheel's reach then): it has the smaller sequence number.
    if (!far_.empty() && far_.front().at == cur_) {
      std::pop_heap(far_.begin(), far_.end(), Later());
      *ev = far_.back();
      far_.pop_back();
      return true;
    }
    std::vector<SimEvent>& bucket = wheel_[static_cast<size_t>(cur_ & (kWheelMs - 1))];
    if (pos_ < bucket.size()) {
      *ev = bucket[pos_++];
      --in_wheel_;
      return true;
    }
    bucket.clear();
    // The drained bucket's storage goes to the next bucket that fills (a few spares are kept):
    // every bucket of the wheel keeping the capacity of its busiest millisecond would hold
    // kWheelMs such arrays (about 20 KB per simulated node at 10 000 nodes).
    if (bucket.capacity() > 0) {
      if (spare_.size() < kSpareBuckets) spare_.push_back(std::vector<SimEvent>());
      if (spare_.back().capacity() < bucket.capacity()) spare_.back().swap(bucket);
      std::vector<SimEvent>().swap(bucket);
    }
    pos_ = 0;
    if (cur_ >= until) return false;
    if (in_wheel_ == 0) {
      if (far_.empty()) {
        cur_ = until;
        return false;
      }
      cur_ = std::min(far_.front().at, until);
    } else {
      ++cur_;
    }
  }
}

int64_t NodeNet::IndexOf(const std::string& name) const {
  if (name.size() < 2 || name.size() > 12 || name[0] != 'n') return -1;
  int64_t v = 0;
  for (size_t k = 1; k < name.size(); ++k) {
    if (name[k] < '0' || name[k] > '9') return -1;
    v = v * 10 + (name[k] - '0');
  }
  return v < static_cast<int64_t>(names_.size()) ? v : -1;
}

TimeMs NodeNet::Latency() {
  return static_cast<TimeMs>(
      std::llround(model_.latency_ms + rng_.Uniform() * std::max(0.0, model_.jitter_ms)));
}

size_t NodeNet::FrameBytes(const wire::Frame& f) const {
  if (const auto* c = std::get_if<wire::ParamChunk>(&f.body)) {
    // The transfer costs param_bytes in all; each chunk its share.
    if (c->total == 0) return kFrameHeaderBytes;
    return std::max<size_t>(kFrameHeaderBytes, param_bytes_ * wire::ChunkWireBytes(*c) /
                                                   (sizeof(float) * static_cast<size_t>(c->total)));
  }
  if (std::holds_alternative<wire::ParamAckMsg>(f.body)) return kAckBytes;
  if (const auto* pp = std::get_if<wire::PushPullMsg>(&f.body)) {
    return kFrameHeaderBytes + kMemberStateBytes * pp->state.members.size();
  }
  return kFrameHeaderBytes;
}

void NodeNet::Send(uint32_t from, node::SendDatagram&& d, TimeMs now) {
  traffic_[from].messages++;
  traffic_[from].bytes += DatagramBytes(d.msg);
  if (std::holds_alternative<membership::Packet>(d.msg.body)) ++membership_datagrams_;
  const int64_t to = IndexOf(d.to);
  if (Lost()) {
    ++datagrams_lost_;
    return;
  }
  if (to < 0) return;
  Deliver(now + Latency(), static_cast<uint32_t>(to),
          node::DatagramIn{names_[from], std::move(d.msg)});
}

NodeNet::Conn* NodeNet::Find(uint32_t node, node::ConnId id, bool* opener) {
  node::ConnId accept_id = id;
  if (id >= node::kFirstOutgoingConn) {
    auto o = outgoing_.find(OutKey(node, id));
    if (o == outgoing_.end()) return nullptr;
    accept_id = o->second;
  }
  auto it = conns_.find(accept_id);
  if (it == conns_.end()) return nullptr;
  Conn& c = it->second;
  *opener = id >= node::kFirstOutgoingConn;
  if (*opener ? c.opener != node : (!c.has_acceptor || c.acceptor != node)) return nullptr;
  return &c;
}

void NodeNet::MaybeErase(node::ConnId accept_id) {
  auto it = conns_.find(accept_id);
  if (it == conns_.end() || !it->second.at_opener.done || !it->second.at_acceptor.done) return;
  outgoing_.erase(OutKey(it->second.opener, it->second.opener_id));
  conns_.erase(it);
}

void NodeNet::Open(uint32_t from, const node::Connect& c, TimeMs now) {
  const node::ConnId id = next_accept_id_++;
  Conn conn;
  conn.opener = from;
  conn.opener_id = c.conn;
  const int64_t to = IndexOf(c.to);
  if (to >= 0 && static_cast<uint32_t>(to) != from && up(static_cast<uint32_t>(to))) {
    conn.acceptor = static_cast<uint32_t>(to);
    conn.has_acceptor = true;
  } else {
    // Refused or unanswered: the opener learns it after the connect timeout.
    conn.at_acceptor.fin = conn.at_acceptor.done = true;
    conn.at_opener.fin = true;
    Deliver(now + kConnectTimeoutMs, from, node::ConnClosed{c.conn, false});
  }
  conns_.emplace(id, conn);
  outgoing_.emplace(OutKey(from, c.conn), id);
}

void NodeNet::Send(uint32_t from, node::SendFrame&& f, TimeMs now) {
  bool opener = false;
  Conn* c = Find(from, f.conn, &opener);
  if (c == nullptr) return;
  End& mine = opener ? c->at_opener : c->at_acceptor;
  End& theirs = opener ? c->at_acceptor : c->at_opener;
  if (mine.fin || theirs.fin) return;  // closed: the node's late frames go nowhere
  const uint32_t to = opener ? c->acceptor : c->opener;
  const size_t bytes = FrameBytes(f.msg);
  traffic_[from].messages++;
  traffic_[from].bytes += bytes;
  if (std::holds_alternative<wire::ParamChunk>(f.msg.body)) ++param_frames_;
  if (!up(to)) return;  // its timeout ends the connection (Crash)
  // Queues on the sender's uplink and the receiver's downlink (MB/s -> bytes per ms).
  const double tx_ms = static_cast<double>(bytes) / std::max(1e-9, model_.bandwidth_mbps * 1000.0);
  const double start = std::max(static_cast<double>(now), uplink_free_[from]);
  uplink_free_[from] = start + tx_ms;
  double delay = static_cast<double>(Latency());
  for (int k = 0; k < kMaxRetransmits && Lost(); ++k) delay += model_.retransmit_ms;
  const double done = std::max(uplink_free_[from] + delay, downlink_free_[to] + tx_ms);
  downlink_free_[to] = done;
  const TimeMs at = std::max(static_cast<TimeMs>(std::ceil(done)), theirs.last_arrival);
  theirs.last_arrival = at;
  const node::ConnId their_id =
      opener ? outgoing_.at(OutKey(c->opener, c->opener_id)) : c->opener_id;
  Deliver(at, to, node::FrameIn{their_id, std::move(f.msg)});
}

void NodeNet::Close(uint32_t from, const node::Close& cl, TimeMs now) {
  bool opener = false;
  Conn* c = Find(from, cl.conn, &opener);
  if (c == nullptr) return;
  End& mine = opener ? c->at_opener : c->at_acceptor;
  End& theirs = opener ? c->at_acceptor : c->at_opener;
  if (mine.fin) return;
  mine.fin = true;
  Deliver(now, from, node::ConnClosed{cl.conn, !cl.abort});
  if (theirs.fin) return;
  theirs.fin = true;
  const uint32_t to = opener ? c->acceptor : c->opener;
  const node::ConnId their_id =
      opener ? outgoing_.at(OutKey(c->opener, c->opener_id)) : c->opener_id;
  // After the data in flight (an orderly close) or after one latency (a reset).
  Deliver(std::max(now + Latency(), theirs.last_arrival), to,
          node::ConnClosed{their_id, !cl.abort});
}

NodeNet::End* NodeNet::ArrivalEnd(uint32_t node, const node::Input& in, bool* opener,
                                  node::ConnId* id) {
  if (const auto* f = std::get_if<node::FrameIn>(&in)) {
    *id = f->conn;
  } else if (const auto* cc = std::get_if<node::ConnClosed>(&in)) {
    *id = cc->conn;
  } else {
    return nullptr;  // not on a connection
  }
  Conn* c = Find(node, *id, opener);
  if (c == nullptr) return nullptr;
  End& mine = *opener ? c->at_opener : c->at_acceptor;
  return mine.done ? nullptr : &mine;
}

bool NodeNet::Admissible(uint32_t node, const node::Input& in) {
  if (!OnConnection(in)) return true;
  bool opener = false;
  node::ConnId id = 0;
  return ArrivalEnd(node, in, &opener, &id) != nullptr;
}

bool NodeNet::Admit(uint32_t node, const node::Input& in) {
  if (!OnConnection(in)) return true;
  bool opener = false;
  node::ConnId id = 0;
  End* mine = ArrivalEnd(node, in, &opener, &id);
  if (mine == nullptr) return false;
  if (std::holds_alternative<node::ConnClosed>(in)) {
    mine->done = true;
    MaybeErase(opener ? outgoing_.at(OutKey(node, id)) : id);
  }
  return true;
}

void NodeNet::Crash(uint32_t node, TimeMs now) {
  up_[node] = 0;
  std::vector<node::ConnId> ids;
  for (auto& [id, c] : conns_) {
    if (c.opener == node || (c.has_acceptor && c.acceptor == node)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());  // a reproducible order of the deliveries below
  for (node::ConnId id : ids) {
    Conn& c = conns_.at(id);
    const bool opener = c.opener == node;
    End& mine = opener ? c.at_opener : c.at_acceptor;
    End& theirs = opener ? c.at_acceptor : c.at_opener;
    mine.fin = mine.done = true;
    if (!theirs.fin) {
      theirs.fin = true;
      if (opener) {
        Deliver(now + kStreamTimeoutMs, c.acceptor, node::ConnClosed{id, false});
      } else {
        Deliver(now + kStreamTimeoutMs, c.opener, node::ConnClosed{c.opener_id, false});
      }
    }
    MaybeErase(id);
  }
}

}  // namespace meshtrain::sim
