# bench/simulate/comm_fit.py — fits the ring AllReduce cost model to bench_allreduce output.
#
# Model (per call, N workers, B bytes): t = 2(N-1) * (alpha + B/N * beta), i.e. per world
# size a straight line t = a + b*B with alpha = a / (2(N-1)) and beta = b * N / (2(N-1)).
# bench_allreduce prints one JSON line per per-call size (ms_per_call of `calls` back-to-back
# asynchronous calls, median over its iterations). The fit is ANCHORED at the two ends, the
# classic alpha-beta measurement: per world size only its smallest size (latency-bound) and
# its largest (bandwidth-bound) enter, by least squares on relative residuals (exact for one
# world size). Loopback bandwidth is not constant in between (it drops past the caches), so
# a fit over every size lets the small sizes pull beta down and under-predicts the multi-MB
# buckets DDP sends by ~2x; anchoring keeps the large-size cost right and reports the
# middle's error as max_rel_err. Done once per world size and once pooled; several files
# (rounds) are pooled, a size measured in several rounds entering with its median.
#
#   python3 bench/simulate/comm_fit.py allreduce_w2.jsonl allreduce_w4.jsonl > comm.json
# Output: {"by_world": {"2": {"alpha_ms":..,"beta_ms_per_mb":..,"gbps":..,"max_rel_err":..}, ..},
#          "pooled": {...}, "points": [...]}  (gbps = 1 / beta: the per-link bandwidth).
#
# Read before: bench/bench_allreduce.cpp, bench/simulate/ddp_model.py.
# Read next: bench/simulate/simulate.py.
import json
import statistics
import sys

import numpy as np

MB = 1024.0 * 1024.0


def read_points(paths):
    """{(world, bytes): median ms_per_call} from bench_allreduce JSON lines (launcher
    prefixes such as "[rank 0] " are stripped; summary and non-JSON lines skipped)."""
    raw = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("[rank"):
                    line = line.split("] ", 1)[-1]
                if not line.startswith("{"):
                    continue
                d = json.loads(line)
                if d.get("summary") or d.get("bench") != "allreduce":
                    continue
                raw.setdefault((int(d["world"]), 4 * int(d["per_call"])), []).append(
                    float(d["ms_per_call"]))
    if not raw:
        raise SystemExit(f"comm_fit: no bench_allreduce lines in {paths}; run "
                         "build/bin/lockstep-run --nproc-per-node N -- build/bin/bench_allreduce")
    return {k: statistics.median(v) for k, v in raw.items()}


def fit(points):
    """alpha, beta from [(world, bytes, ms)]: relative least squares over each world size's
    smallest and largest size; max_rel_err over every point."""
    anchors = []
    for w in sorted({p[0] for p in points if p[0] >= 2}):
        ps = sorted(p for p in points if p[0] == w)
        anchors += [ps[0], ps[-1]] if len(ps) > 1 else ps
    rows, rhs = [], []
    for world, nbytes, ms in anchors:
        steps = 2.0 * (world - 1)
        rows.append([steps / ms, steps * nbytes / world / MB / ms])
        rhs.append(1.0)
    if len(rows) < 2:
        raise SystemExit("comm_fit: need at least two sizes at world >= 2 to fit alpha and beta")
    (alpha, beta), *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    alpha, beta = max(float(alpha), 0.0), max(float(beta), 1e-9)
    errs = []
    for world, nbytes, ms in points:
        pred = 2.0 * (world - 1) * (alpha + nbytes / world / MB * beta)
        errs.append(abs(pred - ms) / ms)
    return {"alpha_ms": alpha, "beta_ms_per_mb": beta, "gbps": MB / beta / 1e6,
            "max_rel_err": max(errs)}


def main(argv):
    if not argv:
        raise SystemExit("usage: comm_fit.py bench_allreduce.jsonl... > comm.json")
    pts = read_points(argv)
    worlds = sorted({w for w, _ in pts})
    out = {"by_world": {}, "points": []}
    for w in worlds:
        ps = [(w, b, ms) for (ww, b), ms in sorted(pts.items()) if ww == w]
        out["by_world"][str(w)] = fit(ps)
    allp = [(w, b, ms) for (w, b), ms in sorted(pts.items())]
    out["pooled"] = fit(allp)
    out["points"] = [{"world": w, "bytes": b, "ms_per_call": ms} for w, b, ms in allp]
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main(sys.argv[1:])
