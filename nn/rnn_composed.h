// nn/rnn_composed.h — one LSTM or GRU layer (one direction) built from recording ops:
// the reference that the fused CPU layers and cuDNN are tested against, the path
// nn::LSTM / nn::GRU take where no fused one applies (bf16 autocast; a switch), and
// what the fused layers re-run to differentiate twice (Note [Double backward by
// recomputation] in autograd/recompute_backward.h).
//
// Each computes x W_ih^T + b_ih for all T steps in one GEMM, splits it into steps
// with unbind (one backward node, autograd/functions/unbind.h), then runs the T
// dependent steps, each one GEMM h W_hh^T + b_hh and the gate arithmetic of
// nn/rnn_cell.h; under autocast the products are bf16 and each step's gates are
// taken back to the parameters' dtype (Note [Recurrent layers under autocast]).
//
// Read before: nn/rnn_cell.h. Read next: nn/lstm_layer.h, nn/rnn.h.
#pragma once

#include <tuple>

#include "nn/rnn_cell.h"

namespace lockstep::nn {

// x (T, B, I), h0 and c0 (B, H); reverse runs t = T-1 down to 0.
// Returns (output (T, B, H), h_n (B, H), c_n (B, H)).
std::tuple<Tensor, Tensor, Tensor> lstm_layer_composed(const Tensor& x, const Tensor& h0, const Tensor& c0,
                                                       const RNNWeights& w, bool reverse);

// x (T, B, I), h0 (B, H). Returns (output (T, B, H), h_n (B, H)).
std::tuple<Tensor, Tensor> gru_layer_composed(const Tensor& x, const Tensor& h0, const RNNWeights& w,
                                              bool reverse);

}  // namespace lockstep::nn
