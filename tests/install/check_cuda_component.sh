#!/usr/bin/env bash
# tests/install/check_cuda_component.sh — the installed package's CUDA component (Note [CUDA
# component] in cmake/LockstepInstall.cmake), checked from a build tree of either kind:
#   cpu   (a -DLOCKSTEP_CUDA=OFF tree) the consumer configures with the CUDA toolkit hidden (no
#         nvcc on PATH, find_package(CUDAToolkit) disabled, a switch CMake then reports unused:
#         nothing searched the toolkit) and the installed targets name no CUDA library; the
#         program's dynamic section, ldd and LD_DEBUG=files show no CUDA library; COMPONENTS
#         CUDA fails saying the install has no CUDA and how to build it, OPTIONAL_COMPONENTS
#         CUDA configures without lockstep::cuda.
#   cuda  (a -DLOCKSTEP_CUDA=ON tree) COMPONENTS CUDA gives lockstep::cuda, whose program builds,
#         runs and loads cudart (the same LD_DEBUG check, seen to fire); without the toolkit the
#         CPU consumer's configure fails naming the coupling and the CPU-only build.
# Both: an unknown component fails naming the known one. The kind that does not match the tree
# exits 77 (CTest: Skipped), naming the tree that runs it.
# Usage: check_cuda_component.sh cpu|cuda SOURCE_DIR BUILD_DIR WORK_DIR
# Read before: tests/install/run_install_check.cmake.
# Read next: tests/install/component_consumer/CMakeLists.txt.
set -euo pipefail
kind=$1 src=$2 build=$3 work=$4
cmake=${CMAKE:-cmake}

built_with=$(sed -n 's/^LOCKSTEP_CUDA:BOOL=//p' "$build/CMakeCache.txt")
case "$built_with" in ON|TRUE|1) tree=cuda ;; *) tree=cpu ;; esac
if [ "$kind" != "$tree" ]; then
  want=OFF; [ "$kind" = cuda ] && want=ON
  echo "SKIP: $build was configured with LOCKSTEP_CUDA=$built_with; the $kind install is" \
       "checked from a build tree configured with -DLOCKSTEP_CUDA=$want"
  exit 77
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
# Any library of the CUDA toolkit, as the loader and readelf print it.
cuda_libs='lib(cuda|cudart|cudnn[a-z_]*|cublas|cublasLt|nccl|nvrtc|nvJitLink|cufft|curand|cusparse|cusolver)\.so'
# PATH without the folders that hold nvcc.
clean_path=$(tr ':' '\n' <<<"$PATH" | while read -r dir; do [ -x "$dir/nvcc" ] || echo "$dir"; done | paste -sd: -)

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"

# configure NAME REQUEST [cmake args...]: the consumer asking with REQUEST, in a shell with no
# CUDA variable and no toolkit on PATH (the installed config may still find it itself).
# Output in $work/NAME.log; returns cmake's status.
configure() {
  local name=$1 request=$2
  shift 2
  env -u CUDAToolkit_ROOT -u CUDA_PATH -u CUDA_HOME -u CUDACXX PATH="$clean_path" \
    "$cmake" -S "$src/tests/install/component_consumer" -B "$work/$name" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DLOCKSTEP_REQUEST="$request" "$@" \
    >"$work/$name.log" 2>&1
}
expect_in_log() {  # NAME TEXT: the configure log NAME holds TEXT (CMake wraps its messages' lines)
  tr -s ' \n' '  ' <"$work/$1.log" | grep -qF -- "$2" || { cat "$work/$1.log" >&2; fail "$1: expected '$2' in the configure output"; }
}
# build_and_run NAME: builds the consumer configured as NAME, runs it under LD_DEBUG=files
# (every library the loader opens, dlopen included, in $work/NAME.ld_debug).
build_and_run() {
  "$cmake" --build "$work/$1" -j2 >"$work/$1.build.log" 2>&1 || { cat "$work/$1.build.log" >&2; fail "$1: the consumer does not build"; }
  LD_DEBUG=files LD_DEBUG_OUTPUT="$work/$1.ld_debug" "$work/$1/consumer" >"$work/$1.run.log" 2>&1 ||
    { cat "$work/$1.run.log" >&2; fail "$1: the consumer failed"; }
  grep -q "consumer: ok" "$work/$1.run.log" || fail "$1: the consumer did not print 'consumer: ok'"
  cat "$work/$1.ld_debug".* >"$work/$1.loaded"
}

