// optim/optimizer.h — Optimizer: the base of SGD, Adam and AdamW.
//
// An optimizer holds handles to the parameters it updates (the same TensorImpls
// the module holds, so an update is visible to the module at once), a little
// state per parameter (momentum buffers, Adam's moments, a step count) and its
// hyper-parameters. Each step() reads p.grad() and writes p in place, under
// NoGradGuard, so the update is not recorded by autograd.
//
// § Note [Undefined gradients are skipped]
// A parameter whose grad() is undefined did not take part in this iteration's
// loss (e.g. an unused branch). step() SKIPS it: its weight, momentum buffer and
// step count stay exactly as they were. Treating the missing gradient as zero
// would be wrong: momentum would keep moving the weight, and Adam's bias
// correction would advance. DDP relies on this rule: a parameter unused on every
// rank keeps an undefined grad after the AllReduce (see docs/design.md, "DDP in pieces"),
// so every replica skips it identically and the replicas stay in lockstep.
// zero_grad() therefore sets grads to undefined by default (set_to_none), as
// PyTorch 2 does.
// A parameter that does not require grad (a frozen layer) is accepted and skipped
// the same way, even if it still holds a grad from before it was frozen, so
// SGD(net->parameters(), ...) works for a partly frozen model as in PyTorch; it
// starts taking steps again once requires_grad_(true) gives it gradients.
//
// § Note [Optimizer state dict]
// state_dict() flattens everything an optimizer needs to resume into one
// OptimizerState: a map from dotted names to tensors, the same shape as a
// module's state dict, so one safetensors writer saves both.
//   "param_groups.lr", "param_groups.momentum", ...  0-d float64 hyper-parameters
//   "param_groups.num_params"                          0-d int64, the parameter count
//   "state.3.step"                                     0-d int64, steps taken by param 3
//   "state.3.momentum_buffer", "state.3.exp_avg", ...  per-parameter buffers, param's shape
// Parameters are named by their index in the list given to the constructor
// (as in PyTorch); a parameter that has never been stepped has no "state.i.*".
// load_state_dict() checks everything before changing anything and throws an
// ls::Error naming the offending key. "param_groups.initial_lr" (0-d float64)
// is there once a scheduler has recorded the lr its schedule starts from
// (Note [Resuming a schedule] in optim/lr_scheduler.h); a state without it
// loads and leaves initial_lr unset. Both are virtual: a wrapper with its own
// layout (distributed/zero/zero_redundancy_optimizer.h) replaces them.
//
// § Note [Stepping a subset]
// step_subset(mask) runs step() as if only the parameters with mask[i] set had
// a gradient: the others are skipped exactly like an undefined grad (their
// weights, buffers and step counts do not move). ZeRO's overlap with DDP steps
// each bucket's parameters as soon as that bucket is reduced, one subset at a
// time; per-parameter optimizers (SGD, Adam, AdamW) give bitwise the same
// result as one step() over all of them.
//
//
// § Note [Stepping in chunks]
// set_step_chunks(numel, fn) makes a fused (contiguous, float) update of a
// parameter of more than `numel` elements run over consecutive pieces of
// `numel` elements (rounded down to a multiple of 64; the last piece shorter),
// calling fn(index, offset, length) after each piece; every other update calls
// fn(index, 0, numel) once after it. ZeRO broadcasts each piece of a large
// parameter as soon as it is updated, while the next piece is computed (Note
// [ZeRO pipelined broadcasts]). The updates are element-wise, and pieces start
// at multiples of 64 elements, so the result is bitwise that of one pass.
// An optional second callback, before(index, offset, length), runs before
// each piece (or a whole update) reads the gradient: ZeRO waits there for
// that piece of the gradient to arrive (Note [Handing a bucket over in
// pieces], distributed/zero/bucket_handover_pieces.cpp). The gradient must then be
// contiguous (a non-contiguous one is copied before any piece is read).
// Read before: nn/module.h, core/grad_mode.h.
// Read next: optim/sgd.h, optim/adam.h, optim/lr_scheduler.h.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace lockstep::optim {

