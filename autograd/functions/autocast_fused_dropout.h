// autograd/functions/autocast_fused_dropout.h — a transformer layer's dropouts fused into
// their neighbours' passes under bf16 autocast on the CPU: the feed-forward's dropout
// into the linear + GELU node, a post-norm layer's residual dropout + add into its
// LayerNorm. nn::TransformerEncoderLayer asks the fuses_* functions and calls these;
// each fused path has a switch that restores the ops apart, and a test against them
// (tests/autograd/test_bf16_fused_dropout.cpp, tests/nn/test_transformer_bf16_fused.cpp).
//
// Read before: autograd/functions/autocast_ops.h (Note [linear + GELU in one node],
// Note [dropout + residual add in one pass]), core/native/fused_dropout.h.
// Read next: autograd/functions/dropout_add_norm.cpp, nn/transformer.cpp.
#pragma once

#include "core/tensor.h"

namespace lockstep::autograd {

// § Note [linear + GELU + dropout in one node]
// The feed-forward's dropout follows the GELU: dropout(gelu(x W^T + b)). Under bf16
// autocast on the CPU, in training, TransformerEncoderLayer records all three as the
// node of Note [linear + GELU in one node]: the pass that writes gelu(u) writes the
// dropped values instead, and backward's pass that forms dL/du applies the mask
// first. The mask is not stored: the node keeps the dropout's key and asks it again
// (Note [dropout masks kept as keys] in core/native/fused_dropout.cpp). Values and
// gradients are those of linear, gelu, dropout bit for bit (the same key, the same
// roundings; tests/autograd/test_bf16_fused_dropout.cpp). BERT-base: the dropout's
// rows moved ~28 MB per layer and step (its bf16 input read and output written
// forward, the gradient read and written and the mask read backward).
// LOCKSTEP_BF16_GELU_DROPOUT=0 keeps the dropout apart (A/B runs).
Tensor linear_gelu_dropout_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                    double p);  // training, 0 < p <= 1
// Whether dropout(gelu(linear(input, weight, bias)), p, training) should take
// linear_gelu_dropout_autocast: fuses_linear_gelu, training and 0 < p <= 1.
bool fuses_linear_gelu_dropout(const Tensor& input, const Tensor& weight, const Tensor& bias,
                               double p, bool training);

// § Note [dropout + residual add + LayerNorm in one pass]
// In a post-norm layer (BERT) each residual sum is normalised at once:
// layer_norm(x + dropout(y)). As dropout_add then layer_norm, h = x + dropout(y) is
// written by one op and read again by the next, and backward's dL/dh is written by
// LayerNormBackward and read again by DropoutAddBackward. Under autocast on the CPU
// TransformerEncoderLayer calls dropout_add_layer_norm instead
// (autograd/functions/dropout_add_norm.cpp): one pass over the rows forms each row of h,
// writes it (backward needs it) and normalises it while it is in cache; backward forms
// each row of dL/dh with LayerNormBackward's arithmetic and writes dL/dy from it in the
// same pass. The dropout keeps its key, not a mask (Note [dropout masks kept as keys] in
// core/native/fused_dropout.cpp). Output and the four gradients are those of the two
// ops bit for bit (tests/autograd/test_bf16_fused_dropout.cpp). BERT-base: ~7 MB per
// residual and step, 24 residuals. The same pass writes the output's bf16 copy, which
// the next linear takes instead of converting the output (Note [bf16 copies written by
// the op that made the activation] in core/autocast_offer.h): ~3 MB more per residual.
// LOCKSTEP_BF16_DROPOUT_ADD_NORM=0 keeps dropout_add and layer_norm apart,
// LOCKSTEP_BF16_NORM_WRITES_CAST=0 leaves the conversion to the linear (A/B runs).
Tensor dropout_add_layer_norm(const Tensor& x, const Tensor& y, double p,
                              const IntList& normalized_shape, const Tensor& weight,
                              const Tensor& bias, double eps);  // training, 0 < p <= 1
// Whether layer_norm(x + dropout(y, p, training), weight, bias) should take
// dropout_add_layer_norm: fuses_dropout_add, and weight and bias float32 CPU tensors
// (or undefined).
bool fuses_dropout_add_layer_norm(const Tensor& x, const Tensor& y, double p, bool training,
                                  const Tensor& weight, const Tensor& bias);

}  // namespace lockstep::autograd
