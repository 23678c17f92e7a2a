# cmake/LockstepDependencies.cmake — the third-party libraries, all Debian packages
# (scripts/install_deps.sh installs them): Eigen, oneDNN, OpenMP, zlib, Gloo, OpenMPI, CLI11.
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(dnnl REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(ZLIB REQUIRED)
find_package(Gloo REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
# The programs' argument parser (tools/cli.h; Debian libcli11-dev, header-only).
find_package(CLI11 2.1 REQUIRED CONFIG)

# Compile flags shared by every lockstep target (not exported to users).
add_library(lockstep_build_flags INTERFACE)
target_compile_options(lockstep_build_flags INTERFACE
  "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic;-Wno-unused-parameter;-fno-math-errno>")
if(LOCKSTEP_NATIVE)
  target_compile_options(lockstep_build_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()

# Sanitizers (CMakePresets.json's asan-ubsan and tsan presets set this; see
# scripts/sanitize.sh and tools/sanitizers/ for the suppressions). A list of
# -fsanitize= names: "address,undefined", "address", "undefined" or "thread".
# Applied to every target of the build (libraries, tests, tools) so that all
# code is instrumented and every executable links the sanitizer runtime.
set(LOCKSTEP_SANITIZE "" CACHE STRING
  "Build with sanitizers: address,undefined | address | undefined | thread (empty: none)")
if(LOCKSTEP_BUILD_FUZZ)
  # libFuzzer needs clang, coverage instrumentation of the code it explores
  # (fuzzer-no-link on every target; the fuzz targets add -fsanitize=fuzzer) and,
  # unless told otherwise, ASan + UBSan so that a memory error is a crash.
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "LOCKSTEP_BUILD_FUZZ=ON needs clang (libFuzzer ships with clang's "
      "compiler-rt) but the C++ compiler is ${CMAKE_CXX_COMPILER_ID} (${CMAKE_CXX_COMPILER}). "
      "Install it (apt-get install clang-19 libclang-rt-19-dev libomp-19-dev) and configure a fresh "
      "build directory with -DCMAKE_CXX_COMPILER=clang++-19, or run scripts/fuzz.sh.")
  endif()
  if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 19)
    message(FATAL_ERROR "LOCKSTEP_BUILD_FUZZ=ON: clang ${CMAKE_CXX_COMPILER_VERSION} is too old "
      "for lockstep's C++20 (lambdas that capture structured bindings; tested with clang 19). "
      "apt-get install clang-19 libclang-rt-19-dev libomp-19-dev and configure a fresh build "
      "directory with -DCMAKE_CXX_COMPILER=clang++-19 (scripts/fuzz.sh does both).")
  endif()
  if(NOT LOCKSTEP_SANITIZE)
    set(LOCKSTEP_SANITIZE "address,undefined")
  endif()
  if(LOCKSTEP_SANITIZE MATCHES "thread")
    message(FATAL_ERROR "LOCKSTEP_BUILD_FUZZ=ON cannot be combined with "
      "LOCKSTEP_SANITIZE=${LOCKSTEP_SANITIZE}; fuzz with address,undefined")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
  # No -fopenmp in the fuzz build: clang (19 included) refuses structured
  # bindings captured into a `#pragma omp` region, which core/native/batch_norm.cpp
  # has. The pragmas are then ignored (the readers under test are serial) and
  # the OpenMP runtime is still linked for the omp_* calls of core/parallel.cpp.
  set_property(TARGET OpenMP::OpenMP_CXX PROPERTY INTERFACE_COMPILE_OPTIONS "")
  add_compile_options(-Wno-unknown-pragmas)
endif()
if(LOCKSTEP_SANITIZE)
  string(REPLACE "," ";" lockstep_sanitizers "${LOCKSTEP_SANITIZE}")
  foreach(s ${lockstep_sanitizers})
    if(NOT s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "LOCKSTEP_SANITIZE=${LOCKSTEP_SANITIZE}: unknown sanitizer '${s}'; "
        "use address,undefined (ASan + UBSan) or thread (TSan)")
    endif()
  endforeach()
  if("thread" IN_LIST lockstep_sanitizers AND "address" IN_LIST lockstep_sanitizers)
    message(FATAL_ERROR "LOCKSTEP_SANITIZE=${LOCKSTEP_SANITIZE}: ThreadSanitizer and "
      "AddressSanitizer cannot be combined; configure two build directories "
      "(cmake --preset asan-ubsan and cmake --preset tsan)")
  endif()
  set(lockstep_sanitize_flags -fsanitize=${LOCKSTEP_SANITIZE} -fno-omit-frame-pointer)
  if("undefined" IN_LIST lockstep_sanitizers)
    # A UBSan finding fails the test instead of printing and carrying on.
    list(APPEND lockstep_sanitize_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${lockstep_sanitize_flags})
  add_link_options(-fsanitize=${LOCKSTEP_SANITIZE})
  message(STATUS "lockstep: sanitizers ${LOCKSTEP_SANITIZE}")
endif()
