// One multicast round of this node's parameters (node/node_rounds.cc; docs/contract.md
// "Parameter exchange"): a snapshot goes to each of the round's receivers over its parameter
// connection, and the round ends when every transfer was acknowledged (ParamAck) or lost (its
// connection closed first). One concept, one type: the transfers in flight, by connection, and
// what the round delivered. The node chooses the receivers, opens the connections, encodes the
// chunks and reports each transfer's end.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "node/io.h"

namespace meshtrain::node {

// What a peer holds of this node's model (sender side) or this node of the peer's (receiver
// side): the reference compressed changes are computed against and added to (wire/compress.h).
struct Reference {
  uint64_t round = 0;
  uint32_t since_full = 0;  // changes sent on top of the last full snapshot
  std::shared_ptr<const std::vector<float>> values;
};

class Round {
 public:
  // The transfer to one receiver.
  struct Transfer {
    std::string receiver;
    uint64_t wire_bytes = 0;  // what it costs on the wire (payload + frame overhead)
    // Compressed transfers: the receiver's reference once it acknowledges (what it
    // reconstructs), and whether this transfer was a full snapshot.
    std::shared_ptr<const std::vector<float>> new_ref;
    bool full = true;
  };

  // Round `id`, started at `started`; each delivered transfer counts `raw_per_rx` bytes as plain
  // float32 chunks. A `consensus` round carries the consensus model.
  Round(uint64_t id, TimeMs started, uint64_t raw_per_rx, bool consensus)
      : id_(id), started_(started), raw_per_rx_(raw_per_rx), consensus_(consensus) {}

  uint64_t id() const { return id_; }
  bool consensus() const { return consensus_; }
  // A round carrying this node's final model (by identity), or null; `to_leader`: the
  // consensus's copy for its leader (not one offered to a peer still training).
  void CarriesFinal(const void* model, bool to_leader = false) {
    final_of_ = model;
    to_leader_ = to_leader;
  }
  const void* final_of() const { return final_of_; }
  bool to_leader() const { return to_leader_; }
  uint64_t raw_per_rx() const { return raw_per_rx_; }

  void Add(ConnId conn, Transfer t);
  bool Carries(ConnId conn) const { return transfers_.count(conn) > 0; }
  // The receiver of the transfer on `conn`, or null when the round has none there.
  const std::string* ReceiverOn(ConnId conn) const;
  // Ends the transfer on `conn` (which the round carries) and returns it; an acknowledged one
  // (`ok`) counts as delivered.
  Transfer End(ConnId conn, bool ok);
  // No transfer is left in flight.
  bool done() const { return outstanding_ == 0; }
  // What the round delivered (its output once done).
  RoundDone Summary(TimeMs now) const;
  int delivered() const { return delivered_; }
  uint64_t bytes() const { return bytes_; }

 private:
  uint64_t id_ = 0;
  TimeMs started_ = 0;
  uint64_t raw_per_rx_ = 0;
  bool consensus_ = false;
  const void* final_of_ = nullptr;
  bool to_leader_ = false;
  int outstanding_ = 0;
  int delivered_ = 0;
  uint64_t bytes_ = 0;                    // acknowledged bytes on the wire
  uint64_t raw_bytes_ = 0;                // the same transfers as plain float32 chunks
  std::map<ConnId, Transfer> transfers_;  // connection -> transfer in flight on it
};

}  // namespace meshtrain::node
