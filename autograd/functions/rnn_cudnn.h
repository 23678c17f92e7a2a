// autograd/functions/rnn_cudnn.h — one LSTM or GRU layer (both directions at once) on
// a GPU as one cuDNN call with one autograd node: nn::LSTM's and nn::GRU's CUDA path.
//
// § Note [cuDNN RNN layer]
// On the CPU a recurrent layer runs fused (Note [Fused LSTM layer]); on a GPU the
// composed path would launch about a dozen kernels a time step. cuDNN's RNN API
// (cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8) runs a
// layer's whole sequence, and with CUDNN_BIDIRECTIONAL both directions, in a few
// calls. Per layer of nn::LSTM / nn::GRU, so the dropout between layers stays
// lockstep's own (the same mask stream as on the CPU) and each layer's weights stay
// the module's parameters:
//   forward:  the layer's D parameter sets are copied into cuDNN's weight space
//             (one flat buffer; cudnnGetRNNWeightParams says where each gate's
//             matrix and bias go), then one cudnnRNNForward in training mode
//             writes y (T, B, D*H), h_n (D, B, H) [, c_n] and the reserve space
//             (the activations backward needs), which the node keeps.
//   backward: cudnnRNNBackwardData_v8 (dx, dh0 [, dc0]) then
//             cudnnRNNBackwardWeights_v8 (into a zeroed weight-gradient space),
//             whose pieces are copied out as the parameters' gradients.
// The parameters keep PyTorch's layout, which is cuDNN's: W_ih (G*H, I) holds the G
// gates' (H, I) matrices stacked in cuDNN's gate order (LSTM i, f, g, o; GRU r, z,
// n), each matrix row-major, and b_ih / b_hh are cuDNN's two bias vectors
// (CUDNN_RNN_DOUBLE_BIAS; a layer without bias uses CUDNN_RNN_NO_BIAS). cuDNN's GRU
// is PyTorch's: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)).
// It runs for float32 (FMA math: no TF32, so results match the CPU to float32
// rounding) and float64, outside autocast (Note [Recurrent layers under autocast]:
// under autocast the composed path runs), and is on by default;
// set_cudnn_rnn(false) or LOCKSTEP_CUDNN_RNN=0 forces the composed path (tests
// compare the two). Under create_graph its node re-runs the composed layer that nn
// hands it (Note [Double backward by recomputation]), so it can be differentiated twice.
//
// Read before: nn/lstm_layer.h, core/cuda_hooks.h.
// Read next: autograd/functions/rnn_cudnn_cuda.cpp (the cuDNN calls), nn/rnn.cpp.
#pragma once

#include <tuple>
#include <vector>

#include "autograd/recompute_backward.h"
#include "core/tensor.h"

namespace lockstep::autograd {

enum class RnnCell { kLSTM, kGRU };

// One layer's parameters for one direction (biases both defined or both not).
struct RnnLayerParams {
  Tensor w_ih, w_hh, b_ih, b_hh;
};

// The CUDA library's half (Note [CUDA hooks]); registered by rnn_cudnn_cuda.cpp.
struct RnnCudaHooks {
  // See cudnn_rnn_layer.
  std::tuple<Tensor, Tensor, Tensor> (*layer)(RnnCell cell, const Tensor& x, const Tensor& h0,
                                              const Tensor& c0, const std::vector<RnnLayerParams>& params,
                                              const ReferenceFunction& reference) = nullptr;
};

// Whether nn::LSTM / nn::GRU may use cuDNN on a GPU (default true; LOCKSTEP_CUDNN_RNN=0
// starts with false); process-wide.
void set_cudnn_rnn(bool enabled);
bool cudnn_rnn_enabled();

// Whether cudnn_rnn_layer can run these operands: enabled, autocast off, x and every
// defined tensor float32 or float64 of one dtype on one CUDA device, and every
// direction with both biases or neither.
bool cudnn_rnn_usable(const Tensor& x, const Tensor& h0, const Tensor& c0,
                      const std::vector<RnnLayerParams>& params);

// x (T, B, I); h0 (D, B, H); c0 (D, B, H) for the LSTM, undefined for the GRU; params
// one entry per direction (D = 1 or 2; entry 1 runs t = T-1 down to 0). Returns
// (output (T, B, D*H), h_n (D, B, H), c_n (D, B, H) or undefined for the GRU).
// `reference` computes the same outputs from the node's inputs (x, h0[, c0], then per
// direction w_ih, w_hh[, b_ih, b_hh]) with recording ops; the node re-runs it to be
// differentiated twice (Note [Double backward by recomputation]).
std::tuple<Tensor, Tensor, Tensor> cudnn_rnn_layer(RnnCell cell, const Tensor& x, const Tensor& h0,
                                                   const Tensor& c0, const std::vector<RnnLayerParams>& params,
                                                   const ReferenceFunction& reference);

}  // namespace lockstep::autograd
