// optim/adam.h — Adam and AdamW: torch.optim.Adam / AdamW (PyTorch 1.13), step for step.
//
//   ls::optim::Adam adam(net->parameters(), ls::optim::AdamOptions(1e-3));
//   ls::optim::AdamW adamw(net->parameters(), ls::optim::AdamWOptions(1e-3).weight_decay(0.01));
//
// Per parameter p with gradient g, at its t-th step (t = 1, 2, ...):
//   Adam:  g = g + weight_decay * p              (L2 penalty folded into the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)       (decoupled weight decay, Loshchilov & Hutter)
//   m = beta1 * m + (1 - beta1) * g              (exp_avg, starts at 0)
//   v = beta2 * v + (1 - beta2) * g * g          (exp_avg_sq, starts at 0)
//   v_max = max(v_max, v), and v_max is used for v below   (amsgrad only)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps    (eps after the bias-corrected sqrt)
//   p = p - lr / (1 - beta1^t) * m / denom
// t counts this parameter's own steps: a parameter skipped for an undefined grad
// (Note [Undefined gradients are skipped] in optim/optimizer.h) does not advance
// its bias correction.
// Read before: optim/optimizer.h, optim/sgd.h. Read next: optim/lr_scheduler.h.
#pragma once

#include <tuple>

#include "optim/optimizer.h"

namespace lockstep::optim {

// Options shared by Adam and AdamW. The setters return the concrete options type
// (AdamOptions& or AdamWOptions&), so chains keep their type; the only
// difference between the two is the default weight decay (0 vs 1e-2), as in PyTorch.
template <class Self>
class AdamOptionsBase {
 public:
  Self& lr(double v) {
    lr_ = v;
    return self();
  }
  Self& betas(double beta1, double beta2) {
    beta1_ = beta1;
    beta2_ = beta2;
    return self();
  }
  // libtorch's spelling: AdamOptions(1e-3).betas({0.9, 0.999}) or betas(std::make_tuple(...)).
  Self& betas(const std::tuple<double, double>& b) { return betas(std::get<0>(b), std::get<1>(b)); }
  Self& eps(double v) {
    eps_ = v;
    return self();
  }
  Self& weight_decay(double v) {
    weight_decay_ = v;
    return self();
  }
  Self& amsgrad(bool v) {
    amsgrad_ = v;
    return self();
  }
  double lr() const { return lr_; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  bool amsgrad() const { return amsgrad_; }

 protected:
  AdamOptionsBase(double lr, double weight_decay) : lr_(lr), weight_decay_(weight_decay) {}

 private:
  Self& self() { return static_cast<Self&>(*this); }
  double lr_;
  double beta1_ = 0.9;
  double beta2_ = 0.999;
  double eps_ = 1e-8;
  double weight_decay_;
  bool amsgrad_ = false;
};

class AdamOptions : public AdamOptionsBase<AdamOptions> {
 public:
  explicit AdamOptions(double lr = 1e-3) : AdamOptionsBase(lr, /*weight_decay=*/0.0) {}
};

class AdamWOptions : public AdamOptionsBase<AdamWOptions> {
 public:
  explicit AdamWOptions(double lr = 1e-3) : AdamOptionsBase(lr, /*weight_decay=*/1e-2) {}
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options);

  void step() override;
  double lr() const override { return options_.lr(); }
  void set_lr(double lr) override;
  const AdamOptions& options() const { return options_; }

 protected:
  // For AdamW: `decoupled` selects p *= (1 - lr * wd) over g += wd * p.
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled, std::string name);

  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;
  std::vector<std::string> buffer_names() const override;

 private:
  AdamOptions options_;
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options);
};

}  // namespace lockstep::optim
