// core/native/kernel_api.h — the basic ops both backends implement, declared once:
// memory, indexing, elementwise, unary, reductions, softmax and matrix products.
//
// § Note [Kernel API declared once]
// The CPU kernels (namespace lockstep::native, core/native/*.cpp) and the CUDA
// kernels (namespace lockstep::cuda_native, core/cuda/*.cu) have the same names,
// signatures and contracts, so LS_DISPATCH_CUDA can forward a call unchanged
// (Note [CUDA dispatch] in cuda_dispatch.h). Their declarations are written once,
// in this file and kernel_api_nn.h, which are included *inside* each namespace:
//   namespace lockstep::native { ... #include "core/native/kernel_api.h" }       (native.h)
//   namespace lockstep::cuda_native { ... #include "core/native/kernel_api.h" }  (cuda_native.h)
// so they have no include guard and include nothing themselves (the includer
// brings core/tensor.h, <tuple>, <vector> and the op enums first). What only one
// backend has stays in its own headers: views and the CPU's extras in native.h
// and nn_kernels*.h, cuBLAS/cuDNN entry points in core/cuda/cuda_native_nn.h.
// Dtype and shape rules are the contracts below; each CUDA function also checks
// that its tensors share one CUDA device and queues its work on that device's
// current stream without synchronising the host (except where it must return a
// value: allclose, equal, copy_ into CPU memory).
//
// Read before: core/native/native.h. Read next: core/native/kernel_api_nn.h.

// ---- memory (memory.cpp, memory.cu) ----
Tensor empty(const IntList& sizes, ScalarType dtype = kFloat32, Device device = Device::cpu());
Tensor empty_like(const Tensor& t);  // same shape/dtype/device, contiguous
Tensor zeros_like(const Tensor& t);
void fill_(const Tensor& self, double value);
// src broadcasts to dst; dtype converts. dst and src may be on different devices
// (CPU <-> CUDA, CUDA <-> CUDA); a copy into CPU memory waits for the stream.
void copy_(const Tensor& dst, const Tensor& src);
Tensor contiguous(const Tensor& t);                  // t itself if already contiguous
Tensor clone(const Tensor& t);                       // always a new contiguous copy
Tensor to_dtype(const Tensor& t, ScalarType dtype);  // t itself if dtype matches
// A contiguous copy on `device` (CPU <-> CUDA through core/cuda/memory.cu); t itself
// if it is there already. Throws in a CPU-only build when `device` is CUDA.
Tensor to_device(const Tensor& t, Device device);

// ---- indexing and joining (index.cpp, index.cu) ----
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);  // index: 1-d int64/int32
// self[..., index[i], ...] += src[..., i, ...] along dim (the backward of index_select).
void index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// ---- elementwise with broadcasting (elementwise.cpp, elementwise.cu) ----
// a (op) b; the result has the broadcast shape and the promoted dtype.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// self = self (op) other, other broadcast to self's shape; self's dtype is kept.
void binary_(BinaryOp op, const Tensor& self, const Tensor& other);
// a (op) s and s (op) a. Integer tensors stay integer when s is a whole number.
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s);
Tensor scalar_binary(BinaryOp op, double s, const Tensor& a);
void binary_scalar_(BinaryOp op, const Tensor& self, double s);
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);    // bool result
Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol);
bool equal(const Tensor& a, const Tensor& b);

// ---- unary math (unary.cpp, unary.cu); float32/float64 except neg/abs/relu ----
Tensor unary(UnaryOp op, const Tensor& a);
Tensor pow_scalar(const Tensor& a, double exponent);
Tensor relu_backward(const Tensor& grad, const Tensor& input);  // grad where input > 0, else 0
Tensor gelu_backward(const Tensor& grad, const Tensor& input);  // grad * d gelu(x)/dx

// ---- reductions (reduce.cpp, reduce.cu); `dims` empty means every dim ----
Tensor sum(const Tensor& t, const IntList& dims, bool keepdim);   // ints sum in int64
Tensor mean(const Tensor& t, const IntList& dims, bool keepdim);  // floating only
Tensor max_all(const Tensor& t);
Tensor min_all(const Tensor& t);
std::tuple<Tensor, Tensor> max_dim(const Tensor& t, int64_t dim, bool keepdim);  // values, int64 indices
std::tuple<Tensor, Tensor> min_dim(const Tensor& t, int64_t dim, bool keepdim);
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim);
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim);
// Sums `grad` down to `shape` (which it was broadcast from): the backward of broadcasting.
Tensor sum_to(const Tensor& grad, const IntList& shape);

// ---- softmax (softmax.cpp, softmax.cu) ----
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);
// bf16 autocast's softmax / log_softmax (CPU): a bfloat16 t read in place, the result
// float32 with the values of softmax(to_dtype(t, kFloat32)); the backward takes that
// float32 output and returns dL/dt rounded to bfloat16 (Note [float32 ops reading
// bfloat16 in place] in autograd/functions/autocast_ops.h).
Tensor softmax_bf16_input(const Tensor& t, int64_t dim, bool log);
Tensor softmax_backward_bf16_input(const Tensor& grad_output, const Tensor& output, int64_t dim,
                                   bool log);

// ---- linear algebra (linalg.cpp on core/native/gemm.h; gemm_cublas.cpp) ----
// float32, float64, and on CUDA also bfloat16 (bf16 out, float32 sums).
Tensor mm(const Tensor& a, const Tensor& b);      // (n, k) x (k, m) -> (n, m)
Tensor bmm(const Tensor& a, const Tensor& b);     // (B, n, k) x (B, k, m) -> (B, n, m)
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul rules, broadcast batch dims
