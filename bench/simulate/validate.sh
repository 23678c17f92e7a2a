#!/usr/bin/env bash
# bench/simulate/validate.sh — measures the scaling model's inputs, checks its predictions
# against bench_ddp at 1, 2 and 4 ranks on this machine, then runs the 1-256 worker sweep.
#
# Each round, alternating (the machine is shared, so every input is measured under the
# same load as the runs it predicts):
#   inputs   for N in WORLDS: N concurrent copies of bench_grad_ready (compute under the
#            same N-way core sharing as N ranks; the copy with the median bwd_ms is kept),
#            and bench_allreduce at N ranks (N >= 2), fitted by comm_fit.py;
#   measured bench_ddp --mode ddp at N ranks for every bucket size in BUCKETS (sync every
#            1), and at the largest N with --sync-every SYNC_CHECK;
# then simulate.py predicts each run from that round's inputs with --share SHARE at N >= 2
# (Note [Simulated core sharing]: the AllReduce and the compute halve the cores they share).
# The table (median over rounds of measured and of predicted ms, relative error, load) is
# printed and written to OUT/simulate_validation.csv; sync-every rows compare mean_iter_ms.
# Finally the sweep (simulate.py sweep) runs on the world-1 profiles of every model and the
# comm fit at world 2 pooled over rounds (one rank per core: the nearest this machine gets
# to one worker per host), writing OUT/simulate_sweep.csv and OUT/simulate_fig*.png.
#
#   bench/simulate/validate.sh     (~35 min on 2 busy cores)
#       env: BUILD=build OUT=docs/results/figures ROUNDS=3 ITERS=5
#       WORLDS="1 2 4" BUCKETS="0 1 25 200" SYNC_CHECK=4 SHARE=2
#       MODELS="--model resnet18 --image 64 --batch 4;--model bert --layers 2 --seq 32 --batch 2"
#       SWEEP_ONLY=1 (skip the measurements; sweep from OUT/simulate_inputs)
# Needs: cmake --build $BUILD --target bench_ddp bench_grad_ready bench_allreduce lockstep-run
#
# Read before: bench/simulate/simulate.py, bench/figures/common.sh.
# Read next: docs/results/simulate.md.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
[[ "$BUILD" = /* ]] || BUILD="$REPO/$BUILD"
OUT=${OUT:-$REPO/docs/results/figures}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-5}
WORLDS=${WORLDS:-1 2 4}
BUCKETS=${BUCKETS:-0 1 25 200}
SYNC_CHECK=${SYNC_CHECK:-4}
SHARE=${SHARE:-2}
PY=${PY:-/usr/bin/python3}
MODELS=${MODELS:-"--model resnet18 --image 64 --batch 4;--model bert --layers 2 --seq 32 --batch 2"}
IFS=';' read -ra MODEL_LIST <<< "$MODELS"
INPUTS="$OUT/simulate_inputs"
export OMP_NUM_THREADS=1
mkdir -p "$INPUTS"

for b in bench_ddp bench_grad_ready bench_allreduce lockstep-run; do
  [[ -x "$BUILD/bin/$b" ]] || {
    echo "validate: $BUILD/bin/$b not found; build it: cmake --build $BUILD --target" \
      "bench_ddp bench_grad_ready bench_allreduce lockstep-run" >&2
    exit 1
  }
done

port=$((20000 + RANDOM % 10000))
next_port() { port=$((port + 3)); ((port < 32000)) || port=$((20000 + RANDOM % 1000)); }
load1() { cut -d' ' -f1 /proc/loadavg; }

# N concurrent bench_grad_ready; keeps the output whose bwd_ms is the median.
grad_ready() {  # FILE N model-flags...
  local file=$1 n=$2
  shift 2
  local tmp k
  tmp=$(mktemp -d)
  for k in $(seq 1 "$n"); do
    "$BUILD/bin/bench_grad_ready" "$@" --iters "$ITERS" > "$tmp/$k.jsonl" &
  done
  wait
  "$PY" - "$tmp" "$file" <<'PYEOF'
import glob, json, shutil, sys
runs = []
for path in glob.glob(sys.argv[1] + "/*.jsonl"):
    last = [l for l in open(path) if '"summary":true' in l]
    if not last:
        raise SystemExit(f"validate: {path}: bench_grad_ready printed no summary")
    runs.append((json.loads(last[-1])["bwd_ms"], path))
runs.sort()
shutil.copy(runs[len(runs) // 2][1], sys.argv[2])
PYEOF
  rm -rf "$tmp"
}

allreduce() {  # FILE N
  next_port
  "$BUILD/bin/lockstep-run" --nproc-per-node "$2" --master-port "$port" -- \
    "$BUILD/bin/bench_allreduce" --total 2000000 --sizes 2000,20000,200000,2000000 --iters 3 \
    | sed -n 's/^\[rank 0\] //p' > "$1"
}

ddp() {  # TAGS N flags...  (appends {TAGS, load, summary} to $INPUTS/measured.jsonl)
  local tags=$1 n=$2
  shift 2
  local line
  if [[ "$n" == 1 ]]; then
    line=$("$BUILD/bin/bench_ddp" "$@" | grep '"summary":true' | tail -1)
  else
    next_port
    line=$("$BUILD/bin/lockstep-run" --nproc-per-node "$n" --master-port "$port" -- \
      "$BUILD/bin/bench_ddp" "$@" | grep '"summary":true' | sed 's/^\[rank 0\] //' | tail -1)
  fi
  [[ -n "$line" ]] || { echo "validate: bench_ddp $* gave no summary" >&2; exit 1; }
  echo "{${tags},\"load\":$(load1),${line#\{}" >> "$INPUTS/measured.jsonl"
  echo "  world $n $*: $(echo "$line" | grep -o '"iter_ms":[0-9.]*,"mean_iter_ms":[0-9.]*')" >&2
}

if [[ "${SWEEP_ONLY:-0}" != 1 ]]; then
  rm -f "$INPUTS"/*.jsonl
  echo "validate: load $(load1) on $(getconf _NPROCESSORS_ONLN) cores; writing $INPUTS" >&2
  for round in $(seq 1 "$ROUNDS"); do
    for m in "${!MODEL_LIST[@]}"; do
      model=${MODEL_LIST[$m]}
      for n in $WORLDS; do
        echo "validate: round $round/$ROUNDS model $m world $n (load $(load1))" >&2
        # shellcheck disable=SC2086
        grad_ready "$INPUTS/grad_ready_m${m}_w${n}_r${round}.jsonl" "$n" $model
        [[ "$n" == 1 ]] || allreduce "$INPUTS/allreduce_w${n}_r${round}_m${m}.jsonl" "$n"
        for mb in $BUCKETS; do
          # shellcheck disable=SC2086
          ddp "\"round\":$round,\"m\":$m" "$n" $model --iters "$ITERS" --mode ddp --bucket-mb "$mb"
        done
      done
      nmax=${WORLDS##* }
      # shellcheck disable=SC2086
      ddp "\"round\":$round,\"m\":$m" "$nmax" $model --iters $((ITERS / SYNC_CHECK * SYNC_CHECK + SYNC_CHECK)) \
        --mode ddp --bucket-mb 25 --sync-every "$SYNC_CHECK"
    done
  done
fi

"$PY" - "$INPUTS" "$OUT" "$SHARE" "$HERE" <<'PYEOF'
import csv, glob, json, os, re, statistics, subprocess, sys
inputs, out, share, here = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
sys.path.insert(0, here)
import comm_fit, ddp_model, simulate

def comm_for(world, rnd, m):
    if world == 1:
        return {"alpha_ms": 0.0, "beta_ms_per_mb": 0.0}
    pts = comm_fit.read_points(glob.glob(f"{inputs}/allreduce_w{world}_r{rnd}_m{m}.jsonl"))
    return comm_fit.fit([(w, b, ms) for (w, b), ms in pts.items()])

rows = {}
for line in open(f"{inputs}/measured.jsonl"):
    d = json.loads(line)
    w, r, m = d["world"], d["round"], d["m"]
    prof = simulate.load_profile(f"{inputs}/grad_ready_m{m}_w{w}_r{r}.jsonl")
    comm = comm_for(w, r, m)
    s = share if w > 1 else 1.0
    pred = ddp_model.simulate_mean(prof, comm, w, d["bucket_mb"], d["first_bucket_mb"], s,
                                   d["sync_every"])
    pred1 = ddp_model.simulate_mean(prof, comm, w, d["bucket_mb"], d["first_bucket_mb"], 1.0,
                                    d["sync_every"])
    key = (d["model"], m, w, d["bucket_mb"], d["sync_every"])
    meas = d["mean_iter_ms"] if d["sync_every"] > 1 else d["iter_ms"]
    e = rows.setdefault(key, {"meas": [], "pred": [], "pred1": [], "load": []})
    e["meas"].append(meas); e["pred"].append(pred["mean_iter_ms"])
    e["pred1"].append(pred1["mean_iter_ms"]); e["load"].append(d["load"])

med = statistics.median
table = []
for (model, m, w, mb, s), e in sorted(rows.items()):
    me, pr, p1 = med(e["meas"]), med(e["pred"]), med(e["pred1"])
    table.append({"model": model, "world": w, "bucket_mb": mb, "sync_every": s,
                  "rounds": len(e["meas"]), "measured_ms": round(me, 1),
                  "predicted_ms": round(pr, 1), "rel_err": round((pr - me) / me, 3),
                  "predicted_share1_ms": round(p1, 1), "rel_err_share1": round((p1 - me) / me, 3),
                  "load_min": min(e["load"]), "load_max": max(e["load"])})
with open(f"{out}/simulate_validation.csv", "w", newline="") as f:
    wr = csv.DictWriter(f, fieldnames=list(table[0]))
    wr.writeheader(); wr.writerows(table)
print(f"{'model':>9} {'N':>2} {'MB':>4} {'S':>2} {'measured':>9} {'predicted':>9} {'err':>7}"
      f" {'share=1':>8} {'err':>7} {'load':>10}")
for t in table:
    print(f"{t['model']:>9} {t['world']:>2} {t['bucket_mb']:>4g} {t['sync_every']:>2} "
          f"{t['measured_ms']:>9.1f} {t['predicted_ms']:>9.1f} {t['rel_err']:>+7.1%} "
          f"{t['predicted_share1_ms']:>8.1f} {t['rel_err_share1']:>+7.1%} "
          f"{t['load_min']:>4.1f}-{t['load_max']:<4.1f}")
errs = [abs(t["rel_err"]) for t in table]
print(f"median |error| {med(errs):.1%}, max {max(errs):.1%} over {len(table)} configurations")

# Sweep inputs: the world-1 profile (median bwd over rounds) per model; comm at world 2.
profiles = []
for m in sorted({k[1] for k in rows}):
    cands = []
    for p in glob.glob(f"{inputs}/grad_ready_m{m}_w1_r*.jsonl"):
        cands.append((simulate.load_profile(p)["bwd_ms"], p))
    cands.sort()
    profiles.append(cands[len(cands) // 2][1])
ar2 = glob.glob(f"{inputs}/allreduce_w2_r*.jsonl")
with open(f"{inputs}/comm.json", "w") as f:
    subprocess.run([sys.executable, f"{here}/comm_fit.py"] + ar2, stdout=f, check=True)
args = [sys.executable, f"{here}/simulate.py", "sweep", "--comm", f"{inputs}/comm.json",
        "--comm-world", "pooled", "--out", out]
for p in profiles:
    args += ["--profile", p]
subprocess.run(args, check=True)
print("sweep inputs:", " ".join(os.path.basename(p) for p in profiles), "+ comm.json")
PYEOF
