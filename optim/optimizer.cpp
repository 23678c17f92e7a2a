// optim/optimizer.cpp — parameter checks, zero_grad, and the state dict round trip.
// Read before: optim/optimizer.h.
#include "optim/optimizer.h"

#include <algorithm>

#include <charconv>
#include <unordered_set>

#include "core/factory.h"
#include "core/grad_mode.h"

namespace lockstep::optim {

Optimizer::Optimizer(std::vector<Tensor> params, std::string name)
    : params_(std::move(params)), name_(std::move(name)) {
  LS_CHECK(!params_.empty(), name_,
           ": got an empty parameter list; pass module->parameters() "
           "of a module that has parameters");
  std::unordered_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    LS_CHECK(p.defined(), name_, ": parameter ", i, " is an undefined tensor");
    LS_CHECK(p.is_floating_point(), name_, ": parameter ", i, " has dtype ", p.dtype(),
             "; only floating point tensors can be optimized");
    LS_CHECK(p.is_leaf(), name_, ": parameter ", i, " of shape ", p.shape_str(),
             " is not a leaf (it was produced by an op); optimize the leaf it came from, or "
             "pass t.detach().requires_grad_()");
    LS_CHECK(seen.insert(p.impl()).second, name_, ": parameter ", i, " of shape ", p.shape_str(),
             " appears more than once in the parameter list; it would be stepped twice");
  }
  state_.resize(params_.size());
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.mutable_grad() = Tensor();
    } else {
      p.mutable_grad().zero_();
    }
  }
}

int64_t Optimizer::step_count(size_t i) const {
  LS_CHECK(i < state_.size(), name_, ".step_count: parameter index ", i, " is out of range for ",
           state_.size(), " parameters");
  return state_[i].step;
}

void Optimizer::step_subset(const std::vector<bool>& mask) {
  LS_CHECK(mask.size() == params_.size(), name_, ".step_subset: the mask has ", mask.size(),
           " entries but the optimizer has ", params_.size(), " parameters");
  LS_CHECK(step_mask_ == nullptr, name_, ".step_subset: called from inside a step");
  step_mask_ = &mask;
  try {
    step();
  } catch (...) {
    step_mask_ = nullptr;
    throw;
  }
  step_mask_ = nullptr;
}

void Optimizer::set_step_chunks(int64_t numel, StepChunkFn fn, StepChunkFn before) {
  LS_CHECK(numel >= 0, name_, ".set_step_chunks: the piece size must be >= 0, got ", numel);
  chunk_numel_ = fn ? numel : 0;
  chunk_fn_ = std::move(fn);
  before_chunk_fn_ = std::move(before);
}

void Optimizer::update_in_chunks(size_t i, int64_t numel, const std::function<void(int64_t, int64_t)>& update) {
  const int64_t piece = chunk_numel_ / 64 * 64;  // Note [Stepping in chunks]
  if (piece <= 0 || numel <= piece) {
    before_whole(i, numel);
    update(0, numel);
    stepped_whole(i, numel);
    return;
  }
  for (int64_t offset = 0; offset < numel; offset += piece) {
    const int64_t length = std::min(piece, numel - offset);
    if (before_chunk_fn_) before_chunk_fn_(i, offset, length);
    update(offset, length);
    chunk_fn_(i, offset, length);
  }
}

void Optimizer::stepped_whole(size_t i, int64_t numel) const {
  if (chunk_fn_) chunk_fn_(i, 0, numel);
}

void Optimizer::before_whole(size_t i, int64_t numel) const {
  if (before_chunk_fn_) before_chunk_fn_(i, 0, numel);
}

Tensor flat_piece(const Tensor& t, int64_t offset, int64_t length) {
  if (!t.defined() || (offset == 0 && length == t.numel())) return t;
  return t.view({-1}).narrow(0, offset, length);
}

Tensor Optimizer::checked_grad(size_t i) const {
  const Tensor& p = params_[i];
  const Tensor& g = p.grad();
  if (step_mask_ != nullptr && !(*step_mask_)[i]) return Tensor();  // Note [Stepping a subset]
  // Note [Undefined gradients are skipped]; a frozen parameter is skipped the same way.
  if (!g.defined() || !p.requires_grad()) return Tensor();
  LS_CHECK(g.sizes() == p.sizes(), name_, ".step: parameter ", i, " has shape ", p.shape_str(),
           " but its grad has shape ", g.shape_str());
  LS_CHECK(g.dtype() == p.dtype(), name_, ".step: parameter ", i, " has dtype ", p.dtype(),
           " but its grad has dtype ", g.dtype());
  LS_CHECK(g.device() == p.device(), name_, ".step: parameter ", i, " is on ", p.device(),
           " but its grad is on ", g.device());
  return g;
}

// ---- state dict (Note [Optimizer state dict]) ----

namespace {
const std::string kGroups = "param_groups.";
const std::string kState = "state.";
const std::string kNumParams = "param_groups.num_params";
const std::string kInitialLr = "param_groups.initial_lr";

double scalar_of(const OptimizerState& state, const std::string& key, const std::string& op) {
  auto it = state.find(key);
  LS_CHECK(it != state.end(), op, ": the state dict has no key '", key,
           "'; was it saved by a different optimizer type?");
  LS_CHECK(it->second.defined() && it->second.numel() == 1, op, ": '", key,
           "' must hold one number but has shape ",
           it->second.defined() ? it->second.shape_str() : "(undefined)");
  return it->second.item<double>();
}
}  // namespace

