// tests/core/test_dispatch_verbose_cuda.cpp — the CUDA side of LOCKSTEP_VERBOSE=dispatch
// (Note [Kernel dispatch]): cuDNN's algorithm choice for a convolution pass
// (choose_cudnn_algo, core/cuda/cudnn_algo_choice.h) prints one line naming the
// candidate it chose. The rule reads only cuDNN's ranked candidate list, so the
// candidates are written here by hand and no GPU, cuDNN call or kernel is needed.
// Built with the CUDA backend only (LOCKSTEP_CUDA=ON).
// Read before: core/cuda/cudnn_algo_choice.h, tests/core/test_dispatch_verbose.cpp.
#include <doctest/doctest.h>

#if LOCKSTEP_WITH_CUDA

#include <string>

#include "core/cuda/cudnn_algo_choice.h"
#include "core/native/dispatch_verbose.h"
#include "tests/support/stderr_capture.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using lockstep::testing::stderr_of;

namespace {

constexpr const char* kShapes = "x (8, 64, 56, 56) w (64, 64, 3, 3) stride 1x1 padding 1x1 dilation 1x1 groups 1";

cudnnConvolutionFwdAlgoPerf_t candidate(cudnnConvolutionFwdAlgo_t algo, cudnnStatus_t status, size_t memory,
                                        cudnnMathType_t math, cudnnDeterminism_t determinism) {
  cudnnConvolutionFwdAlgoPerf_t p{};
  p.algo = algo;
  p.status = status;
  p.memory = memory;
  p.mathType = math;
  p.determinism = determinism;
  return p;
}

struct RestoreVerbose {
  bool verbose = native::dispatch_verbose();
  ~RestoreVerbose() { native::set_dispatch_verbose(verbose); }
};

}  // namespace

TEST_CASE("dispatch verbose: cuDNN's algorithm choice prints the candidate it took, from the list alone") {
  RestoreVerbose restore;
  // cuDNN's ranked list: failed, over the workspace cap, non-deterministic, deterministic, tensor cores.
  const cudnnConvolutionFwdAlgoPerf_t perf[] = {
      candidate(CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_STATUS_NOT_SUPPORTED, 0, CUDNN_FMA_MATH, CUDNN_DETERMINISTIC),
      candidate(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_STATUS_SUCCESS, ls::cuda_native::kMaxCudnnWorkspace + 1,
                CUDNN_FMA_MATH, CUDNN_DETERMINISTIC),
      candidate(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_STATUS_SUCCESS, 1024, CUDNN_FMA_MATH,
                CUDNN_NON_DETERMINISTIC),
      candidate(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, 4096, CUDNN_FMA_MATH,
                CUDNN_DETERMINISTIC),
      candidate(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_SUCCESS, 0, CUDNN_TENSOR_OP_MATH, CUDNN_DETERMINISTIC),
  };
  const std::string line = "lockstep_verbose,dispatch,conv2d.forward,cudnn_algo_" +
                           std::to_string(static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)) +
                           ",float32," + kShapes + "\n";

  native::set_dispatch_verbose(true);
  int chosen = -1;
  std::string log = stderr_of([&] {
    chosen = ls::cuda_native::choose_cudnn_algo(perf, 5, CUDNN_DATA_FLOAT, /*tf32=*/false, "conv2d.forward",
                                                ls::kFloat32, kShapes);
  });
  CHECK(chosen == 3);  // the first deterministic one that ran and fits the cap
  CHECK(log == line);

  // Without a deterministic candidate, the first that fits; the line names it.
  log = stderr_of([&] {
    chosen = ls::cuda_native::choose_cudnn_algo(perf, 3, CUDNN_DATA_FLOAT, false, "conv2d.forward", ls::kFloat32,
                                                kShapes);
  });
  CHECK(chosen == 2);
  CHECK(log.find(",conv2d.forward,cudnn_algo_" +
                 std::to_string(static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM)) + ",float32,") !=
        std::string::npos);

  // bfloat16 may take the tensor cores, and the line says so.
  log = stderr_of([&] {
    chosen = ls::cuda_native::choose_cudnn_algo(perf + 4, 1, CUDNN_DATA_BFLOAT16, false, "conv2d.forward",
                                                ls::kBFloat16, kShapes);
  });
  CHECK(chosen == 0);
  CHECK(log.find("_tensor_op,bfloat16,") != std::string::npos);
  // float32 without LOCKSTEP_CUDA_TF32 may not: nothing fits, nothing is printed.
  log = stderr_of([&] {
    chosen = ls::cuda_native::choose_cudnn_algo(perf + 4, 1, CUDNN_DATA_FLOAT, false, "conv2d.forward",
                                                ls::kFloat32, kShapes);
  });
  CHECK(chosen == -1);
  CHECK(log.empty());

  // Off: the same choice, no line.
  native::set_dispatch_verbose(false);
  log = stderr_of([&] {
    chosen = ls::cuda_native::choose_cudnn_algo(perf, 5, CUDNN_DATA_FLOAT, false, "conv2d.forward", ls::kFloat32,
                                                kShapes);
  });
  CHECK(chosen == 3);
  CHECK(log.empty());
}

#endif  // LOCKSTEP_WITH_CUDA
