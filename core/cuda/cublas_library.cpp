// core/cuda/cublas_library.cpp — dlopen() and dlsym() for cuBLAS (Note [cuBLAS
// loaded on first use] in cublas_library.h).
// Read before: core/cuda/cublas_library.h. Read next: core/cuda/gemm_cublas.cpp.
#include "core/cuda/cublas_library.h"

#include <dlfcn.h>

#include <mutex>

#include "core/error.h"

namespace lockstep::cuda {

namespace {

// The soname of the cuBLAS whose headers we compiled against: libcublas.so.13.
std::string library_name() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

template <class Fn>
void resolve(void* handle, const std::string& path, const char* symbol, Fn& fn) {
  void* address = dlsym(handle, symbol);
  LS_CHECK(address != nullptr, "cuBLAS: ", path, " has no entry point ", symbol,
           "; it is not the cuBLAS ", CUBLAS_VER_MAJOR, ".x this build was compiled against "
           "(check LD_LIBRARY_PATH and the CUDA toolkit version)");
  fn = reinterpret_cast<Fn>(address);
}

CublasLibrary open_library() {
  CublasLibrary lib;
  lib.path = library_name();
  // RTLD_LOCAL: the symbols stay out of the global namespace; we only use the pointers.
  void* handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    LS_CHECK(false, "cuBLAS: could not open ", lib.path, " (", why != nullptr ? why : "unknown",
             "); install the CUDA toolkit's cuBLAS ", CUBLAS_VER_MAJOR,
             " or add its lib directory to LD_LIBRARY_PATH");
  }
  // Never dlclose()d: handles and pointers live until the process exits.
  resolve(handle, lib.path, "cublasCreate_v2", lib.create);
  resolve(handle, lib.path, "cublasSetStream_v2", lib.set_stream);
  resolve(handle, lib.path, "cublasSetPointerMode_v2", lib.set_pointer_mode);
  resolve(handle, lib.path, "cublasSetMathMode", lib.set_math_mode);
  resolve(handle, lib.path, "cublasGemmEx_64", lib.gemm_ex);
  resolve(handle, lib.path, "cublasGemmStridedBatchedEx_64", lib.gemm_strided_batched_ex);
  resolve(handle, lib.path, "cublasGetStatusString", lib.status_string);
  return lib;
}

}  // namespace

const CublasLibrary& cublas_library() {
  // A failed open throws out of the initialiser; the next call tries again.
  static std::mutex mutex;
  static const CublasLibrary* library = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (library == nullptr) library = new CublasLibrary(open_library());  // never freed
  return *library;
}

}  // namespace lockstep::cuda
