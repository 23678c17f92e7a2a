// autograd/functions/rnn_cudnn.cpp — the CPU library's half of Note [cuDNN RNN layer]:
// the switch, the check of the operands, and the call through the hooks table.
// Read before: autograd/functions/rnn_cudnn.h.
#include "autograd/functions/rnn_cudnn.h"

#include <atomic>
#include <initializer_list>

#include "core/autocast.h"
#include "core/cuda_hooks.h"
#include "core/env_flag.h"

namespace lockstep::autograd {
namespace {

std::atomic<bool> g_enabled{env_flag("LOCKSTEP_CUDNN_RNN", true)};

// t undefined, or of dtype dt on `device`.
bool same_place(const Tensor& t, ScalarType dt, Device device) {
  return !t.defined() || (t.dtype() == dt && t.device() == device);
}

}  // namespace

void set_cudnn_rnn(bool enabled) { g_enabled.store(enabled); }
bool cudnn_rnn_enabled() { return g_enabled.load(); }

bool cudnn_rnn_usable(const Tensor& x, const Tensor& h0, const Tensor& c0,
                      const std::vector<RnnLayerParams>& params) {
  if (!cudnn_rnn_enabled() || is_autocast_enabled() || !x.defined() || !x.device().is_cuda()) return false;
  if (params.empty() || params.size() > 2) return false;
  const ScalarType dt = x.dtype();
  if (dt != kFloat32 && dt != kFloat64) return false;
  const Device device = x.device();
  if (!h0.defined() || !same_place(h0, dt, device) || !same_place(c0, dt, device)) return false;
  for (const RnnLayerParams& p : params) {
    if (!p.w_ih.defined() || !p.w_hh.defined() || p.b_ih.defined() != p.b_hh.defined()) return false;
    for (const Tensor& t : {p.w_ih, p.w_hh, p.b_ih, p.b_hh}) {
      if (!same_place(t, dt, device)) return false;
    }
  }
  return lockstep::detail::cuda_hooks_or_null<RnnCudaHooks>() != nullptr;
}

std::tuple<Tensor, Tensor, Tensor> cudnn_rnn_layer(RnnCell cell, const Tensor& x, const Tensor& h0,
                                                   const Tensor& c0, const std::vector<RnnLayerParams>& params,
                                                   const ReferenceFunction& reference) {
  LS_CHECK(cudnn_rnn_usable(x, h0, c0, params), "cudnn_rnn_layer: expected float32 or float64 tensors "
           "of one dtype on one CUDA device, outside autocast, 1 or 2 directions with both biases or "
           "neither (check cudnn_rnn_usable first; nn::LSTM and nn::GRU take the composed path otherwise)");
  return lockstep::detail::cuda_hooks<RnnCudaHooks>("an LSTM or GRU layer on a GPU")
      .layer(cell, x, h0, c0, params, reference);
}

}  // namespace lockstep::autograd
