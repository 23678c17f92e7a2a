// nn/gru_pointwise.h — the gate arithmetic of one GRU time step, forward and
// backward, each as one pass over the batch: the kernels of the fused layer in
// nn/gru_layer.cpp.
//
// Forward, per row b and unit j (gates in PyTorch's order r, z, n), given the
// input part gx = x W_ih^T and the recurrent part gh = h W_hh^T, both (B, 3H)
// without their biases:
//   r = sigmoid(gx_r + b_ir + gh_r + b_hr),   z = sigmoid(gx_z + b_iz + gh_z + b_hz)
//   hn = gh_n + b_hn,   n = tanh(gx_n + b_in + r * hn)
//   h' = (1 - z) * n + z * h   (computed as n + z * (h - n), as nn/rnn_cell.cpp)
// b_hn sits inside r * (...), so n's recurrent part hn is kept apart from its
// input part. The activations r, z, n overwrite gx (backward needs them), and
// hn is kept too. Backward, given dh' (the gradient of h'):
//   da_n = dh' (1 - z) (1 - n^2)             the gradient of gx_n (and of b_in)
//   da_z = dh' (h - n) z (1 - z),   da_r = da_n hn r (1 - r)
//   dgx = [da_r, da_z, da_n],  dgh = [da_r, da_z, da_n * r]   (the two products' gradients)
//   dh  = dh' z                               (plus dgh W_hh, the step's GEMM)
// The activations are the LSTM cell's (Note [Fast sigmoid and tanh in the LSTM cell]).
//
// Read before: nn/rnn_cell.h, nn/lstm_pointwise.h. Read next: nn/gru_layer.h.
#pragma once

#include <cstdint>

#include "nn/lstm_pointwise.h"

namespace lockstep::nn::detail {

// One step forward for B rows of H units. gx (B, 3H): the input part in,
// r, z, n out; gh (B, 3H): the recurrent part; bias (3H): b_ih + b_hh for r and
// z, then b_in; b_hn (H); h_prev (B, H); hn (B, H) and h (B, H) written.
template <class T>
void gru_pointwise_forward(int64_t B, int64_t H, T* gx, const T* gh, const T* bias, const T* b_hn,
                           const T* h_prev, T* hn, T* h) {
  for (int64_t b = 0; b < B; ++b) {
    T* a = gx + b * 3 * H;
    const T *g = gh + b * 3 * H, *hp = h_prev + b * H;
    T *hnr = hn + b * H, *hr = h + b * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const T r = lstm_sigmoid(a[j] + g[j] + bias[j]);
      const T z = lstm_sigmoid(a[H + j] + g[H + j] + bias[H + j]);
      const T hnv = g[2 * H + j] + b_hn[j];
      const T n = lstm_tanh(a[2 * H + j] + bias[2 * H + j] + r * hnv);
      a[j] = r, a[H + j] = z, a[2 * H + j] = n;
      hnr[j] = hnv, hr[j] = n + z * (hp[j] - n);
    }
  }
}

// One step backward. act (B, 3H): r, z, n as the forward kept them; hn, h_prev
// (B, H) as in the forward; dh (B, H): the gradient of h'; dgx, dgh (B, 3H):
// the gradients of the input and recurrent parts; dh_prev (B, H): dh' z, to
// which the caller adds dgh W_hh.
template <class T>
void gru_pointwise_backward(int64_t B, int64_t H, const T* act, const T* hn, const T* h_prev, const T* dh,
                            T* dgx, T* dgh, T* dh_prev) {
  for (int64_t b = 0; b < B; ++b) {
    const T* a = act + b * 3 * H;
    T *dx = dgx + b * 3 * H, *dr = dgh + b * 3 * H, *dp = dh_prev + b * H;
    const T *hnr = hn + b * H, *hp = h_prev + b * H, *dhr = dh + b * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const T r = a[j], z = a[H + j], n = a[2 * H + j], d = dhr[j];
      const T da_n = d * (T(1) - z) * (T(1) - n * n);
      const T da_z = d * (hp[j] - n) * z * (T(1) - z);
      const T da_r = da_n * hnr[j] * r * (T(1) - r);
      dx[j] = da_r, dx[H + j] = da_z, dx[2 * H + j] = da_n;
      dr[j] = da_r, dr[H + j] = da_z, dr[2 * H + j] = da_n * r;
      dp[j] = d * z;
    }
  }
}

}  // namespace lockstep::nn::detail
