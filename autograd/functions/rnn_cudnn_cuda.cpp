// autograd/functions/rnn_cudnn_cuda.cpp — Note [cuDNN RNN layer]'s GPU half, part of
// lockstep's CUDA library: the RNN descriptors, the weight space, the forward call
// and the backward node (CudnnRnnBackward), registered as RnnCudaHooks.
//
//   forward   y (T, B, D*H), h_n (D, B, H)[, c_n]   = cudnnRNNForward(x (T, B, I), h0[, c0], W)
//   backward  dx, dh0[, dc0]                         = cudnnRNNBackwardData_v8(y, dy, dh_n[, dc_n])
//             dW (the weight space's gradient)       = cudnnRNNBackwardWeights_v8(x, h0, y)
// where W is one flat buffer of D x (W_ih, W_hh[, b_ih, b_hh]) in cuDNN's order.
// Every call runs on the current stream of x's device; nothing synchronises the host.
//
// Read before: autograd/functions/rnn_cudnn.h, core/cuda/conv_cudnn.cpp (the same
// descriptor style for convolutions). Read next: nn/rnn.cpp.
#include <cudnn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "autograd/functions/functions.h"
#include "autograd/functions/rnn_cudnn.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cudnn_check.h"
#include "core/cuda/nn_util.h"
#include "core/cuda_hooks.h"
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

int64_t gates_of(RnnCell cell) { return cell == RnnCell::kLSTM ? 4 : 3; }

// One layer's configuration, the key of its RNN descriptor.
struct RnnKey {
  int device, cell, dtype;
  int64_t input, hidden, directions;
  bool bias;
  bool operator<(const RnnKey& o) const {
    return std::tie(device, cell, dtype, input, hidden, directions, bias) <
           std::tie(o.device, o.cell, o.dtype, o.input, o.hidden, o.directions, o.bias);
  }
};

// The descriptors of one configuration, built on first use and kept (a network has a
// few layer shapes), as Note [cuDNN convolution plans] keeps convolution plans.
struct RnnDescriptor {
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;  // dropout 0: lockstep drops between layers
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  size_t weight_bytes = 0;                     // the flat weight space
};

const RnnDescriptor& rnn_descriptor(const RnnKey& k) {
  static std::mutex mutex;
  static std::map<RnnKey, RnnDescriptor> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(k);
  if (it != cache.end()) return it->second;
  cudnnHandle_t handle = cuda::cudnn_handle(k.device);
  RnnDescriptor d;
  d.type = k.dtype == static_cast<int>(kFloat64) ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  // float32 with FMA math (no TF32) unless LOCKSTEP_CUDA_TF32=1, as convolutions.
  const cudnnMathType_t math = d.type == CUDNN_DATA_FLOAT && !cuda_native::nn_detail::tf32_enabled()
                                   ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  LS_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&d.dropout));
  LS_CUDNN_CHECK(cudnnSetDropoutDescriptor(d.dropout, handle, 0.0f, nullptr, 0, 0));
  LS_CUDNN_CHECK(cudnnCreateRNNDescriptor(&d.rnn));
  LS_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
      d.rnn, CUDNN_RNN_ALGO_STANDARD, k.cell == static_cast<int>(RnnCell::kLSTM) ? CUDNN_LSTM : CUDNN_GRU,
      k.bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
      k.directions == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, d.type, d.type,
      math, static_cast<int32_t>(k.input), static_cast<int32_t>(k.hidden), static_cast<int32_t>(k.hidden),
      /*numLayers=*/1, d.dropout, CUDNN_RNN_PADDED_IO_DISABLED));
  LS_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, d.rnn, &d.weight_bytes));
  return cache.emplace(k, d).first->second;
}

// A sequence's data descriptor (T, B, vector), every sequence of full length T.
struct SequenceDesc {
  cudnnRNNDataDescriptor_t d = nullptr;
  SequenceDesc(cudnnDataType_t type, int64_t T, int64_t B, int64_t vector) {
    const std::vector<int> lengths(static_cast<size_t>(B), static_cast<int>(T));
    LS_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&d));
    LS_CUDNN_CHECK(cudnnSetRNNDataDescriptor(d, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
                                             static_cast<int>(T), static_cast<int>(B),
                                             static_cast<int>(vector), lengths.data(), nullptr));
  }
  ~SequenceDesc() { cudnnDestroyRNNDataDescriptor(d); }
  SequenceDesc(const SequenceDesc&) = delete;
  SequenceDesc& operator=(const SequenceDesc&) = delete;
};

