// tests/support/rnn_batches.h — two batches of truncated BPTT through an nn::LSTM or
// nn::GRU, the run the recurrent-layer tests compare between paths (fused, composed,
// cuDNN) and devices.
// Read before: nn/rnn.h. Used by tests/nn/test_rnn_fused.cpp, tests/cuda/test_cuda_rnn.cpp.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "core/native/native.h"
#include "core/rng.h"
#include "nn/rnn.h"

namespace lockstep::testing {

// The batches x1 and x2 (host tensors) go to `device`; the state after batch 1,
// detached, starts batch 2; each batch has a backward. `seed` is set first, so two
// runs draw the same dropout masks. Returns, on the host: both outputs, the final
// states, both inputs' gradients and every parameter's (summed over both batches).
inline std::vector<Tensor> train_two_batches(nn::LSTM& lstm, const Tensor& x1, const Tensor& x2,
                                             Device device = Device::cpu(), uint64_t seed = 11) {
  lstm.zero_grad();
  manual_seed(seed);
  Tensor a = native::to_device(x1.detach(), device).requires_grad_();
  Tensor b = native::to_device(x2.detach(), device).requires_grad_();
  auto [out1, state1] = lstm.forward(a);
  (out1 * out1).sum().backward();
  const auto carried = std::make_tuple(std::get<0>(state1).detach(), std::get<1>(state1).detach());
  auto [out2, state2] = lstm.forward(b, carried);
  ((out2 * 0.5).sum() + std::get<0>(state2).sum() + (std::get<1>(state2) * 2.0).sum()).backward();
  std::vector<Tensor> values{out1, out2, std::get<0>(state2), std::get<1>(state2), a.grad(), b.grad()};
  for (const auto& p : lstm.parameters()) values.push_back(p.grad());
  for (Tensor& v : values) v = v.defined() ? native::to_device(v, Device::cpu()) : v;
  return values;
}

inline std::vector<Tensor> train_two_batches(nn::GRU& gru, const Tensor& x1, const Tensor& x2,
                                             Device device = Device::cpu(), uint64_t seed = 11) {
  gru.zero_grad();
  manual_seed(seed);
  Tensor a = native::to_device(x1.detach(), device).requires_grad_();
  Tensor b = native::to_device(x2.detach(), device).requires_grad_();
  auto [out1, h1] = gru.forward(a);
  (out1 * out1).sum().backward();
  auto [out2, h2] = gru.forward(b, h1.detach());
  ((out2 * 0.5).sum() + (h2 * 2.0).sum()).backward();
  std::vector<Tensor> values{out1, out2, h2, a.grad(), b.grad()};
  for (const auto& p : gru.parameters()) values.push_back(p.grad());
  for (Tensor& v : values) v = v.defined() ? native::to_device(v, Device::cpu()) : v;
  return values;
}

}  // namespace lockstep::testing
