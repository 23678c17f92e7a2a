// optim/sgd.cpp — SGD::step: the fused native step (CPU or CUDA), tensor ops for the rest.
// Read before: optim/sgd.h.
#include "optim/sgd.h"

#include "core/autocast.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/native/optim_step.h"
#include "core/profiler.h"

namespace lockstep::optim {

namespace {

void check_options(const SGDOptions& o) {
  LS_CHECK(o.lr() >= 0.0, "SGD: invalid learning rate ", o.lr(), "; it must be >= 0");
  LS_CHECK(o.momentum() >= 0.0, "SGD: invalid momentum ", o.momentum(), "; it must be >= 0");
  LS_CHECK(o.weight_decay() >= 0.0, "SGD: invalid weight_decay ", o.weight_decay(),
           "; it must be >= 0");
  LS_CHECK(!o.nesterov() || (o.momentum() > 0.0 && o.dampening() == 0.0),
           "SGD: Nesterov momentum requires momentum > 0 and dampening == 0, got momentum ",
           o.momentum(), " and dampening ", o.dampening());
}

// The parameter's momentum buffer, made on its first use (written, not read, on
// the first step, so it is left uninitialised).
Tensor momentum_buffer(std::map<std::string, Tensor>& buffers, const Tensor& p) {
  Tensor& slot = buffers["momentum_buffer"];
  if (!slot.defined()) slot = empty_like(p);
  return slot;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer(std::move(params), "SGD"), options_(options) {
  check_options(options_);
}

void SGD::set_lr(double lr) {
  LS_CHECK(lr >= 0.0, "SGD.set_lr: invalid learning rate ", lr, "; it must be >= 0");
  options_.lr(lr);
}

void SGD::step() {
  profiler::Scope prof("optimizer.step");  // core/profiler.h
  NoGradGuard no_grad;
  const bool use_momentum = options_.momentum() != 0.0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = checked_grad(i);
    if (!g.defined()) continue;  // Note [Undefined gradients are skipped]
    Tensor& p = params_[i];
    ParamState& s = state_[i];
    const bool first = s.step == 0 || !s.buffers.count("momentum_buffer");
    s.step += 1;

    // One pass over contiguous memory, on the parameter's device (core/native/optim_step.h).
    if (native::fused_step_ok(p)) {
      const Tensor buf = use_momentum ? momentum_buffer(s.buffers, p) : Tensor();
      const Tensor gc = g.contiguous();
      // The bf16 copy the next forward under autocast reads, written by this same
      // pass (Note [bf16 copies written by the optimizer] in core/autocast.h).
      const Tensor p16 = p.device().is_cpu() && p.dtype() == kFloat32 ? autocast::kept_cast_to_write(p)
                                                                        : Tensor();
      // We write through raw pointers: tell autograd's saved-tensor checks.
      p.impl()->storage->bump_version();
      update_in_chunks(i, p.numel(), [&](int64_t at, int64_t n) {  // Note [Stepping in chunks]
        native::sgd_step_(flat_piece(p, at, n), flat_piece(gc, at, n), flat_piece(buf, at, n), options_.lr(),
                          options_.momentum(), options_.dampening(), options_.weight_decay(), options_.nesterov(),
                          first, flat_piece(p16, at, n));
      });
      if (p16.defined()) autocast::kept_cast_written(p);
      continue;
    }

    // Reference path (non-contiguous parameters, other devices): the same math with tensor ops.
    before_whole(i, p.numel());
    Tensor d = options_.weight_decay() != 0.0 ? g + options_.weight_decay() * p : g;
    if (use_momentum) {
      Tensor& buf = s.buffers["momentum_buffer"];
      if (first) {
        buf = d.clone();
      } else {
        buf.mul_(options_.momentum()).add_(d, 1.0 - options_.dampening());
      }
      d = options_.nesterov() ? d + options_.momentum() * buf : buf;
    }
    p.add_(d, -options_.lr());
    stepped_whole(i, p.numel());
  }
}

std::vector<std::pair<std::string, double>> SGD::hyperparameters() const {
  return {{"lr", options_.lr()},
          {"momentum", options_.momentum()},
          {"dampening", options_.dampening()},
          {"nesterov", options_.nesterov() ? 1.0 : 0.0},
          {"weight_decay", options_.weight_decay()}};
}

void SGD::set_hyperparameters(const std::map<std::string, double>& v) {
  SGDOptions o = SGDOptions(v.at("lr"))
                     .momentum(v.at("momentum"))
                     .dampening(v.at("dampening"))
                     .nesterov(v.at("nesterov") != 0.0)
                     .weight_decay(v.at("weight_decay"));
  check_options(o);
  options_ = o;
}

std::vector<std::string> SGD::buffer_names() const {
  if (options_.momentum() == 0.0) return {};
  return {"momentum_buffer"};
}

}  // namespace lockstep::optim