if [ "$kind" = cpu ]; then
  configure cpu cpu -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON ||
    { cat "$work/cpu.log" >&2; fail "the CPU consumer does not configure without the CUDA toolkit"; }
  expect_in_log cpu "consumer links lockstep::lockstep"
  expect_in_log cpu "lockstep_WITH_CUDA=OFF"
  # Every find_package(CUDAToolkit) reads the switch; CMake names it unused: nothing asked.
  expect_in_log cpu "Manually-specified variables were not used by the project: CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit"
  if grep -E 'CUDA::|cudart|cudnn|nccl' "$prefix"/lib/cmake/lockstep/lockstepTargets*.cmake; then
    fail "the CPU install's targets name CUDA libraries (above)"
  fi
  build_and_run cpu
  if grep -E "file=$cuda_libs" "$work/cpu.loaded"; then fail "the CPU consumer loaded a CUDA library (LD_DEBUG above)"; fi
  if readelf -d "$work/cpu/consumer" | grep NEEDED | grep -E "$cuda_libs"; then fail "the CPU consumer needs a CUDA library (above)"; fi
  if ldd "$work/cpu/consumer" | grep -E "$cuda_libs"; then fail "ldd shows a CUDA library (above)"; fi
  echo "cpu install: configures without the toolkit; NEEDED: $(readelf -d "$work/cpu/consumer" | grep -c NEEDED) libraries, none of CUDA"

  if configure cuda cuda; then fail "COMPONENTS CUDA of a CPU-only install configured"; fi
  expect_in_log cuda "was built without CUDA"
  expect_in_log cuda "-DLOCKSTEP_CUDA=ON"
  configure optional-cuda optional-cuda || { cat "$work/optional-cuda.log" >&2; fail "OPTIONAL_COMPONENTS CUDA did not configure"; }
  expect_in_log optional-cuda "lockstep_CUDA_FOUND=FALSE"
  expect_in_log optional-cuda "consumer links lockstep::lockstep"
else
  configure cuda cuda || { cat "$work/cuda.log" >&2; fail "COMPONENTS CUDA of a CUDA install did not configure"; }
  expect_in_log cuda "lockstep_CUDA_FOUND=TRUE"
  expect_in_log cuda "consumer links lockstep::cuda"
  build_and_run cuda
  grep -qE "file=libcudart\.so" "$work/cuda.loaded" || fail "the CUDA consumer did not load cudart: the LD_DEBUG check cannot see CUDA libraries"
  readelf -d "$work/cuda/consumer" | grep NEEDED | grep -qE "$cuda_libs" || fail "the CUDA consumer's dynamic section names no CUDA library"

  if configure no-toolkit cpu -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON; then
    fail "the CPU consumer of a CUDA install configured without the toolkit, yet the libraries hold the kernels"
  fi
  expect_in_log no-toolkit "was built with CUDA"
  expect_in_log no-toolkit "-DLOCKSTEP_CUDA=OFF"
  configure optional-cuda optional-cuda || { cat "$work/optional-cuda.log" >&2; fail "OPTIONAL_COMPONENTS CUDA did not configure"; }
  expect_in_log optional-cuda "consumer links lockstep::cuda"
fi

if configure bogus bogus; then fail "an unknown component configured"; fi
expect_in_log bogus "has no component 'Bogus'"
echo "check_cuda_component.sh $kind: ok"