bool parse_state_key(const std::string& key, size_t& index, std::string& name) {
  if (key.rfind(kState, 0) != 0) return false;
  const size_t dot = key.find('.', kState.size());
  if (dot == std::string::npos || dot == kState.size() || dot + 1 == key.size()) return false;
  const char* first = key.data() + kState.size();
  const char* last = key.data() + dot;
  auto [ptr, ec] = std::from_chars(first, last, index);
  if (ec != std::errc() || ptr != last) return false;
  name = key.substr(dot + 1);
  return true;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  for (const auto& [name, value] : hyperparameters()) {
    out[kGroups + name] = scalar_tensor(value, TensorOptions().dtype(kFloat64));
  }
  out[kNumParams] =
      scalar_tensor(static_cast<double>(params_.size()), TensorOptions().dtype(kInt64));
  if (initial_lr_) out[kInitialLr] = scalar_tensor(*initial_lr_, TensorOptions().dtype(kFloat64));
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.step == 0) continue;
    const std::string prefix = kState + std::to_string(i) + ".";
    out[prefix + "step"] =
        scalar_tensor(static_cast<double>(s.step), TensorOptions().dtype(kInt64));
    // Detached handles sharing the optimizer's buffers, like Module::state_dict:
    // save them or clone them before stepping again.
    for (const auto& [name, buffer] : s.buffers) out[prefix + name] = buffer.detach();
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  const std::string op = name_ + ".load_state_dict";
  NoGradGuard no_grad;

  // 1. Hyper-parameters and the parameter count.
  std::map<std::string, double> values;
  for (const auto& [name, current] : hyperparameters()) {
    values[name] = scalar_of(state, kGroups + name, op);
  }
  const double count = scalar_of(state, kNumParams, op);
  std::optional<double> loaded_initial_lr;
  if (state.count(kInitialLr)) loaded_initial_lr = scalar_of(state, kInitialLr, op);
  LS_CHECK(count == static_cast<double>(params_.size()), op, ": '", kNumParams,
           "' says the state was saved for ", count, " parameters but this optimizer has ",
           params_.size());

  // Apply them tentatively: which buffers a parameter must have depends on them
  // (SGD keeps a momentum buffer only when momentum != 0). Restored on failure.
  std::map<std::string, double> previous;
  for (const auto& [name, value] : hyperparameters()) previous[name] = value;
  set_hyperparameters(values);
  try {
    // 2. Check every key and collect the per-parameter state.
    const std::vector<std::string> wanted = buffer_names();
    std::vector<ParamState> loaded(params_.size());
    std::vector<bool> present(params_.size(), false);
    for (const auto& [key, value] : state) {
      if (key.rfind(kGroups, 0) == 0) {
        LS_CHECK(key == kNumParams || key == kInitialLr || values.count(key.substr(kGroups.size())), op,
                 ": unexpected key '", key, "'; ", name_, " has no such hyper-parameter");
        continue;
      }
      size_t i = 0;
      std::string name;
      LS_CHECK(parse_state_key(key, i, name), op, ": unexpected key '", key,
               "'; expected 'param_groups.<name>' or 'state.<index>.<name>'");
      LS_CHECK(i < params_.size(), op, ": key '", key, "' names parameter ", i,
               " but there are only ", params_.size(), " parameters");
      LS_CHECK(value.defined(), op, ": key '", key, "' holds an undefined tensor");
      present[i] = true;
      if (name == "step") {
        LS_CHECK(value.numel() == 1, op, ": '", key, "' must hold one number but has shape ",
                 value.shape_str());
        const double step = value.item<double>();
        LS_CHECK(step >= 1 && step == static_cast<double>(static_cast<int64_t>(step)), op, ": '",
                 key, "' must be a positive whole number but is ", step);
        loaded[i].step = static_cast<int64_t>(step);
        continue;
      }
      bool known = false;
      for (const std::string& w : wanted) known = known || w == name;
      LS_CHECK(known, op, ": unexpected key '", key, "'; with these hyper-parameters ", name_,
               " keeps no '", name, "' buffer");
      const Tensor& p = params_[i];
      LS_CHECK(value.sizes() == p.sizes(), op, ": '", key, "' has shape ", value.shape_str(),
               " but parameter ", i, " has shape ", p.shape_str());
      LS_CHECK(value.is_floating_point(), op, ": '", key, "' has dtype ", value.dtype(),
               "; optimizer buffers are floating point");
      // A private, contiguous copy in the parameter's dtype and on its device.
      loaded[i].buffers[name] = value.detach().to(p.dtype()).to(p.device()).clone();
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!present[i]) continue;
      const std::string prefix = kState + std::to_string(i) + ".";
      LS_CHECK(loaded[i].step > 0, op, ": missing key '", prefix, "step'");
      for (const std::string& w : wanted) {
        LS_CHECK(loaded[i].buffers.count(w), op, ": missing key '", prefix, w, "'");
      }
    }
    // 3. Everything checked: commit.
    state_ = std::move(loaded);
    if (loaded_initial_lr) initial_lr_ = loaded_initial_lr;
  } catch (...) {
    set_hyperparameters(previous);
    throw;
  }
}

}  // namespace lockstep::optim
