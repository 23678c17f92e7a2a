// optim/lr_scheduler.cpp — the closed forms of optim/lr_scheduler.h.
// Read before: optim/lr_scheduler.h.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/factory.h"

namespace lockstep::optim {

// Note [Resuming a schedule]: base_lr is the optimizer's initial_lr, recorded by
// the first scheduler (PyTorch's group.setdefault('initial_lr', lr)).
LRScheduler::LRScheduler(Optimizer& optimizer, int64_t last_epoch)
    : optimizer_(optimizer), base_lr_(optimizer.lr()), last_epoch_(last_epoch),
      last_lr_(optimizer.lr()) {
  LS_CHECK(last_epoch >= -1, "LRScheduler: last_epoch must be -1 (a fresh schedule) or the epoch "
           "to resume after, got ", last_epoch);
  LS_CHECK(last_epoch == -1 || optimizer.initial_lr().has_value(),
           "LRScheduler: resuming at last_epoch = ", last_epoch, " needs the optimizer's "
           "initial_lr; load the optimizer's state dict (saved after a scheduler was built) first, "
           "or call optimizer.set_initial_lr(lr)");
  if (!optimizer.initial_lr()) optimizer.set_initial_lr(optimizer.lr());
  base_lr_ = *optimizer.initial_lr();
}

void LRScheduler::start() { step(); }

namespace {
double one_number(const OptimizerState& state, const std::string& key, const std::string& op) {
  auto it = state.find(key);
  LS_CHECK(it != state.end(), op, ": the state dict has no key '", key,
           "'; was it saved by a different scheduler type?");
  LS_CHECK(it->second.defined() && it->second.numel() == 1, op, ": '", key,
           "' must hold one number");
  return it->second.item<double>();
}
}  // namespace

OptimizerState LRScheduler::state_dict() const {
  OptimizerState out;
  out["last_epoch"] = scalar_tensor(static_cast<double>(last_epoch_), TensorOptions().dtype(kInt64));
  out["base_lr"] = scalar_tensor(base_lr_, TensorOptions().dtype(kFloat64));
  out["last_lr"] = scalar_tensor(last_lr_, TensorOptions().dtype(kFloat64));
  for (const auto& [key, value] : hyperparameters()) {
    out[key] = scalar_tensor(value, TensorOptions().dtype(kFloat64));
  }
  return out;
}

void LRScheduler::load_state_dict(const OptimizerState& state) {
  const std::string op = name() + ".load_state_dict";
  const double epoch = one_number(state, "last_epoch", op);
  LS_CHECK(epoch >= 0 && epoch == static_cast<double>(static_cast<int64_t>(epoch)), op,
           ": 'last_epoch' must be a whole number >= 0 but is ", epoch);
  const double base = one_number(state, "base_lr", op);
  const double last = one_number(state, "last_lr", op);
  std::map<std::string, double> values;
  for (const auto& [key, current] : hyperparameters()) values[key] = one_number(state, key, op);
  for (const auto& [key, value] : state) {
    LS_CHECK(key == "last_epoch" || key == "base_lr" || key == "last_lr" || values.count(key), op,
             ": unexpected key '", key, "'; was it saved by a different scheduler type?");
  }
  set_hyperparameters(values);  // checks them; throws before anything else changes
  last_epoch_ = static_cast<int64_t>(epoch);
  base_lr_ = base;
  last_lr_ = last;
  optimizer_.set_initial_lr(base);
  optimizer_.set_lr(last);
}

void LRScheduler::step() {
  ++last_epoch_;
  last_lr_ = lr_at(last_epoch_);
  optimizer_.set_lr(last_lr_);
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch), step_size_(step_size), gamma_(gamma) {
  LS_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  start();
}

double StepLR::lr_at(int64_t epoch) const {
  return base_lr_ * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

std::vector<std::pair<std::string, double>> StepLR::hyperparameters() const {
  return {{"step_size", static_cast<double>(step_size_)}, {"gamma", gamma_}};
}

void StepLR::set_hyperparameters(const std::map<std::string, double>& values) {
  const double step_size = values.at("step_size");
  LS_CHECK(step_size >= 1, "StepLR.load_state_dict: step_size must be positive, got ", step_size);
  step_size_ = static_cast<int64_t>(step_size);
  gamma_ = values.at("gamma");
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min,
                                     int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch), t_max_(T_max), eta_min_(eta_min) {
  LS_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  start();
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double progress = static_cast<double>(epoch) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr_ - eta_min_) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
}

std::vector<std::pair<std::string, double>> CosineAnnealingLR::hyperparameters() const {
  return {{"T_max", static_cast<double>(t_max_)}, {"eta_min", eta_min_}};
}

void CosineAnnealingLR::set_hyperparameters(const std::map<std::string, double>& values) {
  const double t_max = values.at("T_max");
  LS_CHECK(t_max >= 1, "CosineAnnealingLR.load_state_dict: T_max must be positive, got ", t_max);
  t_max_ = static_cast<int64_t>(t_max);
  eta_min_ = values.at("eta_min");
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch), warmup_steps_(warmup_steps) {
  LS_CHECK(warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got ", warmup_steps);
  start();
}

double LinearWarmup::lr_at(int64_t epoch) const {
  if (epoch >= warmup_steps_) return base_lr_;
  return base_lr_ * static_cast<double>(epoch) / static_cast<double>(warmup_steps_);
}

std::vector<std::pair<std::string, double>> LinearWarmup::hyperparameters() const {
  return {{"warmup_steps", static_cast<double>(warmup_steps_)}};
}

void LinearWarmup::set_hyperparameters(const std::map<std::string, double>& values) {
  const double w = values.at("warmup_steps");
  LS_CHECK(w >= 0, "LinearWarmup.load_state_dict: warmup_steps must be >= 0, got ", w);
  warmup_steps_ = static_cast<int64_t>(w);
}

WarmupCosine::WarmupCosine(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                           double min_lr, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch),
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

std::vector<std::pair<std::string, double>> WarmupCosine::hyperparameters() const {
  return {{"warmup_steps", static_cast<double>(warmup_steps_)},
          {"total_steps", static_cast<double>(total_steps_)},
          {"min_lr", min_lr_}};
}

void WarmupCosine::set_hyperparameters(const std::map<std::string, double>& values) {
  const double w = values.at("warmup_steps"), t = values.at("total_steps");
  LS_CHECK(w >= 0 && t > w, "WarmupCosine.load_state_dict: need 0 <= warmup_steps < total_steps, got ",
           w, " and ", t);
  warmup_steps_ = static_cast<int64_t>(w);
  total_steps_ = static_cast<int64_t>(t);
  min_lr_ = values.at("min_lr");
}

}  // namespace lockstep::optim
