#!/usr/bin/env bash
# bench/compare_gemm.sh — our GEMM backends vs OpenBLAS (through NumPy) and PyTorch's `@`.
#
# Runs bench_gemm and the same shapes (bench_gemm --list-shapes) in NumPy and
# PyTorch, alternating shape by shape (ours, then NumPy and PyTorch), ROUNDS
# times, then prints per shape the median GFLOP/s of each and the ratio
# ours/OpenBLAS, and the median ratio over shapes. Alternating this finely keeps
# the comparison fair when other work on the machine comes and goes.
# NumPy (Debian's python3-numpy) is linked against the generic libblas.so.3,
# which is the slow reference BLAS unless OpenBLAS is installed; the Python side
# therefore runs with OpenBLAS's directory first on LD_LIBRARY_PATH, and the
# script installs Debian's libopenblas0-pthread when it is missing. It checks
# which BLAS the Python process actually loaded and prints it.
# The torch column is the newest PyTorch from PyPI (the venv of bench/torch/venv.sh, whose
# wheel calls MKL, not OpenBLAS), timed by a second Python process beside Debian's NumPy;
# TORCH_PY=/usr/bin/python3 times Debian's PyTorch 1.13 (OpenBLAS) instead, as before 2026-12.
#
#   bench/compare_gemm.sh [THREADS]        (default 1)
#   env: BUILD=build (where bin/bench_gemm is), ROUNDS=3, REPS=10
#
# Read before: bench/bench_gemm.cpp. Read next: docs/results/gemm.md.
set -euo pipefail

THREADS=${1:-1}
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-10}
BENCH="$BUILD/bin/bench_gemm"
PY=/usr/bin/python3
OPENBLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-pthread
source "$(dirname "$0")/openblas_coretype.sh"  # OpenBLAS at its best kernels

[[ -x "$BENCH" ]] || { echo "compare_gemm: $BENCH not found; build it with cmake --build $BUILD --target bench_gemm" >&2; exit 1; }

# Installs Debian packages that are missing; runs apt-get update only if the first try fails.
ensure_packages() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  echo "compare_gemm: installing ${missing[*]}" >&2
  apt-get install -y "${missing[@]}" >&2 || { apt-get update >&2 && apt-get install -y "${missing[@]}" >&2; }
}
ensure_packages python3-numpy libopenblas0-pthread
source "$(dirname "$0")/torch/venv.sh"
torch_python  # sets TORCH_PY: the newest PyTorch from PyPI unless TORCH_PY is set

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BENCH" --list-shapes > "$work/shapes.jsonl"

# The Python side: times one shape with numpy.matmul or torch.matmul (LIBS), into a
# preallocated output (as bench_gemm does), median of REPS after two warm-ups.
cat > "$work/time_python.py" <<'EOF'
import json, statistics, sys, time
import numpy as np
shape_name, shapes_path, threads, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
libs = sys.argv[5].split(",")
if "torch" in libs:
    import torch
    torch.set_num_threads(threads)
blas = sorted({l.split()[-1] for l in open("/proc/self/maps")
               if any(w in l.lower() for w in ("blas", "mkl")) and ".so" in l})
rng = np.random.default_rng(42)
shapes = [json.loads(line) for line in open(shapes_path)]
for s, lib in [(s, lib) for s in shapes if s["shape"] == shape_name for lib in libs]:
    m, n, k, batch = s["m"], s["n"], s["k"], s["batch"]
    lead = (batch,) if batch > 1 else ()
    # Operands stored as bench_gemm stores them; a transposed one is a transposed view.
    a = rng.uniform(-1, 1, lead + ((k, m) if s["trans_a"] else (m, k))).astype(np.float32)
    b = rng.uniform(-1, 1, lead + ((n, k) if s["trans_b"] else (k, n))).astype(np.float32)
    if s["trans_a"]: a = np.swapaxes(a, -1, -2)
    if s["trans_b"]: b = np.swapaxes(b, -1, -2)
    c = np.empty(lead + (m, n), np.float32)
    if lib == "torch":
        a, b, c = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
        run = lambda: torch.matmul(a, b, out=c)
    else:
        run = lambda: np.matmul(a, b, out=c)
    run(); run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter(); run(); times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    print(json.dumps({"bench": "gemm", "shape": s["shape"], "m": m, "n": n, "k": k, "batch": batch,
                      "backend": "openblas" if lib == "numpy" else "torch", "threads": threads,
                      "reps": reps, "median_ms": ms, "gflops": 2.0 * m * n * k * batch / (ms * 1e6),
                      "blas_loaded": blas,
                      **({"torch_version": torch.__version__} if lib == "torch" else {})}))
