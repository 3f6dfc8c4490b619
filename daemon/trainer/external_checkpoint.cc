#include "daemon/trainer/external_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "daemon/ops/metrics.h"
#include "learn/checkpoint.h"

namespace meshtrain::daemon {

ExternalCheckpoints::ExternalCheckpoints(std::string dir, int every, std::string node,
                                         MetricsLog* metrics)
    : dir_(std::move(dir)),
      every_(static_cast<uint64_t>(std::max(1, every))),
      node_(std::move(node)),
      metrics_(metrics),
      worker_("mt-checkpoint", [this](Job& job) { Write(job); }) {
  worker_.Start();
}

learn::Result<std::optional<ExternalCheckpoints::Loaded>> ExternalCheckpoints::Load() const {
  auto loaded = learn::LoadLatestGood(dir_);
  if (!loaded.ok()) {
    if (loaded.status().code() == learn::Status::Code::kNotFound) {
      return std::optional<Loaded>();
    }
    return learn::Status::Corruption("no usable checkpoint in " + dir_ + ": " +
                                     loaded.status().message());
  }
  for (const auto& why : loaded->skipped) {
    spdlog::error("skipped a bad checkpoint, using the previous one: {}", why);
  }
  const learn::CheckpointData& d = loaded->data;
  if (d.task != kTask) {
    return learn::Status::InvalidArgument(
        "checkpoint " + loaded->path + " is for task " + d.task +
        " (a built-in trainer's), not an external trainer's: use another --data-dir");
  }
  if (d.step < 0 || d.params.size() == 0) {
    return learn::Status::Corruption("checkpoint " + loaded->path + " holds no model");
  }
  Loaded out;
  out.step = static_cast<uint64_t>(d.step);
  out.params = std::make_shared<const std::vector<float>>(d.params.data(),
                                                          d.params.data() + d.params.size());
  out.what = d.Meta("model");
  out.path = loaded->path;
  return std::optional<Loaded>(std::move(out));
}

bool ExternalCheckpoints::Due(uint64_t step) const {
  return step > last_step_ && step / every_ > last_step_ / every_;
}

void ExternalCheckpoints::Save(uint64_t step, std::shared_ptr<const std::vector<float>> params,
                               const char* what) {
  if (!params || params->empty()) return;
  last_step_ = std::max(last_step_, step);
  worker_.Post(Job{step, std::move(params), what});
}

void ExternalCheckpoints::Write(Job& job) {
  learn::CheckpointData data;
  data.task = kTask;
  data.step = static_cast<int64_t>(job.step);
  data.params.resize(static_cast<Eigen::Index>(job.params->size()));
  std::memcpy(data.params.data(), job.params->data(), job.params->size() * sizeof(float));
  job.params.reset();  // the buffer goes back to the trainer's pool before the (slow) write
  data.metadata = {{"node", node_}, {"model", job.what}};
  if (auto st = learn::SaveCheckpointToDir(dir_, data); !st.ok()) {
    spdlog::error("checkpoint failed: {}", st.message());
    return;
  }
  written_++;
  metrics_->Write("checkpoint", {{"step", job.step}, {"model", job.what}});
}

}  // namespace meshtrain::daemon
