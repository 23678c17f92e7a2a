// optim/adam.cpp — Adam::step (and AdamW's, which differs in one line): the fused
// native step (CPU or CUDA), and a tensor-op path for the rest.
// Read before: optim/adam.h.
#include "optim/adam.h"

#include <algorithm>
#include <cmath>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/native/optim_step.h"
#include "core/profiler.h"

namespace lockstep::optim {

namespace {

void check_options(const AdamOptions& o, const std::string& name) {
  LS_CHECK(o.lr() >= 0.0, name, ": invalid learning rate ", o.lr(), "; it must be >= 0");
  LS_CHECK(o.eps() >= 0.0, name, ": invalid eps ", o.eps(), "; it must be >= 0");
  LS_CHECK(o.beta1() >= 0.0 && o.beta1() < 1.0, name, ": invalid beta1 ", o.beta1(),
           "; it must be in [0, 1)");
  LS_CHECK(o.beta2() >= 0.0 && o.beta2() < 1.0, name, ": invalid beta2 ", o.beta2(),
           "; it must be in [0, 1)");
  LS_CHECK(o.weight_decay() >= 0.0, name, ": invalid weight_decay ", o.weight_decay(),
           "; it must be >= 0");
}

AdamOptions as_adam_options(const AdamWOptions& w) {
  return AdamOptions(w.lr())
      .betas(w.beta1(), w.beta2())
      .eps(w.eps())
      .weight_decay(w.weight_decay())
      .amsgrad(w.amsgrad());
}

// The scalars of step t, computed in double like PyTorch's Python code.
struct AdamScalars {
  double step_size;  // lr / (1 - beta1^t)
  double bc2_sqrt;   // sqrt(1 - beta2^t)
  double decay;      // AdamW: 1 - lr * wd; Adam: 1
  double l2;         // Adam: wd; AdamW: 0
};

AdamScalars scalars_for(const AdamOptions& o, bool decoupled, int64_t t) {
  const double td = static_cast<double>(t);
  return {o.lr() / (1.0 - std::pow(o.beta1(), td)), std::sqrt(1.0 - std::pow(o.beta2(), td)),
          decoupled ? 1.0 - o.lr() * o.weight_decay() : 1.0, decoupled ? 0.0 : o.weight_decay()};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::move(params), options, /*decoupled=*/false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled, std::string name)
    : Optimizer(std::move(params), std::move(name)), options_(options), decoupled_(decoupled) {
  check_options(options_, name_);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam(std::move(params), as_adam_options(options), /*decoupled=*/true, "AdamW") {}

void Adam::set_lr(double lr) {
  LS_CHECK(lr >= 0.0, name_, ".set_lr: invalid learning rate ", lr, "; it must be >= 0");
  options_.lr(lr);
}

void Adam::step() {
  profiler::Scope prof("optimizer.step");  // core/profiler.h
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = checked_grad(i);
    if (!g.defined()) continue;  // Note [Undefined gradients are skipped]
    Tensor& p = params_[i];
    ParamState& s = state_[i];
    if (s.step == 0) {
      for (const std::string& name : buffer_names()) {
        s.buffers[name] = zeros(p.sizes(), TensorOptions().dtype(p.dtype()).device(p.device()));
      }
    }
    s.step += 1;
    const AdamScalars k = scalars_for(options_, decoupled_, s.step);
    Tensor& m = s.buffers.at("exp_avg");
    Tensor& v = s.buffers.at("exp_avg_sq");
    Tensor* v_max = options_.amsgrad() ? &s.buffers.at("max_exp_avg_sq") : nullptr;

    // One pass over contiguous memory, on the parameter's device (core/native/optim_step.h).
    if (native::fused_step_ok(p) && m.is_contiguous() && v.is_contiguous() &&
        (v_max == nullptr || v_max->is_contiguous())) {
      const Tensor gc = g.contiguous();
      const Tensor vm = v_max ? *v_max : Tensor();
      // The bf16 copy the next forward under autocast reads, written by this same
      // pass (Note [bf16 copies written by the optimizer] in core/autocast.h).
      const Tensor p16 = p.device().is_cpu() && p.dtype() == kFloat32 ? autocast::kept_cast_to_write(p)
                                                                        : Tensor();
      // We write through raw pointers: tell autograd's saved-tensor checks.
      p.impl()->storage->bump_version();
      update_in_chunks(i, p.numel(), [&](int64_t at, int64_t n) {  // Note [Stepping in chunks]
        if (p16.defined()) {
          native::adam_step_bf16_copy_(flat_piece(p, at, n), flat_piece(gc, at, n), flat_piece(m, at, n),
                                       flat_piece(v, at, n), flat_piece(vm, at, n), options_.beta1(),
                                       options_.beta2(), options_.eps(), k.step_size, k.bc2_sqrt, k.decay,
                                       k.l2, flat_piece(p16, at, n));
          return;
        }
        native::adam_step_(flat_piece(p, at, n), flat_piece(gc, at, n), flat_piece(m, at, n), flat_piece(v, at, n),
                           flat_piece(vm, at, n), options_.beta1(), options_.beta2(), options_.eps(), k.step_size,
                           k.bc2_sqrt, k.decay, k.l2);
      });
      if (p16.defined()) autocast::kept_cast_written(p);
      continue;
    }

    // Reference path (non-contiguous parameters, other devices): the same math with tensor ops.
    before_whole(i, p.numel());
    if (k.decay != 1.0) p.mul_(k.decay);
    Tensor grad = k.l2 != 0.0 ? g + k.l2 * p : g;
    m.mul_(options_.beta1()).add_(grad, 1.0 - options_.beta1());
    v.mul_(options_.beta2()).add_(grad * grad, 1.0 - options_.beta2());
    Tensor used = v;
    if (v_max) {
      v_max->copy_(maximum(*v_max, v));
      used = *v_max;
    }
    Tensor denom = (used.sqrt() / k.bc2_sqrt).add_(options_.eps());
    p.add_(m / denom, -k.step_size);
    stepped_whole(i, p.numel());
  }
}

std::vector<std::pair<std::string, double>> Adam::hyperparameters() const {
  return {{"lr", options_.lr()},
          {"beta1", options_.beta1()},
          {"beta2", options_.beta2()},
          {"eps", options_.eps()},
          {"weight_decay", options_.weight_decay()},
          {"amsgrad", options_.amsgrad() ? 1.0 : 0.0}};
}

void Adam::set_hyperparameters(const std::map<std::string, double>& v) {
  AdamOptions o = AdamOptions(v.at("lr"))
                      .betas(v.at("beta1"), v.at("beta2"))
                      .eps(v.at("eps"))
                      .weight_decay(v.at("weight_decay"))
                      .amsgrad(v.at("amsgrad") != 0.0);
  check_options(o, name_);
  options_ = o;
}

std::vector<std::string> Adam::buffer_names() const {
  if (options_.amsgrad()) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

}  // namespace lockstep::optim