// A state's descriptor (D, B, H), contiguous.
struct StateDesc {
  cudnnTensorDescriptor_t d = nullptr;
  StateDesc(cudnnDataType_t type, int64_t D, int64_t B, int64_t H) {
    const int dims[3] = {static_cast<int>(D), static_cast<int>(B), static_cast<int>(H)};
    const int strides[3] = {static_cast<int>(B * H), static_cast<int>(H), 1};
    LS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    LS_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d, type, 3, dims, strides));
  }
  ~StateDesc() { cudnnDestroyTensorDescriptor(d); }
  StateDesc(const StateDesc&) = delete;
  StateDesc& operator=(const StateDesc&) = delete;
};

// What one call needs besides its tensors.
struct Call {
  RnnCell cell;
  RnnKey key;
  int64_t T, B, I, H, D;
  int device() const { return key.device; }
  cudnnHandle_t handle() const { return cuda::cudnn_handle(key.device); }
  cudaStream_t stream() const { return cuda::current_stream(key.device); }
  const RnnDescriptor& desc() const { return rnn_descriptor(key); }
};

Tensor bytes_on(size_t n, int device) {
  return native::empty({static_cast<int64_t>(n > 0 ? n : 1)}, kUInt8, Device::cuda(device));
}

// The sequence lengths, all T, in device memory (cuDNN reads them from its kernels).
Tensor device_lengths(const Call& c) {
  Tensor host = native::empty({c.B}, kInt32);
  int32_t* p = host.data_ptr<int32_t>();
  for (int64_t b = 0; b < c.B; ++b) p[b] = static_cast<int32_t>(c.T);
  return native::to_device(host, Device::cuda(c.device()));
}

// Copies each direction's parameters into the weight space (to_space) or the weight
// space's pieces into new parameter-shaped tensors `out` (D x {w_ih, w_hh, b_ih, b_hh}).
// cuDNN's linear layers: 0 .. G-1 W_ih's gate matrices (H, I), G .. 2G-1 W_hh's (H, H),
// each with its bias; Note [cuDNN RNN layer] on why the layouts agree. The sizes
// cuDNN reports are checked, so a layout that disagreed would stop here.
void copy_pieces(const Call& c, const Tensor& space, std::vector<RnnLayerParams>& params, bool to_space) {
  const RnnDescriptor& rd = c.desc();
  const int64_t G = gates_of(c.cell), elt = c.key.dtype == static_cast<int>(kFloat64) ? 8 : 4;
  cudnnTensorDescriptor_t m_desc = nullptr, b_desc = nullptr;
  LS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_desc));
  LS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&b_desc));
  for (int64_t dir = 0; dir < c.D; ++dir) {
    RnnLayerParams& p = params[static_cast<size_t>(dir)];
    for (int64_t lin = 0; lin < 2 * G; ++lin) {
      const bool input_side = lin < G;
      const int64_t gate = input_side ? lin : lin - G, cols = input_side ? c.I : c.H;
      void *m = nullptr, *b = nullptr;
      LS_CUDNN_CHECK(cudnnGetRNNWeightParams(c.handle(), rd.rnn, static_cast<int32_t>(dir), rd.weight_bytes,
                                             space.raw_data(), static_cast<int32_t>(lin), m_desc, &m,
                                             b_desc, &b));
      size_t m_bytes = 0;
      LS_CUDNN_CHECK(cudnnGetTensorSizeInBytes(m_desc, &m_bytes));
      LS_CHECK(m_bytes == static_cast<size_t>(c.H * cols * elt), "cudnn_rnn_layer: cuDNN's gate matrix ",
               lin, " holds ", m_bytes, " bytes, expected ", c.H * cols * elt, " (H ", c.H, " x ", cols,
               "); run with LOCKSTEP_CUDNN_RNN=0 and report this");
      auto* w = static_cast<char*>((input_side ? p.w_ih : p.w_hh).raw_data()) + gate * c.H * cols * elt;
      const size_t mb = static_cast<size_t>(c.H * cols * elt), bb = static_cast<size_t>(c.H * elt);
      LS_CUDA_CHECK(cudaMemcpyAsync(to_space ? m : w, to_space ? w : m, mb, cudaMemcpyDeviceToDevice,
                                    c.stream()));
      if (!c.key.bias || b == nullptr) continue;
      auto* bias = static_cast<char*>((input_side ? p.b_ih : p.b_hh).raw_data()) + gate * c.H * elt;
      LS_CUDA_CHECK(cudaMemcpyAsync(to_space ? b : bias, to_space ? bias : b, bb, cudaMemcpyDeviceToDevice,
                                    c.stream()));
    }
  }
  cudnnDestroyTensorDescriptor(m_desc);
  cudnnDestroyTensorDescriptor(b_desc);
}

