#include "sim/psp_sim.h"

#include "membership/swim.h"
#include "sim/node_sim.h"

namespace meshtrain::sim {
namespace {

// bsp/ssp/dssp need a full view per node: n² entries. Beyond this the run would need gigabytes.
constexpr size_t kMaxFullViewNodes = 4000;
// --membership with full SWIM views (every node knows the whole mesh: n² member records, about
// 1.2 KB per pair with the runs' state) is for barriers that need them (bsp, ssp, dssp, wbsp);
// beyond this bound they would need tens of gigabytes. pbsp/pssp/asp run bounded SWIM views.
constexpr size_t kMaxSwimNodes = 2000;

}  // namespace

bool NeedsFullView(sync::Policy p) {
  return p == sync::Policy::kBsp || p == sync::Policy::kSsp || p == sync::Policy::kDssp ||
         p == sync::Policy::kWbsp;
}

std::optional<StepDist> ParseStepDist(const std::string& name) {
  if (name == "gamma") return StepDist::kGamma;
  if (name == "exp" || name == "exponential") return StepDist::kExponential;
  if (name == "const" || name == "constant") return StepDist::kConstant;
  return std::nullopt;
}

const char* StepDistName(StepDist dist) {
  switch (dist) {
    case StepDist::kGamma:
      return "gamma";
    case StepDist::kExponential:
      return "exp";
    case StepDist::kConstant:
      return "const";
  }
  return "unknown";
}

std::string PolicyLabel(sync::Policy policy, size_t sample, uint64_t staleness) {
  std::string label = sync::PolicyName(policy);
  if (sync::IsProbabilistic(policy)) label += ":b" + std::to_string(sample);
  if (policy == sync::Policy::kSsp || policy == sync::Policy::kPssp ||
      policy == sync::Policy::kDssp) {
    label += ":s" + std::to_string(staleness);
  }
  return label;
}

learn::Status ValidatePspSimOptions(const PspSimOptions& o) {
  using learn::Status;
  if (o.nodes < 1 || o.nodes > 1000000) return Status::InvalidArgument("--nodes must be 1..1e6");
  if (!(o.duration_s > 0) || o.duration_s > 1e7) {
    return Status::InvalidArgument("--duration must be positive");
  }
  if (NeedsFullView(o.barrier.policy) && o.nodes > kMaxFullViewNodes) {
    return Status::InvalidArgument(std::string(sync::PolicyName(o.barrier.policy)) +
                                   " needs every node to track every peer (" +
                                   "n² progress entries); use at most " +
                                   std::to_string(kMaxFullViewNodes) + " nodes, or pbsp/pssp");
  }
  if (o.membership && o.nodes > kMaxSwimNodes && NeedsFullView(o.barrier.policy)) {
    return Status::InvalidArgument(
        std::string(sync::PolicyName(o.barrier.policy)) +
        " needs every node's SWIM to know the whole mesh (n² member records); use at most " +
        std::to_string(kMaxSwimNodes) + " nodes with --membership, or pbsp/pssp/asp");
  }
  if (!(o.compute.step_ms >= 1)) return Status::InvalidArgument("--step-time must be >= 1 ms");
  if (!(o.compute.step_cv >= 0) || !(o.compute.node_cv >= 0) || o.compute.step_cv > 10 ||
      o.compute.node_cv > 10) {
    return Status::InvalidArgument("--step-cv and --node-cv must be in [0, 10]");
  }
  if (!(o.compute.straggler_fraction >= 0 && o.compute.straggler_fraction <= 1) ||
      !(o.compute.straggler_factor > 0)) {
    return Status::InvalidArgument("--stragglers FRACTION:FACTOR needs 0<=FRACTION<=1, FACTOR>0");
  }
  if (!(o.net.latency_ms >= 0) || !(o.net.jitter_ms >= 0) || !(o.net.bandwidth_mbps > 0) ||
      !(o.net.loss >= 0 && o.net.loss < 1) || !(o.net.retransmit_ms >= 0)) {
    return Status::InvalidArgument(
        "network: latency and jitter >= 0, bandwidth > 0, loss in [0, 1)");
  }
  if (o.task.empty()) {
    return Status::InvalidArgument(
        "--task must be none, synthetic, a Fashion-MNIST preset or a layer spec");
  }
  if (o.task != "none" && (o.task_dim < 1 || o.batch < 1 || !(o.lr > 0))) {
    return Status::InvalidArgument("task: dim, batch and lr must be positive");
  }
  if (!(o.eval_average >= 0 && o.eval_average < 1)) {
    return Status::InvalidArgument("--eval-average must be in [0, 1)");
  }
  if (o.nodes_per_host > 0 && !(o.host_cores > 0 && o.host_cores <= 4096)) {
    return Status::InvalidArgument("--host-cores must be in (0, 4096]");
  }
  if (!(o.step_overhead_ms >= 0 && o.step_overhead_ms <= 1e6)) {
    return Status::InvalidArgument("--step-overhead must be in [0, 1e6] ms");
  }
  if (!(o.eval_cost_ms >= 0 && o.eval_cost_ms <= 1e6)) {
    return Status::InvalidArgument("--eval-cost must be in [0, 1e6] ms");
  }
  if ((o.step_overhead_ms > 0 || o.eval_cost_ms > 0) && o.nodes_per_host == 0) {
    return Status::InvalidArgument(
        "--step-overhead and --eval-cost need --nodes-per-host (they are host CPU)");
  }
  if (o.stop_at_target && o.task == "none") {
    return Status::InvalidArgument("--stop-at-target needs a --task");
  }
  for (const CrashSpec& c : o.crashes) {
    if (!(c.at_s >= 0)) return Status::InvalidArgument("--crash time must be >= 0");
  }
  if (o.fanout == 0 && o.select != sync::SelectPolicy::kAll) {
    return Status::InvalidArgument("--fanout must be >= 1");
  }
  if (!(o.eval_every_s > 0)) return Status::InvalidArgument("--eval-every must be positive");
  return Status::OK();
}

learn::Result<PspSimResult> RunPspSim(const PspSimOptions& options) {
  if (learn::Status s = ValidatePspSimOptions(options); !s.ok()) return s;
  NodeSim sim(options);
  if (learn::Status s = sim.Setup(); !s.ok()) return s;
  return sim.Run();
}

}  // namespace meshtrain::sim
