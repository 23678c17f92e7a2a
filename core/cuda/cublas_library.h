// core/cuda/cublas_library.h — cuBLAS, opened on first use rather than linked.
//
// § Note [cuBLAS loaded on first use]
// Linking libcublas makes every lockstep process load it, and with it
// libcublasLt, at start-up: an empty program linked against libcublas 13 has a
// peak RSS of 218 MB here (the loader's relocations and the libraries' static
// constructors), against 3 MB for cudart, 2.5 MB for cuDNN and 4 MB for NCCL.
// A CUDA-enabled build then carried those 200+ MB in every process, including
// CPU-only training and each rank of a CPU DDP job. So the CUDA backend does
// not link cuBLAS: the first GEMM on a GPU dlopen()s libcublas.so.<major of the
// headers we compiled against> and looks up the few entry points it calls; a
// missing library or symbol is an ls::Error naming it. cublas_v2.h is still
// included, for the types and to check each entry point's signature.
//
// Read before: core/cuda/cuda_context.h. Read next: core/cuda/gemm_cublas.cpp.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace lockstep::cuda {

// The entry points the backend calls (the _v2 names that cublas_v2.h's macros
// stand for), with the signatures of the headers.
struct CublasLibrary {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetPointerMode_v2) set_pointer_mode = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasGemmEx_64) gemm_ex = nullptr;
  decltype(&::cublasGemmStridedBatchedEx_64) gemm_strided_batched_ex = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
  std::string path;  // the file dlopen() was asked for
};

// Opens the library on the first call (thread-safe) and returns its entry
// points; throws ls::Error naming the library or symbol that is missing.
const CublasLibrary& cublas_library();

}  // namespace lockstep::cuda