struct CudnnRnnBackward final : BackwardNode {
  Call call{};
  std::vector<SavedVariable> inputs;  // x, h0[, c0], then D x (w_ih, w_hh[, b_ih, b_hh]): edge order
  SavedVariable y;                    // this node's output (T, B, D*H)
  Tensor weight_space, reserve, lengths;
  ReferenceFunction reference;        // the composed layer: Note [Double backward by recomputation]

  std::string name() const override {
    return call.cell == RnnCell::kLSTM ? "CudnnLSTMLayerBackward" : "CudnnGRULayerBackward";
  }
  void release_variables() override {
    for (SavedVariable& v : inputs) v.reset();
    y.reset();
    weight_space = reserve = lengths = Tensor();
  }
  bool supports_double_backward() const override { return true; }

  // grads: y (T, B, D*H), h_n[, c_n] (D, B, H), any undefined. Returns the gradients
  // of x, h0[, c0], then per direction w_ih, w_hh[, b_ih, b_hh].
  variable_list apply(variable_list&& grads) override {
    std::vector<Tensor> in;  // unpacking stops if any of them changed in place since forward
    for (const SavedVariable& v : inputs) in.push_back(v.unpack(name()));
    if (GradMode::is_enabled()) return recorded_gradients(name(), in, reference, grads);  // create_graph
    const bool lstm = call.cell == RnnCell::kLSTM;
    const Tensor &xs = in[0], &h0s = in[1], c0s = lstm ? in[2] : Tensor(), ys = y.unpack(name());
    const Device dev = xs.device();
    cuda::DeviceGuard guard(dev);
    const RnnDescriptor& rd = call.desc();
    const SequenceDesc xd(rd.type, call.T, call.B, call.I), yd(rd.type, call.T, call.B, call.D * call.H);
    const StateDesc hd(rd.type, call.D, call.B, call.H);
    const ScalarType dt = xs.dtype();
    const Tensor dy = grads[0].defined() ? native::contiguous(grads[0])
                                         : native::zeros({call.T, call.B, call.D * call.H}, dt, dev);
    const Tensor dhy = grads[1].defined() ? native::contiguous(grads[1]) : Tensor();
    const Tensor dcy = lstm && grads[2].defined() ? native::contiguous(grads[2]) : Tensor();
    const Tensor dx = native::empty({call.T, call.B, call.I}, dt, dev);
    const Tensor dhx = native::empty({call.D, call.B, call.H}, dt, dev);
    const Tensor dcx = lstm ? native::empty({call.D, call.B, call.H}, dt, dev) : Tensor();
    size_t work_bytes = 0, reserve_bytes = 0;
    LS_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(call.handle(), rd.rnn, CUDNN_FWD_MODE_TRAINING, xd.d,
                                             &work_bytes, &reserve_bytes));
    const Tensor work = bytes_on(work_bytes, call.device());
    // cuDNN writes into the reserve space here: a copy, so a retained graph can run again.
    const Tensor scratch = native::clone(reserve);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
    LS_CUDNN_CHECK(cudnnRNNBackwardData_v8(
        call.handle(), rd.rnn, lengths.data_ptr<int32_t>(), yd.d, ys.raw_data(), dy.raw_data(), xd.d,
        dx.raw_data(), hd.d, h0s.raw_data(), ptr(dhy), dhx.raw_data(), hd.d, ptr(c0s), ptr(dcy), ptr(dcx),
        rd.weight_bytes, weight_space.raw_data(), work_bytes, work.raw_data(), reserve_bytes,
        scratch.raw_data()));
    const size_t first_weight = lstm ? 3 : 2, per_dir = call.key.bias ? 4 : 2;
    variable_list result(first_weight + static_cast<size_t>(call.D) * per_dir);
    result[0] = dx, result[1] = dhx;
    if (lstm) result[2] = dcx;
    bool any_weight = false;
    for (size_t i = first_weight; i < result.size(); ++i) any_weight = any_weight || should_compute_output(i);
    if (!any_weight) return result;
    const Tensor dw_space = bytes_on(rd.weight_bytes, call.device());
    LS_CUDA_CHECK(cudaMemsetAsync(dw_space.raw_data(), 0, rd.weight_bytes, call.stream()));
    LS_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(
        call.handle(), rd.rnn, CUDNN_WGRAD_MODE_ADD, lengths.data_ptr<int32_t>(), xd.d, xs.raw_data(), hd.d,
        h0s.raw_data(), yd.d, ys.raw_data(), rd.weight_bytes, dw_space.raw_data(), work_bytes,
        work.raw_data(), reserve_bytes, scratch.raw_data()));
    std::vector<RnnLayerParams> dw(static_cast<size_t>(call.D));
    const int64_t G = gates_of(call.cell) * call.H;
    for (RnnLayerParams& p : dw) {
      p.w_ih = native::empty({G, call.I}, dt, dev), p.w_hh = native::empty({G, call.H}, dt, dev);
      if (call.key.bias) p.b_ih = native::empty({G}, dt, dev), p.b_hh = native::empty({G}, dt, dev);
    }
    copy_pieces(call, dw_space, dw, /*to_space=*/false);
    for (size_t dir = 0; dir < dw.size(); ++dir) {
      const size_t at = first_weight + dir * per_dir;
      result[at] = dw[dir].w_ih, result[at + 1] = dw[dir].w_hh;
      if (call.key.bias) result[at + 2] = dw[dir].b_ih, result[at + 3] = dw[dir].b_hh;
    }
    return result;
  }
};

