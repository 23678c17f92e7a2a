# bench/openblas_coretype.sh — sourced by the compare scripts before they run PyTorch.
#
# Debian's PyTorch 1.13 does its matrix products (Linear, matmul) through OpenBLAS,
# which picks its kernels from the CPU model. On this project's KVM machines the
# model reads "Intel(R) Xeon(R) Processor" and OpenBLAS falls back to its generic
# "Prescott" (SSE3) kernels: 25 GFLOP/s on one core instead of 130. Comparing
# against that would flatter lockstep, so the scripts name the core type from
# the CPU's flags (unless the caller already set OPENBLAS_CORETYPE).
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
