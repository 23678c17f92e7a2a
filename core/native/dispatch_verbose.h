// core/native/dispatch_verbose.h — LOCKSTEP_VERBOSE=dispatch: one line on stderr
// per kernel choice, naming the implementation that ran.
//
// § Note [Kernel dispatch]
// A kernel family with more than one implementation (convolution, GEMM, pooling,
// ...) chooses among them in one function, choose_<family>, that returns a named
// implementation (an enum with a *_name function: "onednn", "im2col_gemm",
// "gemm_1x1", ...). The kernel calls it once per pass and runs what it returns;
// the implementations themselves decide nothing more about which path runs. So
// a reader finds in one screen which path runs when: conv_dispatch.cpp for
// convolution (choose_conv, choose_conv_bf16), gemm.cpp for GEMM (choose_gemm),
// pool_dispatch.cpp for max-pooling (choose_max_pool), batch_norm_bf16.h for batch
// norm (choose_batch_norm). Layer norm, softmax and cross-entropy have one CPU path.
// CUDA tensors leave before any of this, through LS_DISPATCH_CUDA
// (Note [CUDA dispatch] in cuda_dispatch.h); on the GPU the choice among
// implementations is cuDNN's convolution algorithm, made and printed the same
// way by choose_cudnn_algo (core/cuda/cudnn_algo_choice.h).
//
// Like ONEDNN_VERBOSE, the environment variable LOCKSTEP_VERBOSE=dispatch makes
// every choice print one line to stderr:
//   lockstep_verbose,dispatch,<family>,<implementation>,<dtype>,<shapes>
// e.g. lockstep_verbose,dispatch,conv2d.forward,onednn,float32,x (8, 64, 56, 56) w (64, 64, 3, 3) ...
// The variable is read once, at the first choice; when it is off, a choice costs
// one load of a cached flag. Values: unset or empty (off), "dispatch", or a
// comma-separated list containing it ("dispatch,..."); "0" and "none" are off too.
//
// Read before: core/native/nn_kernels.h. Read next: core/native/conv_dispatch.h.
#pragma once

#include <string_view>

#include "core/dtype.h"

namespace lockstep::native {

// Whether dispatch lines are printed: what LOCKSTEP_VERBOSE asked for at the first
// call (dispatch_verbose_from_env), unless set_dispatch_verbose overrode it.
bool dispatch_verbose();
// Process-wide override of the environment (tests and programs switch it).
void set_dispatch_verbose(bool on);
// Whether LOCKSTEP_VERBOSE asks for dispatch lines now; throws ls::Error naming
// the accepted values for an unknown word in the list.
bool dispatch_verbose_from_env();

// Prints the line of Note [Kernel dispatch]. Call it only when dispatch_verbose().
void log_dispatch(std::string_view family, std::string_view impl, ScalarType dtype,
                  std::string_view shapes);

}  // namespace lockstep::native
