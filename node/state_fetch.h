// Join with state (node/node_state.cc): a node about to take its first step while every live
// training peer is further on fetches the most advanced one's model and adopts the slowest
// one's step. One concept, one type: the attempt's deadline and retries, whom it asks, the step
// it adopts, and the model's reassembly. The node decides when to fetch and executes the
// connection, the request and the adoption.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "node/io.h"
#include "wire/messages.h"

namespace meshtrain::node {

class StateFetch {
 public:
  // A fetch that failed early is tried again after this long (maybe from another peer).
  static constexpr TimeMs kRetryMs = 250;

  // The peer to fetch from: Consider every live training peer, then read `best` (empty: none).
  // Ties go to the first by name; `min_step` is the slowest one's step, of those whose step was
  // learned.
  struct Choice {
    std::string best;
    std::string best_addr;  // its parameter address
    uint64_t best_step = 0;
    uint64_t min_step = ~uint64_t{0};
    bool any_step_known = false;  // some peer's step was learned, not defaulted to 0
    void Consider(const std::string& name, const std::string& addr, uint64_t step, bool step_known);
  };

  // The whole attempt (learning the mesh, fetches, retries) ends `timeout` after the first call.
  void Arm(TimeMs now, TimeMs timeout) {
    if (deadline_ == 0) deadline_ = now + timeout;
  }
  TimeMs deadline() const { return deadline_; }
  // Before this, a failed fetch waits to be tried again.
  TimeMs retry_at() const { return retry_at_; }

  // A fetch from `c.best` on `conn`; the node continues after max(own step, c.min_step) (its own
  // step when no peer's step was learned). The peer answers with its next snapshot, which an
  // external trainer that syncs every H steps publishes only then: the attempt's deadline moves
  // to at least `answer_wait` from now.
  void Begin(ConnId conn, const Choice& c, uint64_t own_step, TimeMs now, TimeMs answer_wait);
  ConnId conn() const { return conn_; }
  const std::string& from() const { return from_; }
  uint64_t adopt_step() const { return adopt_step_; }
  // A chunk of the peer's model (checked by the caller): the model once it is complete.
  std::optional<wire::ParamAssembler::Model> Add(const wire::ParamChunk& c) {
    return assembler_.Add(c);
  }
  // The fetch's connection closed before the model came: true to try again at retry_at(),
  // false when the deadline leaves no time for it.
  bool Closed(TimeMs now);
  // A peer that closed a fetch of ours without its model (e.g. the consensus leader, which
  // answers a member it counts as a participant only with the consensus model, once it has one).
  bool ClosedOnUs(const std::string& name) const { return closed_on_us_.count(name) > 0; }

 private:
  TimeMs deadline_ = 0;
  TimeMs retry_at_ = 0;
  ConnId conn_ = 0;
  std::string from_;
  uint64_t adopt_step_ = 0;
  wire::ParamAssembler assembler_;
  std::set<std::string> closed_on_us_;
};

}  // namespace meshtrain::node
