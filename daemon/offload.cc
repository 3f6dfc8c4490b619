#include "daemon/offload.h"

#include <memory>

namespace meshtrain::daemon {
namespace {

struct Job {
  uv_work_t req{};
  std::function<void()> work;
  std::function<void()> done;
};

}  // namespace

void Offload(uv_loop_t* loop, std::function<void()> work, std::function<void()> done) {
  auto job = std::make_unique<Job>();
  job->work = std::move(work);
  job->done = std::move(done);
  job->req.data = job.get();
  const int rc = uv_queue_work(
      loop, &job->req, [](uv_work_t* r) { static_cast<Job*>(r->data)->work(); },
      [](uv_work_t* r, int) {
        std::unique_ptr<Job> owned(static_cast<Job*>(r->data));
        owned->done();
      });
  if (rc == 0) {
    job.release();  // owned by the request until its after-work callback
    return;
  }
  job->work();
  job->done();
}

void SolvePlanOffLoop(uv_loop_t* loop, node::PlanRequest req,
                      std::function<void(node::PlanResult)> done) {
  auto shared_req = std::make_shared<node::PlanRequest>(std::move(req));
  auto result = std::make_shared<node::PlanResult>();
  result->id = shared_req->id;
  Offload(
      loop,
      [shared_req, result] {
        sync::Rng rng(shared_req->seed);
        result->receivers =
            sync::Select(sync::SelectPolicy::kSelmcast, shared_req->self, shared_req->candidates,
                         shared_req->fanout, shared_req->bandwidth, rng);
      },
      [result, done = std::move(done)] { done(std::move(*result)); });
}

}  // namespace meshtrain::daemon
