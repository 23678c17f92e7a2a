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
// Read before: optim/optimizer.h. Read next: optim/clip_grad.h.
#pragma once

#include <cstdint>

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

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Derived constructors call this last: sets epoch 0's lr (lr_at is virtual,
  // so the base constructor cannot).
  void start();

  Optimizer& optimizer_;
  double base_lr_;

 private:
  int64_t last_epoch_ = -1;
  double last_lr_;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t warmup_steps_;
};

class WarmupCosine : public LRScheduler {
 public:
  WarmupCosine(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
               double min_lr = 0.0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t warmup_steps_;
  int64_t total_steps_;
  double min_lr_;
};

}  // namespace lockstep::optim
