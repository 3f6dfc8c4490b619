// Embedding meshtrain in a C++ program: your own model and data as a learn::Task,
// trained by the agent's built-in trainer across the mesh — membership, PSP barriers, SELMCAST
// multicast and the faults handling come with daemon::Agent.
//
// The task here fits y = 2 x0 - 3 x1 + 0.5 (plus noise) by linear regression; a real one would
// wrap your network. A Task owns ONE contiguous parameter vector (params(), what the mesh
// averages) and implements four methods: train_size, test_size, ComputeLossAndGradient (the
// optimizer step, minibatch order, checkpoints and mixing are the base class's and the agent's)
// and EvaluateAt.
//
//   build/examples/embed_agent --name a --bind 127.0.0.1:7000 --rpc 127.0.0.1:7001
//   build/examples/embed_agent --name b --bind 127.0.0.1:7002 --rpc 127.0.0.1:7003
//       --join 127.0.0.1:7000        (one command line)
//   build/cli/meshtrain status --rpc 127.0.0.1:7001      # step, loss, accuracy (R^2)
//
// Every other agent option can be set on the AgentConfig (see daemon/config.h); Ctrl-C leaves.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>

#include "daemon/agent.h"
#include "learn/rng.h"
#include "learn/task.h"

namespace {

using meshtrain::learn::EvalResult;
using meshtrain::learn::Task;
using meshtrain::learn::TaskOptions;

class LineTask : public Task {
 public:
  explicit LineTask(const TaskOptions& options) : Task("line-fit", 3, options) {
    std::mt19937 rng(42);  // the same data on every node: one function to learn
    std::normal_distribution<float> n01(0.0f, 1.0f);
    for (auto* set : {&train_, &test_}) {
      set->resize(set == &train_ ? 2048 : 512);
      for (Sample& s : *set) {
        s.x0 = n01(rng);
        s.x1 = n01(rng);
        s.y = 2 * s.x0 - 3 * s.x1 + 0.5f + 0.1f * n01(rng);
      }
    }
  }
  size_t train_size() const override { return train_.size(); }
  size_t test_size() const override { return test_.size(); }

  EvalResult EvaluateAt(const float* p) const override {
    double sse = 0, mean = 0, var = 0;
    for (const Sample& s : test_) mean += s.y / static_cast<double>(test_.size());
    for (const Sample& s : test_) {
      const double e = p[0] * s.x0 + p[1] * s.x1 + p[2] - s.y;
      sse += e * e;
      var += (s.y - mean) * (s.y - mean);
    }
    EvalResult r;
    r.loss = sse / static_cast<double>(test_.size());
    r.accuracy = std::max(0.0, 1.0 - sse / var);  // R^2
    r.samples = test_.size();
    return r;
  }

 protected:
  float ComputeLossAndGradient(const uint32_t* idx, size_t n, float* grad) override {
    const float* p = params_.data();
    float loss = 0;
    std::fill(grad, grad + 3, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      const Sample& s = train_[idx[i]];
      const float e = p[0] * s.x0 + p[1] * s.x1 + p[2] - s.y;
      loss += e * e / static_cast<float>(n);
      grad[0] += 2 * e * s.x0 / static_cast<float>(n);
      grad[1] += 2 * e * s.x1 / static_cast<float>(n);
      grad[2] += 2 * e / static_cast<float>(n);
    }
    return loss;
  }

 private:
  struct Sample {
    float x0, x1, y;
  };
  std::vector<Sample> train_, test_;
};

}  // namespace

int main(int argc, char** argv) {
  meshtrain::daemon::AgentConfig config;
  config.profile = meshtrain::membership::TimingProfile::kLocal;
  config.eval_every = 50;
  CLI::App app{"A meshtrain agent embedded in a C++ program, training its own task"};
  app.add_option("--name", config.name, "Node name");
  app.add_option("--bind", config.bind, "IP:PORT for membership and parameters")
      ->capture_default_str();
  app.add_option("--rpc", config.rpc, "IP:PORT of the control endpoint")->capture_default_str();
  app.add_option("--join", config.join, "Peer to join (repeatable)");
  app.add_option("--steps", config.steps, "Stop training after N steps (0 = unbounded)");
  CLI11_PARSE(app, argc, argv);
  if (auto st = config.Finalize(); !st.ok()) {
    std::fprintf(stderr, "embed_agent: %s\n", st.message().c_str());
    return 2;
  }
  TaskOptions options;
  options.batch_size = 32;
  options.lr = 0.02f;
  options.momentum = 0.9f;
  options.data_seed = meshtrain::learn::SeedFromString(config.name);  // sample order per node
  meshtrain::daemon::Agent agent(config, std::make_unique<LineTask>(options));
  return agent.Run();
}
