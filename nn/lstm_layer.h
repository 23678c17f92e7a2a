// nn/lstm_layer.h — one LSTM layer (one direction) over a whole sequence as one op
// with one autograd node: the fast path of nn::LSTM on the CPU.
//
// § Note [Fused LSTM layer]
// The composed layer (nn/rnn.cpp's reference path: linear, unbind, then per step a
// linear and about ten elementwise ops, each its own node) spends its time in
// small ops and their nodes, and its backward computes the weight gradient of
// W_hh as T products with k = B (one per step's LinearBackward). The fused layer,
// like PyTorch's CPU kernel (oneDNN's RNN primitive), does
//   forward:  gates = x W_ih^T                          one GEMM, (T*B, 4H)
//             per step t: gates[t] += h W_hh^T           one GEMM, (B, 4H) (Note [The
//                         recurrent weight transposed once] in nn/rnn_layer_common.h)
//                         + (b_ih + b_hh), the gate arithmetic   one pass (nn/lstm_pointwise.h)
//   backward: per step t, last to first:
//                         dgates[t] from dh, dc           one pass
//                         dh_prev = dgates[t] W_hh        one GEMM, (B, H)
//             then dx = dgates W_ih, dW_ih = dgates^T x, dW_hh = dgates^T h_prev,
//             db_ih = db_hh = column sums of dgates      three GEMMs with k = T*B
// It keeps the gates' activations, the cell states and tanh of them (T, B, 4H +
// 2H) for backward. It runs for float32 and float64 on the CPU without autocast;
// anything else (CUDA, bf16 autocast: Note [Recurrent layers under autocast])
// takes the composed path, which ls::nn::set_lstm_fused(false) also forces
// (tests compare the two), as does LOCKSTEP_LSTM_FUSED=0 for a whole run
// (benchmarks). In a backward with create_graph its node re-runs the composed
// layer (nn/rnn_composed.h) instead of its own loops, so its gradients can be
// differentiated again (Note [Double backward by recomputation] in
// autograd/recompute_backward.h). nn/gru_layer.h does the same for the GRU (Note
// [Fused GRU layer]); what both share is in nn/rnn_layer_common.h.
//
// Read before: nn/rnn_cell.h, nn/lstm_pointwise.h. Read next: nn/gru_layer.h, nn/rnn.h.
#pragma once

#include <tuple>

#include "nn/rnn_cell.h"

namespace lockstep::nn {

// Whether nn::LSTM may use the fused layer (default true); process-wide.
void set_lstm_fused(bool enabled);
bool lstm_fused_enabled();

// Whether lstm_layer_fused can run these operands (see Note [Fused LSTM layer]).
bool lstm_layer_fusable(const Tensor& x, const Tensor& h0, const Tensor& c0, const RNNWeights& w);

// x (T, B, I), h0 and c0 (B, H), the layer's weights (biases may be undefined);
// reverse runs t = T-1 down to 0. Returns (output (T, B, H), h_n (B, H), c_n (B, H)).
std::tuple<Tensor, Tensor, Tensor> lstm_layer_fused(const Tensor& x, const Tensor& h0, const Tensor& c0,
                                                    const RNNWeights& w, bool reverse);

}  // namespace lockstep::nn