// Tensor::contiguous records (a copy keeps its input's history), so the node's edges
// lead to the caller's tensors: native::contiguous would cut them.
RnnLayerParams contiguous_params(const RnnLayerParams& p) {
  auto c = [](const Tensor& t) { return t.defined() ? t.contiguous() : t; };
  return {c(p.w_ih), c(p.w_hh), c(p.b_ih), c(p.b_hh)};
}

std::tuple<Tensor, Tensor, Tensor> rnn_layer_cuda(RnnCell cell, const Tensor& x_in, const Tensor& h0_in,
                                                  const Tensor& c0_in,
                                                  const std::vector<RnnLayerParams>& params_in,
                                                  const ReferenceFunction& reference) {
  profiler::Scope prof(cell == RnnCell::kLSTM ? "lstm_layer_cudnn" : "gru_layer_cudnn");
  const bool lstm = cell == RnnCell::kLSTM;
  const Tensor x = x_in.contiguous(), h0 = h0_in.contiguous();  // (T, B, I) of batch_first is a transpose
  const Tensor c0 = lstm ? c0_in.contiguous() : Tensor();
  std::vector<RnnLayerParams> params;
  for (const RnnLayerParams& p : params_in) params.push_back(contiguous_params(p));
  LS_CHECK(x.dim() == 3, "cudnn_rnn_layer: expected x (T, B, I) but got ", x.shape_str());
  const int64_t T = x.size(0), B = x.size(1), I = x.size(2), D = static_cast<int64_t>(params.size());
  const int64_t H = params[0].w_hh.size(-1), G = gates_of(cell) * H;
  for (const RnnLayerParams& p : params) {
    LS_CHECK(p.w_ih.sizes() == IntList({G, I}) && p.w_hh.sizes() == IntList({G, H}) &&
                 (!p.b_ih.defined() || (p.b_ih.sizes() == IntList({G}) && p.b_hh.sizes() == IntList({G}))),
             "cudnn_rnn_layer: expected w_ih (", G, ", ", I, "), w_hh (", G, ", ", H, ") and biases (", G,
             ") but got ", p.w_ih.shape_str(), ", ", p.w_hh.shape_str());
  }
  LS_CHECK(h0.sizes() == IntList({D, B, H}) && (!lstm || c0.sizes() == IntList({D, B, H})),
           "cudnn_rnn_layer: expected h0", lstm ? " and c0" : "", " (", D, ", ", B, ", ", H, ") but got ",
           h0.shape_str());
  LS_CHECK(T * B * std::max(I, D * H) < (int64_t{1} << 31), "cudnn_rnn_layer: the sequence (T ", T, ", B ",
           B, ") is too large for cuDNN's 32-bit sizes; split it into shorter sequences");
  const Device dev = x.device();
  cuda::DeviceGuard guard(dev);
  Call c{cell, RnnKey{dev.index, static_cast<int>(cell), static_cast<int>(x.dtype()), I, H, D,
                      params[0].b_ih.defined()}, T, B, I, H, D};
  const RnnDescriptor& rd = c.desc();
  Tensor weight_space = bytes_on(rd.weight_bytes, c.device());
  copy_pieces(c, weight_space, params, /*to_space=*/true);
  std::vector<Tensor> inputs{x, h0};
  if (lstm) inputs.push_back(c0);
  for (const RnnLayerParams& p : params) {
    inputs.insert(inputs.end(), {p.w_ih, p.w_hh});
    if (p.b_ih.defined()) inputs.insert(inputs.end(), {p.b_ih, p.b_hh});
  }
  const bool training = compute_requires_grad(inputs);
  const cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  const SequenceDesc xd(rd.type, T, B, I), yd(rd.type, T, B, D * H);
  const StateDesc hd(rd.type, D, B, H);
  size_t work_bytes = 0, reserve_bytes = 0;
  LS_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(c.handle(), rd.rnn, mode, xd.d, &work_bytes, &reserve_bytes));
  const Tensor work = bytes_on(work_bytes, c.device()), reserve = bytes_on(reserve_bytes, c.device());
  const Tensor lengths = device_lengths(c);
  const ScalarType dt = x.dtype();
  Tensor y = native::empty({T, B, D * H}, dt, dev), hy = native::empty({D, B, H}, dt, dev);
  Tensor cy = lstm ? native::empty({D, B, H}, dt, dev) : Tensor();
  LS_CUDNN_CHECK(cudnnRNNForward(c.handle(), rd.rnn, mode, lengths.data_ptr<int32_t>(), xd.d, x.raw_data(),
                                 yd.d, y.raw_data(), hd.d, h0.raw_data(), hy.raw_data(), hd.d,
                                 lstm ? c0.raw_data() : nullptr, lstm ? cy.raw_data() : nullptr,
                                 rd.weight_bytes, weight_space.raw_data(), work_bytes, work.raw_data(),
                                 training ? reserve_bytes : 0, training ? reserve.raw_data() : nullptr));
  if (training) {
    auto node = std::make_shared<CudnnRnnBackward>();
    node->call = c;
    node->y = SavedVariable(y);
    node->weight_space = weight_space, node->reserve = reserve, node->lengths = lengths;
    for (const Tensor& t : inputs) node->inputs.emplace_back(t);
    node->reference = reference;
    std::vector<Tensor> outputs{y, hy};
    if (lstm) outputs.push_back(cy);
    record(node, inputs, outputs);
  }
  return {y, hy, cy};
}

// The static registrar (Note [CUDA hooks]).
const RnnCudaHooks rnn_hooks{&rnn_layer_cuda};
const bool rnn_hooks_registered = lockstep::detail::register_cuda_hooks(rnn_hooks);

}  // namespace
}  // namespace lockstep::autograd
