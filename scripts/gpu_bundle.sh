#!/usr/bin/env bash
# scripts/gpu_bundle.sh — makes the GPU bundle here, on a machine without a GPU: the
# CUDA build of the programs scripts/gpu_check.sh runs, stripped, with every library
# they load that a bare GPU machine lacks, packed into gpu-bundle/ (ignored by git).
#
# § Note [GPU bundle]
# The GPU machine we are lent is bare and offline: nvcc, CMake, ninja and a Python
# whose PyTorch wheels carry cuDNN, NCCL and cuBLAS, but none of the Debian packages
# lockstep links (oneDNN, Gloo, OpenMPI, ...), so it cannot configure lockstep, and
# minutes spent building there are minutes of a short lease. So the build happens
# here:
#   - build-gpu-bundle/: LOCKSTEP_CUDA=ON, kernels for sm_90 + compute_90 PTX, and
#     host code for x86-64-v3 (AVX2; not -march=native, the GPU host's CPU is unknown);
#   - gpu-bundle/bundle.tar.xz: bin/ (test_cuda, test_distributed, bench_step,
#     bench_ddp, lockstep-run, stripped) and lib/ (each library `ldd` resolves for
#     them except the C library's own and the two CUDA libraries the GPU machine's
#     PyTorch carries in newer builds, cuDNN and NCCL; libcudart goes along, it is
#     the toolkit's 13.0 like the machine's driver);
#   - gpu-bundle/test_cuda.cases: test_cuda's case names, for reading (gpu_check runs
#     each case alone, by its index);
#   - gpu-bundle/MANIFEST: the commit and a hash of the tracked sources it was built
#     from, so gpu_check can say whether the bundle is stale.
# xz keeps the bundle under the device tool's 64 MiB (oneDNN alone is 40 MB).
# gpu_check.sh unpacks it to /tmp, puts lib/ and the PyTorch wheels' nvidia/*/lib
# on LD_LIBRARY_PATH and checks with ldd that nothing is missing before it runs.
#
#   scripts/gpu_bundle.sh            # JOBS=2 by default; ~25 minutes on 2 cores from scratch
# Read before: cmake/LockstepCuda.cmake. Read next: scripts/gpu_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu-bundle}
DEST=$ROOT/gpu-bundle
JOBS=${JOBS:-2}
PROGRAMS=(test_cuda test_distributed bench_step bench_ddp lockstep-run)

# The sources' hash (what gpu_check compares, on a copy of the tree without .git).
source_hash() {
  find core autograd nn optim data models distributed tests bench tools examples cmake \
    CMakeLists.txt lockstep.h -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \
    -o -name '*.cuh' -o -name CMakeLists.txt -o -name '*.cmake' \) |
    LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
}
if [ "${1:-}" = "--hash" ]; then
  source_hash
  exit 0
fi

mkdir -p "$BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA=ON \
  -DLOCKSTEP_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=x86-64-v3" > "$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${PROGRAMS[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for p in "${PROGRAMS[@]}"; do
  strip -o "$stage/bin/$p" "$BUILD_DIR/bin/$p"
done
# The libraries: everything ldd resolves, but the C library's own, cuDNN and NCCL.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|librt\.so|libdl\.so|libnccl|libcudnn)'
for p in "${PROGRAMS[@]}"; do
  ldd "$BUILD_DIR/bin/$p" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $skip ]]; then
    cp -L "$path" "$stage/lib/$name"
  fi
done
strip --strip-unneeded "$stage"/lib/*.so* 2> /dev/null || true

mkdir -p "$DEST"
"$BUILD_DIR/bin/test_cuda" --list-test-cases --no-version | grep -v -E '^(=+|\[doctest\].*)$' > "$DEST/test_cuda.cases"
{
  echo "commit $(git rev-parse --short HEAD)"
  echo "sources $(source_hash)"
  echo "uncommitted_source_files $(git status --porcelain -- core autograd nn optim data models distributed tests bench tools examples cmake | wc -l)"
  echo "made $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m), nvcc $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "programs ${PROGRAMS[*]}"
  echo "libraries $(ls "$stage/lib" | tr '\n' ' ')"
} > "$DEST/MANIFEST"
tar -C "$stage" -cf - bin lib | xz -T "$JOBS" -6 > "$DEST/bundle.tar.xz"
echo "gpu-bundle/: $(du -sh "$DEST" | cut -f1) ($(wc -l < "$DEST/test_cuda.cases") test_cuda cases)"
cat "$DEST/MANIFEST"
