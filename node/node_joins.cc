// Push-pulls, joins, retry-join's answers, the graceful leave, and the bandwidth estimates the
// node publishes (docs/contract.md "Membership", "Receiver selection").
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "node/node.h"
#include "node/node_internal.h"

namespace meshtrain::node {

namespace ms = ::meshtrain::membership;

// ---- push-pull, joins, leave ------------------------------------------------------------------

void Node::StartPushPull(const ms::OutPushPull& pp, uint64_t join_tag, TimeMs now) {
  (void)now;
  const ConnId conn = next_conn_++;
  auto ctx = std::make_unique<PushPull>();
  ctx->addr = pp.to_addr;
  ctx->join = pp.request.join;
  ctx->join_tag = join_tag;
  pushpulls_[conn] = std::move(ctx);
  if (join_tag != 0) {
    if (auto j = joins_.find(join_tag); j != joins_.end()) j->second.outstanding++;
  }
  wire::Frame f;
  f.sender = config_.name;
  f.body = wire::PushPullMsg{false, pp.request};
  Emit(Connect{conn, pp.to_addr});
  Emit(SendFrame{conn, std::move(f)});
}

void Node::OnPushPullReply(ConnId conn, wire::PushPullMsg& msg, TimeMs now) {
  pushpulls_[conn]->done = true;
  swim_->HandlePushPullResponse(msg.state, now);
  Emit(Close{conn, false});
  Pump(now, 0);
}

void Node::FinishJoinPart(uint64_t tag, bool ok) {
  if (tag == 0) return;
  auto it = joins_.find(tag);
  if (it == joins_.end()) return;
  it->second.outstanding--;
  if (ok) it->second.joined++;
  if (it->second.outstanding > 0) return;
  CommandDone done{tag, it->second.joined > 0, it->second.joined, ""};
  if (!done.ok) done.error = "could not contact any of the given peers";
  joins_.erase(it);
  Emit(std::move(done));
}

void Node::OnJoin(const JoinCmd& c, TimeMs now) {
  if (c.tag == 0) {  // a retry-join's resolved addresses: nobody waits for an answer
    if (lifecycle_.leaving() || !swim_) return;
    if (!c.addrs.empty()) swim_->Join(c.addrs, now);
    Pump(now, 0);
    return;
  }
  if (lifecycle_.leaving() || !swim_) {
    Emit(CommandDone{c.tag, false, 0, lifecycle_.leaving() ? "agent is leaving" : "no membership"});
    return;
  }
  joins_[c.tag] = JoinWait{};
  swim_->Join(c.addrs, now);
  Pump(now, c.tag);
  auto it = joins_.find(c.tag);
  if (it != joins_.end() && it->second.outstanding == 0) {
    joins_.erase(it);
    Emit(CommandDone{c.tag, false, 0, "no push-pull could be started"});
  }
}

void Node::OnLeave(TimeMs now) {
  if (!lifecycle_.BeginLeave(now)) return;
  retry_join_at_ = sync::kNoDeadline;
  barrier_waiting_ = false;
  pending_.reset();
  if (swim_) swim_->Leave(now);
  Pump(now, 0);
}

void Node::OnForceLeave(const ForceLeaveCmd& c, TimeMs now) {
  if (swim_ && swim_->ForceLeave(c.name, now)) {
    Pump(now, 0);
    Emit(CommandDone{c.tag, true, 0, ""});
    return;
  }
  const ms::Member* m = swim_ ? swim_->Find(c.name) : nullptr;
  Emit(CommandDone{
      c.tag, false, 0,
      m == nullptr ? "no member named '" + c.name + "'"
                   : "member '" + c.name + "' is " + ms::StatusName(m->status) + ", not failed"});
}

// Every bandwidth_interval_ms: measurements become estimates, published when they moved > 10 %.
void Node::UpdateBandwidth(TimeMs now) {
  up_.Sample();
  down_.Sample();
  // Capacity estimates age with a half-life of about 30 s (15 ticks of 2 s).
  up_.estimate.Decay(0.955);
  down_.estimate.Decay(0.955);
  probes_.Age(now);
  if (!swim_ || lifecycle_.leaving()) return;
  const ms::Member* self = swim_->Find(config_.name);
  if (self == nullptr) return;
  const float up = static_cast<float>(uplink_estimate_mbps());
  const float down = static_cast<float>(downlink_estimate_mbps());
  auto moved = [](float a, float b) { return std::abs(a - b) > 0.1f * std::max(a, b); };
  if (moved(up, self->meta.uplink_mbps) || moved(down, self->meta.downlink_mbps)) {
    ms::Meta meta = self->meta;
    meta.uplink_mbps = up;
    meta.downlink_mbps = down;
    swim_->SetMeta(meta, now);
  }
}

}  // namespace meshtrain::node
