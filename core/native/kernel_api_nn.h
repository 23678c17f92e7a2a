// core/native/kernel_api_nn.h — the neural-network ops both backends implement,
// declared once (Note [Kernel API declared once] in kernel_api.h): convolution,
// pooling, batch norm (and its fused ReLU), linear, layer norm, embedding,
// dropout, the losses and the fused optimizer steps.
//
// Included inside namespace lockstep::native by core/native/nn_kernels.h and
// inside namespace lockstep::cuda_native by core/cuda/cuda_native_nn.h, so it
// has no include guard and includes nothing itself. Images are (N, C, H, W);
// inputs may have any strides (they are made contiguous), results are new
// contiguous tensors in the input's dtype (float32 or float64 on the CPU) unless
// a contract says otherwise. Each backward takes `need_*` flags so a gradient
// nobody wants is not computed; the tuple slot of a skipped gradient holds an
// undefined Tensor. Where each runs: the CPU files named per section, and on
// CUDA the files listed in core/cuda/cuda_native_nn.h.
//
// Read before: core/native/kernel_api.h. Read next: core/native/nn_kernels.h.

// ---- convolution (conv.cpp; Note [Convolution backends] in fast/conv_onednn.h) ----
// input (N, C_in, H, W), weight (C_out, C_in / groups, kH, kW), bias (C_out) or
// undefined -> (N, C_out, H', W') with H' = (H + 2 pad_h - dil_h (kH - 1) - 1) / stride_h + 1.
Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const IntList& stride, const IntList& padding, const IntList& dilation,
                      int64_t groups);
// (grad_input, grad_weight, grad_bias) from grad_output (N, C_out, H', W').
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, const IntList& stride,
                                                   const IntList& padding, const IntList& dilation,
                                                   int64_t groups, bool need_input,
                                                   bool need_weight, bool need_bias);

// ---- pooling (pool.cpp, pool_avg.cpp) ----
// (N, C, H, W) -> (output (N, C, H', W'), indices int64 (N, C, H', W')), where
// H' = (H + 2 pad_h - kH) / stride_h + 1 and indices[n, c, i, j] is the flat
// position h * W + w of the maximum inside its (H, W) plane, as in PyTorch.
// An empty stride means stride = kernel_size. Padding counts as -inf and must be
// at most half the kernel; NaN wins (it propagates, as in PyTorch).
std::tuple<Tensor, Tensor> max_pool2d_forward(const Tensor& input, const IntList& kernel_size,
                                              const IntList& stride, const IntList& padding);
// Routes each grad_output element to its input position: (N, C, H, W) = input_sizes.
// `tile` = max_pool2d_tile(...) of the forward's window, or empty: when the
// windows tile the input, a channels-last bf16 gradient is written element by
// element instead of scattered (Note [Channel-vector max-pool in AVX-512]); an
// index outside its tile is then an error. (CUDA scatters in every case; it ignores tile.)
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const IntList& input_sizes, const IntList& tile = {});
// (N, C, H, W) -> (N, C, oh, ow); output window i covers rows
// [floor(i H / oh), ceil((i + 1) H / oh)), likewise for columns.
Tensor adaptive_avg_pool2d_forward(const Tensor& input, const IntList& output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const IntList& input_sizes);

// ---- batch normalisation (batch_norm.cpp, batch_norm_backward.cpp) ----
// input (N, C, *) normalised per channel over N and the trailing dims:
//   y = (x - mean_c) * invstd_c * weight_c + bias_c,   invstd_c = 1 / sqrt(var_c + eps).
// Training: mean/var are the batch statistics (biased var); running_mean and
// running_var, when defined, become (1 - momentum) * running + momentum * batch
// (the batch var unbiased, N / (N - 1), as PyTorch), written in place.
// Eval: mean/var are running_mean/running_var, which must be defined.
// Returns (output, save_mean (C), save_invstd (C)): the statistics used, which
// the backward takes. weight/bias (C) may be undefined (1 and 0).
std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& input, const Tensor& weight,
                                                      const Tensor& bias,
                                                      const Tensor& running_mean,
                                                      const Tensor& running_var, bool training,
                                                      double momentum, double eps);
// (grad_input, grad_weight, grad_bias). In training mode grad_input includes the
// path through the batch statistics; in eval mode the statistics are constants.
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, bool training, bool need_input, bool need_weight, bool need_bias);

// ---- batch norm + ReLU fused (batch_norm.cpp; core/native/fused_relu.h) ----
// relu(batch_norm_forward(...)'s output), in one pass; returns (output,
// save_mean, save_invstd) like batch_norm_forward, with the same checks and
// the same in-place running-statistic update.
std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_forward(const Tensor& input,
                                                           const Tensor& weight, const Tensor& bias,
                                                           const Tensor& running_mean,
                                                           const Tensor& running_var, bool training,
                                                           double momentum, double eps);

// batch_norm_backward of grad_output * (output > 0), where output is what
// batch_norm_relu_forward returned (same shape and dtype as input).
std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& output, bool training, bool need_input,
    bool need_weight, bool need_bias);

