// optim/sgd.h — stochastic gradient descent with momentum, dampening, Nesterov
// momentum and L2 weight decay: torch.optim.SGD (PyTorch 1.13), step for step.
//
//   ls::optim::SGD sgd(net->parameters(),
//                      ls::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
//   sgd.zero_grad(); loss.backward(); sgd.step();
//
// Per parameter p with gradient g, at its t-th step (t = 1, 2, ...):
//   d   = g + weight_decay * p
//   buf = d                                         if t == 1
//   buf = momentum * buf + (1 - dampening) * d      otherwise
//   d   = d + momentum * buf   (nesterov)   or   d = buf   (momentum != 0)
//   p   = p - lr * d
// With momentum == 0 there is no buffer: p = p - lr * (g + weight_decay * p).
// Parameters with an undefined grad are skipped (Note [Undefined gradients are
// skipped] in optim/optimizer.h).
// Read before: optim/optimizer.h. Read next: optim/adam.h.
#pragma once

#include "optim/optimizer.h"

namespace lockstep::optim {

class SGDOptions {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}
  SGDOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  SGDOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  SGDOptions& dampening(double v) {
    dampening_ = v;
    return *this;
  }
  SGDOptions& nesterov(bool v) {
    nesterov_ = v;
    return *this;
  }
  SGDOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  bool nesterov() const { return nesterov_; }
  double weight_decay() const { return weight_decay_; }

 private:
  double lr_;
  double momentum_ = 0.0;
  double dampening_ = 0.0;
  bool nesterov_ = false;
  double weight_decay_ = 0.0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  // libtorch's SGD(params, lr) (its SGDOptions converts from the lr).
  SGD(std::vector<Tensor> params, double lr) : SGD(std::move(params), SGDOptions(lr)) {}

  void step() override;
  double lr() const override { return options_.lr(); }
  void set_lr(double lr) override;
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;
  std::vector<std::string> buffer_names() const override;

 private:
  SGDOptions options_;
};

}  // namespace lockstep::optim
