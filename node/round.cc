#include "node/round.h"

#include <utility>

namespace meshtrain::node {

void Round::Add(ConnId conn, Transfer t) {
  transfers_[conn] = std::move(t);
  outstanding_++;
}

const std::string* Round::ReceiverOn(ConnId conn) const {
  auto it = transfers_.find(conn);
  return it == transfers_.end() ? nullptr : &it->second.receiver;
}

Round::Transfer Round::End(ConnId conn, bool ok) {
  auto it = transfers_.find(conn);
  Transfer t = std::move(it->second);
  transfers_.erase(it);
  outstanding_--;
  if (ok) {
    delivered_++;
    bytes_ += t.wire_bytes;
    raw_bytes_ += raw_per_rx_;
  }
  return t;
}

RoundDone Round::Summary(TimeMs now) const {
  const double seconds = static_cast<double>(now - started_) / 1000.0;
  return RoundDone{delivered_, bytes_, seconds, raw_bytes_};
}

}  // namespace meshtrain::node
