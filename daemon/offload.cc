#include "daemon/offload.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "daemon/trainer/trainer.h"

namespace meshtrain::daemon {
namespace {

struct Job {
  uv_work_t req{};
  std::function<void()> work;
  std::function<void()> done;
};

// The bulk thread: runs what OffloadBulk hands it, one job at a time, at nice +kBulkNice. (A
// thread's nice can only go up without privileges, so bulk work gets a thread of its own rather
// than lowering a pool thread for a while.)
class BulkExecutor {
 public:
  BulkExecutor() : thread_([this] { Run(); }) {}
  ~BulkExecutor() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  // Runs `work` there and waits for it. `work` (and what it holds: a model's memory) is destroyed
  // there too.
  void RunAndWait(std::function<void()> work) {
    std::packaged_task<void()> task(std::move(work));
    auto finished = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(task));
    }
    cv_.notify_one();
    finished.get();
  }

 private:
  void Run() {
    NameThisThread("mt-bulk");
    BulkThread();
    while (true) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, nothing left
        task = std::move(jobs_.front());
        jobs_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

BulkExecutor& Bulk() {
  static BulkExecutor executor;
  return executor;
}

}  // namespace

void Offload(uv_loop_t* loop, std::function<void()> work, std::function<void()> done) {
  auto job = std::make_unique<Job>();
  job->work = std::move(work);
  job->done = std::move(done);
  job->req.data = job.get();
  const int rc = uv_queue_work(
      loop, &job->req,
      [](uv_work_t* r) {
        ThroughputThread();  // a pool thread: its wake-ups do not preempt
                             // (daemon/trainer/trainer.h)
        static_cast<Job*>(r->data)->work();
      },
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

void OffloadBulk(uv_loop_t* loop, std::function<void()> work, std::function<void()> done) {
  // Moved on, so that nothing the work holds is freed with the pool's job on the loop thread.
  Offload(
      loop, [work = std::move(work)]() mutable { Bulk().RunAndWait(std::move(work)); },
      std::move(done));
}

void SolvePlanOffLoop(uv_loop_t* loop, node::PlanRequest req,
                      std::function<void(node::PlanResult, PlanView)> done) {
  auto shared_req = std::make_shared<node::PlanRequest>(std::move(req));
  auto result = std::make_shared<node::PlanResult>();
  auto view = std::make_shared<PlanView>();
  result->id = shared_req->id;
  Offload(
      loop,
      [shared_req, result, view] {
        sync::Rng rng(shared_req->seed);
        sync::Assignment plan;
        result->receivers =
            sync::Select(sync::SelectPolicy::kSelmcast, shared_req->self, shared_req->candidates,
                         shared_req->fanout, shared_req->bandwidth, rng, {}, &plan);
        const auto caps = sync::ResolveCapacities(plan.nodes, shared_req->bandwidth);
        const std::vector<double> rates = sync::FairSenderRates(plan, caps);
        view->rate_mbps = plan.rate_mbps;
        for (size_t i = 0; i < plan.nodes.size() && i < plan.receivers.size(); ++i) {
          for (size_t j : plan.receivers[i]) {
            view->edges.push_back({plan.nodes[i], plan.nodes[j], i < rates.size() ? rates[i] : 0});
          }
        }
      },
      [result, view, done = std::move(done)] { done(std::move(*result), std::move(*view)); });
}

}  // namespace meshtrain::daemon
