// The simulator's cache hints (node/sim_hooks.h). No effect on behaviour.
#include "node/node.h"
#include "node/node_internal.h"

namespace meshtrain::node {

void Node::Prefetch(int stage, const Input* in) const {
  if (stage == 0) {
    // The deadlines and flags read on every input sit together after the barrier state (node.h).
    const void* hot[] = {
        this,       &config_.training,  &swim_,  &external_index_, &out_,  &stats_, &barrier_,
        &progress_, &barrier_deadline_, &fetch_, &watchers_,       &round_};
    for (const void* p : hot) __builtin_prefetch(p);
    return;
  }
  if (stage == 1) {
    if (barrier_) {
      const char* b = reinterpret_cast<const char*>(barrier_.get());
      for (size_t off = 0; off < sizeof(sync::BarrierCore); off += 64) __builtin_prefetch(b + off);
    }
    return;
  }
  // Stages 2 and 3: the sender of a datagram (progress news for the barrier) or of a frame
  // (parameter chunks and acknowledgements: the external view and the barrier).
  const std::string* sender = nullptr;
  bool frame = false;
  if (const auto* d = std::get_if<DatagramIn>(in)) {
    sender = &d->msg.sender;
  } else if (const auto* f = std::get_if<FrameIn>(in)) {
    sender = &f->msg.sender;
    frame = true;
  }
  if (sender == nullptr || sender->empty()) return;
  if (barrier_) barrier_->Prefetch(*sender, stage - 2);
  if (frame && !swim_) {
    if (stage == 2) {
      external_index_.PrefetchBucket(*sender);
    } else {
      const size_t pos = external_index_.Probe(*sender);
      if (pos < external_.size()) __builtin_prefetch(&external_[pos]);
    }
  }
}

}  // namespace meshtrain::node
