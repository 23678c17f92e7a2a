// optim/lr_scheduler.cpp — the closed forms of optim/lr_scheduler.h.
// Read before: optim/lr_scheduler.h.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace lockstep::optim {

LRScheduler::LRScheduler(Optimizer& optimizer)
    : optimizer_(optimizer), base_lr_(optimizer.lr()), last_lr_(optimizer.lr()) {}

void LRScheduler::start() { step(); }

void LRScheduler::step() {
  ++last_epoch_;
  last_lr_ = lr_at(last_epoch_);
  optimizer_.set_lr(last_lr_);
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  LS_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  start();
}

double StepLR::lr_at(int64_t epoch) const {
  return base_lr_ * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  LS_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  start();
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double progress = static_cast<double>(epoch) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr_ - eta_min_) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps) {
  LS_CHECK(warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got ", warmup_steps);
  start();
}

double LinearWarmup::lr_at(int64_t epoch) const {
  if (epoch >= warmup_steps_) return base_lr_;
  return base_lr_ * static_cast<double>(epoch) / static_cast<double>(warmup_steps_);
}

WarmupCosine::WarmupCosine(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                           double min_lr)
    : LRScheduler(optimizer),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      min_lr_(min_lr) {
  LS_CHECK(warmup_steps >= 0 && total_steps > warmup_steps,
           "WarmupCosine: need 0 <= "
           "warmup_steps < total_steps, got warmup_steps ",
           warmup_steps, " and total_steps ", total_steps);
  start();
}

double WarmupCosine::lr_at(int64_t epoch) const {
  if (epoch < warmup_steps_) {
    return base_lr_ * static_cast<double>(epoch) / static_cast<double>(warmup_steps_);
  }
  const double progress = std::min(1.0, static_cast<double>(epoch - warmup_steps_) /
                                            static_cast<double>(total_steps_ - warmup_steps_));
  return min_lr_ + (base_lr_ - min_lr_) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
}

}  // namespace lockstep::optim
