// optim/lr_scheduler.h — learning-rate schedules: StepLR, CosineAnnealingLR,
// LinearWarmup and WarmupCosine (BERT's warmup then cosine decay).
//
// A scheduler follows PyTorch's protocol. Construction records the optimizer's
// current lr as base_lr and sets the lr for epoch 0; each step() advances the
// epoch (or iteration: a "step" is whatever unit you call it at) and sets the
// optimizer's lr from a CLOSED FORM lr(epoch), so the schedule never drifts:
//   for (epoch...) { for (batch...) { ...; opt.step(); }  sched.step(); }
//   StepLR:            lr(t) = base_lr * gamma^floor(t / step_size)
//   CosineAnnealingLR: lr(t) = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2
//   LinearWarmup:      lr(t) = base_lr * min(1, t / warmup_steps)
//   WarmupCosine:      lr(t) = base_lr * t / warmup_steps                           t < warmup
//                      lr(t) = min_lr + (base_lr - min_lr) * (1 + cos(pi * s)) / 2  after, with
//                              s = min(1, (t - warmup_steps) / (total_steps - warmup_steps))
// The first two are torch.optim.lr_scheduler's closed forms; the warmups equal
// LambdaLR with those factors (HuggingFace's constant/cosine schedules with
// warmup), so the first warmup step runs at lr 0 as there.
// The scheduler keeps a reference to the optimizer, which must outlive it.
//
// § Note [Resuming a schedule]
// As in PyTorch, the schedule's base_lr is the optimizer's initial_lr: the
// first scheduler built on an optimizer records the optimizer's lr there
// (Optimizer::set_initial_lr), and the optimizer's state dict saves it. So a
// scheduler built after optimizer.load_state_dict() starts from the saved
// initial_lr, not from the already-decayed lr the optimizer holds. The epoch
// comes from the scheduler's own state dict:
//   save:   opt.state_dict(), sched.state_dict(), ls::get_rng_state()
//   resume: build model, opt and sched as before; opt.load_state_dict(o);
//           sched.load_state_dict(s); ls::set_rng_state(r);
// after which the run continues exactly as the uninterrupted one (lr and random
// stream; tests/optim/test_resume_schedule.cpp). A scheduler built with
// last_epoch >= 0 (PyTorch's argument) needs initial_lr already set and
// continues from that epoch: its first lr is lr_at(last_epoch + 1).
// load_state_dict restores last_epoch, base_lr and the schedule's own
// hyper-parameters (step_size, gamma, ...) and sets the optimizer's lr to the
// restored last lr; keys are checked first, and a missing or unexpected one is
// an ls::Error naming it.
// Read before: optim/optimizer.h. Read next: optim/clip_grad.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace lockstep::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (or iteration) and sets the optimizer's lr for it.
  void step();
  // The lr the scheduler last set (PyTorch's get_last_lr, for our single group).
  double get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  double base_lr() const { return base_lr_; }
  // The schedule itself: the lr at `epoch` (epoch >= 0).
  virtual double lr_at(int64_t epoch) const = 0;
  virtual std::string name() const = 0;  // "StepLR", ...: prefixes error messages

  // Note [Resuming a schedule]: "last_epoch" (0-d int64), "base_lr", "last_lr"
  // and the schedule's hyper-parameters (0-d float64), in the optimizer state's format.
  OptimizerState state_dict() const;
  void load_state_dict(const OptimizerState& state);

 protected:
  // last_epoch = -1: a fresh schedule; >= 0: resume after that epoch (needs the
  // optimizer's initial_lr, Note [Resuming a schedule]).
  LRScheduler(Optimizer& optimizer, int64_t last_epoch);
  // Derived constructors call this last: sets the first epoch's lr (lr_at is
  // virtual, so the base constructor cannot).
  void start();
  // The schedule's own hyper-parameters by name, for the state dict.
  virtual std::vector<std::pair<std::string, double>> hyperparameters() const = 0;
  // Sets them from a loaded state (every name present); throws if invalid.
  virtual void set_hyperparameters(const std::map<std::string, double>& values) = 0;

  Optimizer& optimizer_;
  double base_lr_;

 private:
  int64_t last_epoch_;
  double last_lr_;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;
  std::string name() const override { return "StepLR"; }

 protected:
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0,
                    int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;

 private:
  int64_t t_max_;
  double eta_min_;
};

class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;
  std::string name() const override { return "LinearWarmup"; }

 protected:
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;

 private:
  int64_t warmup_steps_;
};

class WarmupCosine : public LRScheduler {
 public:
  WarmupCosine(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
               double min_lr = 0.0, int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;
  std::string name() const override { return "WarmupCosine"; }

 protected:
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;

 private:
  int64_t warmup_steps_;
  int64_t total_steps_;
  double min_lr_;
};

}  // namespace lockstep::optim