// ---- add + ReLU fused (add_relu.cpp) ----
// max(a + b, 0) for a and b of the same shape and floating dtype (any strides) ->
// a new contiguous tensor. Its backward is add_relu_backward for both inputs.
Tensor add_relu(const Tensor& a, const Tensor& b);

// ---- linear (linear.cpp) ----
// (*, in) x weight (out, in) [+ bias (out)] -> (*, out). bias may be undefined.
Tensor linear_forward(const Tensor& input, const Tensor& weight, const Tensor& bias);
// Gradients of linear_forward for grad_output (*, out): (grad_input (*, in),
// grad_weight (out, in), grad_bias (out)); each is computed only when its
// `need_*` flag is set (undefined otherwise).
std::tuple<Tensor, Tensor, Tensor> linear_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, bool need_input,
                                                   bool need_weight, bool need_bias);

// ---- layer_norm (layer_norm.cpp) ----
// input (*, normalized_shape...) -> (output (same shape), mean (M), rstd (M)), where
// the M = numel / D rows are the leading elements and D = prod(normalized_shape);
// rstd = 1 / sqrt(var + eps) with the biased variance. weight/bias have
// normalized_shape, or are undefined.
std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& input,
                                                      const IntList& normalized_shape,
                                                      const Tensor& weight, const Tensor& bias,
                                                      double eps);
// (grad_input, grad_weight, grad_bias) from the forward's mean and rstd; grad_weight
// and grad_bias only when requested and the affine parameters exist.
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output,
                                                       const Tensor& input,
                                                       const IntList& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight, bool need_input,
                                                       bool need_weight, bool need_bias);

// ---- embedding (embedding.cpp) ----
// Rows of weight (num, dim) at int64/int32 indices of any shape -> (*indices, dim).
// Every index must be in [0, num); padding_idx is -1 (none) or in [0, num).
Tensor embedding_forward(const Tensor& weight, const Tensor& indices, int64_t padding_idx);
// grad_output (*indices, dim) summed into a zero (num_weights, dim) table at the
// indices; the padding_idx row stays zero.
Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx);

// ---- dropout (dropout.cpp) ----
// Training dropout: (output, mask) with mask a bool tensor of input's shape (true =
// kept, drawn with probability 1 - p from the default generator) and output =
// input * mask / (1 - p). p must be in [0, 1]; p == 1 zeroes everything.
std::tuple<Tensor, Tensor> dropout_forward(const Tensor& input, double p);
// grad_output * mask / (1 - p) (zeros when p == 1).
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p);

// ---- losses (loss.cpp) ----
// Mean cross-entropy of logits (N, C) against int64 targets (N): (loss (0-d),
// log_probs (N, C)). Rows whose target is ignore_index count neither in the sum nor
// in the mean; when every row is ignored the loss is NaN (0 / 0, as PyTorch 1.13).
std::tuple<Tensor, Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                 int64_t ignore_index);
// dL/dlogits (N, C) = (softmax - onehot(target)) * grad / count, zero rows where
// the target is ignored; grad is the loss's 0-d gradient.
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& log_probs, const Tensor& target,
                              int64_t ignore_index);
// The same for bf16 logits read in place under autocast (CPU): (loss (0-d) float32,
// shift (N, 2) float32: each row's maximum and log-sum-exp); the backward recomputes
// the log-probabilities from the logits and shift and returns dL/dlogits in bf16, the
// values of the float32 kernels on the widened logits, rounded once (Note [float32
// ops reading bfloat16 in place] in autograd/functions/autocast_ops.h).
std::tuple<Tensor, Tensor> cross_entropy_bf16_forward(const Tensor& logits, const Tensor& target,
                                                      int64_t ignore_index);
Tensor cross_entropy_bf16_backward(const Tensor& grad, const Tensor& logits, const Tensor& shift,
                                   const Tensor& target, int64_t ignore_index);
// mean((input - target)^2) over all elements (0-d); shapes and dtypes must match.
Tensor mse_loss_forward(const Tensor& input, const Tensor& target);
// dL/dinput = 2 (input - target) * grad / numel (dL/dtarget is its negation).
Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target);

// ---- fused optimizer steps (optim_step.cpp; core/native/optim_step.h) ----
// Adam / AdamW (optim/adam.h) with step t's scalars computed in double by the caller:
// step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t), decay (AdamW: 1 - lr wd,
// else 1), l2 (Adam: wd, else 0). p *= decay; grad = g + l2 p; m = b1 m + (1 - b1) grad;
// v = b2 v + (1 - b2) grad^2; v_max = max(v_max, v) when amsgrad (v_max defined; it then
// stands for v below); p -= step_size m / (sqrt(v) / bc2_sqrt + eps).
void adam_step_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                const Tensor& v_max, double beta1, double beta2, double eps, double step_size,
                double bc2_sqrt, double decay, double l2);

// sum |g|^norm_type (max |g| when norm_type is infinite) over a float32/float64 tensor, in
// double. On the CPU, blocks of kOptimGrain elements are summed separately and combined in
// block order, so the result does not depend on the thread count.
double grad_norm_part(const Tensor& g, double norm_type);