EOF

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
shapes=$("$PY" -c 'import json, sys; print(" ".join(json.loads(l)["shape"] for l in sys.stdin))' < "$work/shapes.jsonl")
for round in $(seq 1 "$ROUNDS"); do
  echo "compare_gemm: round $round/$ROUNDS, $THREADS thread(s)" >&2
  for shape in $shapes; do
    "$BENCH" --threads "$THREADS" --backend onednn,eigen --reps "$REPS" --shape "$shape" \
      | grep -v '"summary"' >> "$work/results.jsonl"
    LD_LIBRARY_PATH="$OPENBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$PY" "$work/time_python.py" "$shape" "$work/shapes.jsonl" "$THREADS" "$REPS" numpy >> "$work/results.jsonl"
    "$TORCH_PY" "$work/time_python.py" "$shape" "$work/shapes.jsonl" "$THREADS" "$REPS" torch >> "$work/results.jsonl"
  done
done

# Medians over rounds, ratios to OpenBLAS, the summary line.
"$PY" - "$work/results.jsonl" "$THREADS" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
threads = int(sys.argv[2])
blas = {b for r in rows if r["backend"] == "openblas" for b in r.get("blas_loaded", [])}
print(f"# BLAS loaded by NumPy's process: {', '.join(sorted(blas)) or 'none found'}")
print(f"# torch: {', '.join(sorted({r['torch_version'] for r in rows if 'torch_version' in r}))}")
if not any("openblas" in b for b in blas):
    print("# WARNING: OpenBLAS was not loaded; the 'openblas' column is some other BLAS")
gflops = collections.defaultdict(list)
order = []
for r in rows:
    if r["shape"] not in order: order.append(r["shape"])
    gflops[(r["shape"], r["backend"])].append(r["gflops"])
med = {key: statistics.median(v) for key, v in gflops.items()}
impls = ["onednn", "eigen", "openblas", "torch"]
print(f"# GFLOP/s, float32, {threads} thread(s), median of rounds; ratio = ours / OpenBLAS (ob), "
      "and our best / torch")
print(f"{'shape':28s}" + "".join(f"{i:>10s}" for i in impls) +
      f"{'onednn/ob':>11s}{'eigen/ob':>10s}{'best/ob':>9s}{'best/torch':>11s}")
ratios = collections.defaultdict(list)
for shape in order:
    g = {i: med.get((shape, i), float("nan")) for i in impls}
    r = {"onednn": g["onednn"] / g["openblas"], "eigen": g["eigen"] / g["openblas"],
         "best": max(g["onednn"], g["eigen"]) / g["openblas"],
         "best_vs_torch": max(g["onednn"], g["eigen"]) / g["torch"]}
    for key, v in r.items(): ratios[key].append(v)
    print(f"{shape:28s}" + "".join(f"{g[i]:10.1f}" for i in impls) +
          f"{r['onednn']:11.2f}{r['eigen']:10.2f}{r['best']:9.2f}{r['best_vs_torch']:11.2f}")
summary = {"bench": "compare_gemm", "summary": True, "threads": threads,
           "median_ratio_to_openblas": {k: round(statistics.median(v), 3) for k, v in ratios.items()
                                        if k != "best_vs_torch"},
           "shapes_at_or_above_0.9": {k: sum(x >= 0.9 for x in v) for k, v in ratios.items()
                                      if k != "best_vs_torch"},
           "median_best_vs_torch": round(statistics.median(ratios["best_vs_torch"]), 3),
           "shapes_best_at_or_above_torch": sum(x >= 1.0 for x in ratios["best_vs_torch"]),
           "shapes": len(order)}
print(json.dumps(summary))
EOF
