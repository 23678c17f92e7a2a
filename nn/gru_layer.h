// nn/gru_layer.h — one GRU layer (one direction) over a whole sequence as one op
// with one autograd node: the fast path of nn::GRU on the CPU.
//
// § Note [Fused GRU layer]
// The GRU counterpart of Note [Fused LSTM layer] (same reasons, same limits).
// The composed layer runs per step a linear and about ten elementwise ops, one
// node each; the fused layer, with gx = x W_ih^T and gh = h W_hh^T, does
//   forward:  gx = x W_ih^T                               one GEMM, (T*B, 3H)
//             per step t: gh = h W_hh^T                   one GEMM, (B, 3H)
//                         the biases and the gate arithmetic   one pass (nn/gru_pointwise.h)
//   backward: per step t, last to first:
//                         dgx[t], dgh[t] from dh           one pass
//                         dh_prev = dh z + dgh[t] W_hh     one GEMM, (B, H)
//             then dx = dgx W_ih, dW_ih = dgx^T x, dW_hh = dgh^T h_prev    three GEMMs, k = T*B
//             db_ih, db_hh = the column sums of dgx, dgh
// Unlike the LSTM's, a step's two products cannot be summed into one gates
// buffer: n = tanh(gx_n + b_in + r * (gh_n + b_hn)) scales the recurrent part of
// n alone, so gh is its own (B, 3H) buffer, and dgx and dgh differ in their n
// columns (da_n against r * da_n). It keeps r, z, n and gh_n + b_hn (T, B, 3H + H)
// for backward. It runs for float32 and float64 on the CPU without autocast;
// anything else (CUDA, bf16 autocast: Note [Recurrent layers under autocast])
// takes the composed path, which ls::nn::set_gru_fused(false) also forces (tests
// compare the two), as does LOCKSTEP_GRU_FUSED=0 for a whole run (benchmarks). Its
// node is differentiated twice by re-running the composed layer (Note [Double backward
// by recomputation] in autograd/recompute_backward.h).
//
// Read before: nn/rnn_cell.h, nn/gru_pointwise.h, nn/lstm_layer.h. Read next: nn/rnn.h.
#pragma once

#include <tuple>

#include "nn/rnn_cell.h"

namespace lockstep::nn {

// Whether nn::GRU may use the fused layer (default true); process-wide.
void set_gru_fused(bool enabled);
bool gru_fused_enabled();

// Whether gru_layer_fused can run these operands (see Note [Fused GRU layer]).
bool gru_layer_fusable(const Tensor& x, const Tensor& h0, const RNNWeights& w);

// x (T, B, I), h0 (B, H), the layer's weights (biases may be undefined);
// reverse runs t = T-1 down to 0. Returns (output (T, B, H), h_n (B, H)).
std::tuple<Tensor, Tensor> gru_layer_fused(const Tensor& x, const Tensor& h0, const RNNWeights& w,
                                           bool reverse);

}  // namespace lockstep::nn
