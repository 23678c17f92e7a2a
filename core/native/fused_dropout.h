// core/native/fused_dropout.h — the CPU kernels that run a dropout inside the pass of
// its neighbour op (core/native/fused_dropout.cpp): a post-norm transformer's residual
// add + LayerNorm, and its feed-forward's GELU. Like the kernels of
// core/native/nn_kernels_transformer.h they are pure functions of tensors; the
// differentiable ops that call them are in autograd/functions/autocast_fused_dropout.h.
//
// Read before: core/native/nn_kernels_transformer.h, core/native/dropout_key.h.
// Read next: core/native/fused_dropout.cpp.
#pragma once

#include <tuple>

#include "core/native/dropout_key.h"
#include "core/tensor.h"

namespace lockstep::native {

// out = layer_norm(h) with h = x + dropout(y) (dropout_add_forward's h, bit for bit)
// in one pass over the rows: h is written for backward beside out, and the mask is the
// key (Note [dropout + residual add + LayerNorm in one pass] in
// autograd/functions/autocast_fused_dropout.h). x float32, y bfloat16 of x's shape,
// weight and bias float32 (either may be undefined). With write_bf16 the pass also
// writes out rounded to bf16 (Note [bf16 copies written by the op that made the
// activation] in core/autocast_offer.h).
struct DropoutAddNorm {
  Tensor out, h;      // (*, D) float32
  Tensor out16;       // (*, D) bfloat16, out rounded: with write_bf16
  Tensor mean, rstd;  // (M) float32, layer_norm_forward's
  DropoutKey key;
};
DropoutAddNorm dropout_add_layer_norm_forward(const Tensor& x, const Tensor& y, double p,
                                              const IntList& normalized_shape,
                                              const Tensor& weight, const Tensor& bias,
                                              double eps, bool write_bf16);
// (dL/dx, dL/dy, dL/dweight, dL/dbias): layer_norm_backward's dx (float32), which is
// dL/dx, and dropout_add_backward of it (bf16), in one pass over the rows.
std::tuple<Tensor, Tensor, Tensor, Tensor> dropout_add_layer_norm_backward(
    const Tensor& grad, const Tensor& h, const IntList& normalized_shape, const Tensor& mean,
    const Tensor& rstd, const Tensor& weight, const DropoutKey& key, bool need_x, bool need_y,
    bool need_weight, bool need_bias);

// dropout(gelu(u)) for a bfloat16 u: gelu's bf16 values dropped with the mask of `key`,
// in one pass; backward takes dL/dout and returns dL/du (bf16) as dropout_backward then
// gelu_backward would (Note [linear + GELU + dropout in one node] in
// autograd/functions/autocast_fused_dropout.h).
Tensor gelu_dropout_forward(const Tensor& u, const DropoutKey& key);
Tensor gelu_dropout_backward(const Tensor& grad, const Tensor& u, const DropoutKey& key);

}  // namespace lockstep::native
