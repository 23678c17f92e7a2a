#!/usr/bin/env bash
# bench/machine.sh — one line naming the CPU a benchmark ran on, for the figure files.
#
# The bf16 results depend on the matrix unit more than on anything else: with AMX
# (amx_bf16) oneDNN's one-core bf16 GEMM runs at ~2 TFLOP/s, with only AVX-512-BF16
# (avx512_bf16, e.g. AMD Zen 4 or an Intel VM that hides AMX) at ~200 GFLOP/s, and
# the ratios against PyTorch move with it (docs/results/bf16.md). The VMs of this
# project have been of both vendors, so every compare script prints this line.
#
#   source bench/machine.sh && machine_line
#   -> "# machine: AMD EPYC (family 25 model 17), 2 cpus, avx512_bf16 yes, amx_bf16 no"
# Read next: docs/results/bf16.md.

machine_line() {
  local model family cpu_model flags cpus
  model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
  family=$(awk -F': ' '/^cpu family/ {print $2; exit}' /proc/cpuinfo)
  cpu_model=$(awk -F': ' '/^model[[:space:]]*:/ {print $2; exit}' /proc/cpuinfo)
  flags=$(awk -F': ' '/^flags/ {print $2; exit}' /proc/cpuinfo)
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo '?')  # nproc obeys OMP_NUM_THREADS
  has() { case " $flags " in *" $1 "*) echo yes ;; *) echo no ;; esac; }
  echo "# machine: ${model:-unknown} (family ${family:-?} model ${cpu_model:-?}), $cpus cpus," \
       "avx512_bf16 $(has avx512_bf16), amx_bf16 $(has amx_bf16)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then machine_line; fi
