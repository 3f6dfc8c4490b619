// Classic SGD with momentum (heavy ball, as PyTorch's SGD with dampening 0):
//   v <- mu * v + g;   x <- x - lr * v.
// The velocity is optimizer state that checkpoints save and restore (docs/contract.md
// "Training"). Parameter mixing (docs/contract.md "Parameter exchange") changes x only; the
// velocity keeps the node's own recent direction.
//
// Thread-safety: none; owned by the task's single trainer thread.
#pragma once

#include <Eigen/Core>
#include <cstddef>

namespace meshtrain::learn {

class SgdMomentum {
 public:
  SgdMomentum(size_t num_params, float lr, float momentum)
      : lr_(lr), momentum_(momentum), velocity_(Eigen::VectorXf::Zero(num_params)) {}

  // Precondition: grad and *params have velocity().size() entries.
  void Apply(const Eigen::VectorXf& grad, Eigen::VectorXf* params) {
    velocity_ = momentum_ * velocity_ + grad;
    *params -= lr_ * velocity_;
  }

  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }
  float momentum() const { return momentum_; }
  void set_momentum(float m) { momentum_ = m; }
  Eigen::VectorXf& velocity() { return velocity_; }
  const Eigen::VectorXf& velocity() const { return velocity_; }
  void ResetVelocity() { velocity_.setZero(); }

 private:
  float lr_;
  float momentum_;
  Eigen::VectorXf velocity_;
};

}  // namespace meshtrain::learn
