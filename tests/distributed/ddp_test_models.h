// tests/distributed/ddp_test_models.h — small models and data shared by the DDP tests,
// and the local (single-process) reference that DDP must reproduce.
#pragma once

#include <memory>
#include <vector>

#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "nn/nn.h"

namespace lockstep::testing {

// A CNN with BatchNorm: (B, 3, 8, 8) -> (B, 5). conv1 has no bias, as convolutions
// before BatchNorm usually do: BN cancels it, so its true gradient is 0 and Adam
// would turn rounding noise into full-size steps of random sign.
struct TinyCNN : nn::Module {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Linear> fc;
  TinyCNN() {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(4));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(4, 8, 3).stride(2).padding(1)));
    fc = register_module("fc", std::make_shared<nn::Linear>(8 * 4 * 4, 5));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = bn1->forward(conv1->forward(x)).relu();  // (B, 4, 8, 8)
    h = conv2->forward(h).relu();                       // (B, 8, 4, 4)
    return fc->forward(h.flatten(1));                   // (B, 5)
  }
};

// An MLP with an optional branch that forward may skip (unused-parameter tests).
struct BranchyMLP : nn::Module {
  std::shared_ptr<nn::Linear> fc1, side, fc2;
  BranchyMLP() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 8));
    side = register_module("side", std::make_shared<nn::Linear>(8, 8));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 3));
  }
  Tensor forward(const Tensor& x, bool use_side) {
    Tensor h = fc1->forward(x).relu();
    if (use_side) h = h + side->forward(h).tanh();
    return fc2->forward(h);
  }
};

// The whole dataset for `world` ranks of `per_rank` examples, same on every rank.
inline std::pair<Tensor, Tensor> image_data(int64_t total, uint64_t seed) {
  manual_seed(seed);
  return {randn({total, 3, 8, 8}), randint(0, 5, {total})};
}

inline std::vector<Tensor> clone_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

inline double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto va = a[i].to_vector<double>(), vb = b[i].to_vector<double>();
    for (size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]));
  }
  return worst;
}

}  // namespace lockstep::testing