// See Note [Optimizer state dict].
using OptimizerState = std::map<std::string, Tensor>;
// Parses "state.<i>.<name>" into (i, name); false if the key is not of that form.
bool parse_state_key(const std::string& key, size_t& index, std::string& name);

class Optimizer {
 public:
  // `name` ("SGD", "Adam", ...) prefixes error messages.
  Optimizer(std::vector<Tensor> params, std::string name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter whose grad is defined (Note [Undefined gradients are skipped]).
  virtual void step() = 0;
  // step() over the parameters i with mask[i] only (Note [Stepping a subset]).
  void step_subset(const std::vector<bool>& mask);
  // Clears gradients: undefined (set_to_none, the default) or filled with zeros.
  void zero_grad(bool set_to_none = true);
  // Note [Stepping in chunks]. numel 0 or an empty fn: off (the default).
  using StepChunkFn = std::function<void(size_t index, int64_t offset, int64_t length)>;
  void set_step_chunks(int64_t numel, StepChunkFn fn, StepChunkFn before = nullptr);

  // The learning rate; schedulers (optim/lr_scheduler.h) call set_lr before each step.
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;

  // The lr a schedule starts from, recorded by the first scheduler built on this
  // optimizer and saved in the state dict (PyTorch's param_groups[0]["initial_lr"]).
  std::optional<double> initial_lr() const { return initial_lr_; }
  void set_initial_lr(double lr) { initial_lr_ = lr; }

  const std::vector<Tensor>& parameters() const { return params_; }
  // libtorch's param_groups(): one group here, so the lr is set directly (docs/api.md
  // "Coming from libtorch" says why). The assert fires only when this is called.
  template <class T = void>
  void param_groups() const {
    static_assert(sizeof(T*) == 0, "lockstep: optimizers have one parameter group: use opt.set_lr(x) / opt.lr()");
  }
  const std::string& name() const { return name_; }
  // Steps taken by parameter i (0 if it never had a gradient at a step).
  int64_t step_count(size_t i) const;

  virtual OptimizerState state_dict() const;
  virtual void load_state_dict(const OptimizerState& state);

 protected:
  // What an optimizer keeps per parameter. `step` counts the steps that updated
  // this parameter; step == 0 means "no state yet" (buffers are empty).
  struct ParamState {
    int64_t step = 0;
    std::map<std::string, Tensor> buffers;  // "momentum_buffer", "exp_avg", ...
  };

  // Hyper-parameters by name, for the state dict ("lr", "momentum", ...).
  virtual std::vector<std::pair<std::string, double>> hyperparameters() const = 0;
  // Sets every hyper-parameter from `values` (all names of hyperparameters()
  // are present); throws if the combination is invalid.
  virtual void set_hyperparameters(const std::map<std::string, double>& values) = 0;
  // Names of the per-parameter buffers a stepped parameter has under the current
  // hyper-parameters (e.g. SGD without momentum has none).
  virtual std::vector<std::string> buffer_names() const = 0;

  // The gradient of parameter i, checked against the parameter (shape, dtype,
  // device); undefined if the parameter must be skipped this step.
  Tensor checked_grad(size_t i) const;
  // Note [Stepping in chunks]: runs update(offset, length) over parameter i's
  // pieces (one call covering all `numel` elements when chunking is off or the
  // parameter is small), the observer after each; `stepped_whole` reports an
  // update done in one pass by other means (the reference paths).
  void update_in_chunks(size_t i, int64_t numel, const std::function<void(int64_t, int64_t)>& update);
  void stepped_whole(size_t i, int64_t numel) const;
  // The reference paths call this before they read parameter i's gradient.
  void before_whole(size_t i, int64_t numel) const;

  std::vector<Tensor> params_;
  std::vector<ParamState> state_;  // one per parameter, same order
  std::string name_;
  std::optional<double> initial_lr_;
  const std::vector<bool>* step_mask_ = nullptr;  // set during step_subset
  int64_t chunk_numel_ = 0;                        // Note [Stepping in chunks]
  StepChunkFn chunk_fn_;
  StepChunkFn before_chunk_fn_;
};

// The elements [offset, offset + length) of contiguous `t`, flat (t itself when that is all of it).
Tensor flat_piece(const Tensor& t, int64_t offset, int64_t length);

}  // namespace lockstep::optim
