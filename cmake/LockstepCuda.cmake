# cmake/LockstepCuda.cmake — the optional CUDA backend (Note [CUDA build]).
#
# § Note [CUDA build]
# LOCKSTEP_CUDA defaults to ON when nvcc is found (CMAKE_CUDA_COMPILER, $CUDACXX,
# PATH, or /usr/local/cuda/bin/nvcc) and OFF otherwise; a CPU-only build needs
# nothing from CUDA. When ON, the CUDA-only sources (core/cuda/*.cu|*.cpp,
# distributed/process_group/cuda/*.cpp, autograd/functions/*_cuda.cpp) form their own
# library, lockstep_cuda_kernels, which defines LOCKSTEP_WITH_CUDA=1 for itself and its
# users; the CPU libraries are compiled exactly as in a CPU-only build and reach the
# kernels only through the hooks tables it registers as it loads (Note [CUDA hooks] in
# core/cuda_hooks.h). Programs link lockstep::cuda, which links that archive whole (its
# registrars are referenced by nothing) on top of lockstep::lockstep (Note [CUDA
# component] in cmake/LockstepInstall.cmake). The kernels are compiled for sm_90
# (Hopper, the H200) plus compute_90 PTX that the driver JIT-compiles for newer GPUs.
# The library links cudart, cuDNN and NCCL from the toolkit, and opens cuBLAS at run
# time on the first GPU GEMM (Note [cuBLAS loaded on first use] in
# core/cuda/cublas_library.h: linked, it cost every process 200+ MB of memory). It
# builds and links without a GPU; the `gpu`-labelled tests then skip with a message
# (ls::cuda::is_available() is false).
# Read before: cmake/LockstepDependencies.cmake. Read next: core/cuda/cuda_context.h.
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
check_language(CUDA)
set(lockstep_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(lockstep_cuda_default ON)
endif()
option(LOCKSTEP_CUDA "Build the CUDA backend (cuBLAS, cuDNN, NCCL)" ${lockstep_cuda_default})

if(LOCKSTEP_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "LOCKSTEP_CUDA=ON but no CUDA compiler was found: install the CUDA "
      "toolkit (nvcc) or set -DCMAKE_CUDA_COMPILER=/path/to/nvcc, or configure with -DLOCKSTEP_CUDA=OFF")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)  # sm_90 SASS + compute_90 PTX
  endif()
  enable_language(CUDA)
  # CMake < 3.26 does not know nvcc's C++20 flag; nvcc 12+ accepts -std=c++20.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  find_library(LOCKSTEP_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(LOCKSTEP_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(LOCKSTEP_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(LOCKSTEP_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  foreach(v LOCKSTEP_CUDNN_LIBRARY LOCKSTEP_CUDNN_INCLUDE_DIR LOCKSTEP_NCCL_LIBRARY LOCKSTEP_NCCL_INCLUDE_DIR)
    if(NOT ${v})
      message(FATAL_ERROR "LOCKSTEP_CUDA=ON: ${v} not found (cuDNN 9 and NCCL 2 are needed "
        "beside the CUDA toolkit); set it, or configure with -DLOCKSTEP_CUDA=OFF")
    endif()
  endforeach()
  message(STATUS "lockstep: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
    "architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "lockstep: CUDA backend OFF (CPU-only build)")
endif()

# lockstep_add_cuda_library(): lockstep_cuda_kernels from every CUDA-only source, and
# lockstep::cuda, what a GPU program links (Note [CUDA build]).
function(lockstep_add_cuda_library)
  if(NOT LOCKSTEP_CUDA)
    return()
  endif()
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/*.cu
       ${PROJECT_SOURCE_DIR}/core/*.cpp ${PROJECT_SOURCE_DIR}/autograd/*.cpp
       ${PROJECT_SOURCE_DIR}/distributed/*.cpp)
  list(FILTER sources INCLUDE REGEX "/cuda/|_cuda\\.cpp$")
  add_library(lockstep_cuda_kernels STATIC ${sources})
  set_target_properties(lockstep_cuda_kernels PROPERTIES EXPORT_NAME cuda_kernels
    CUDA_SEPARABLE_COMPILATION OFF)
  target_compile_definitions(lockstep_cuda_kernels PUBLIC LOCKSTEP_WITH_CUDA=1)
  target_include_directories(lockstep_cuda_kernels PRIVATE ${LOCKSTEP_CUDNN_INCLUDE_DIR}
    ${LOCKSTEP_NCCL_INCLUDE_DIR})
  # cuBLAS is not linked but opened on first use (Note [cuBLAS loaded on first use]).
  target_link_libraries(lockstep_cuda_kernels PUBLIC lockstep_distributed CUDA::cudart
    PRIVATE ${CMAKE_DL_LIBS} ${LOCKSTEP_CUDNN_LIBRARY} ${LOCKSTEP_NCCL_LIBRARY}
    $<BUILD_INTERFACE:lockstep_build_flags>)

  add_library(lockstep_cuda INTERFACE)
  add_library(lockstep::cuda ALIAS lockstep_cuda)
  set_target_properties(lockstep_cuda PROPERTIES EXPORT_NAME cuda)
  # Whole: nothing references the registrars (Note [CUDA hooks] in core/cuda_hooks.h). The
  # installed target is named in the export as it is spelled there.
  target_link_libraries(lockstep_cuda INTERFACE lockstep
    "$<BUILD_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,lockstep_cuda_kernels>>"
    "$<INSTALL_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,lockstep::cuda_kernels>>")
endfunction()
