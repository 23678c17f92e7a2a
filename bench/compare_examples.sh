#!/usr/bin/env bash
# bench/compare_examples.sh — the ports of pytorch/examples in examples/ trained beside PyTorch
# programs equivalent to them (bench/torch/), on the same data, seeds and hyper-parameters.
#
#   mnist    examples/mnist.cpp (cpp/mnist)  vs bench/torch/mnist.py, on Fashion-MNIST (Debian's
#            dataset-fashion-mnist, /usr/share/datasets/fashion-mnist, as
#            bench/compare_fashion_mnist.sh); compared: the last epoch's test accuracy.
#   word_lm  examples/word_language_model.cpp (word_language_model/main.py, LSTM) vs
#            bench/torch/word_language_model.py, on a synthetic corpus that
#            tools/make_word_corpus.py writes once per run (this machine cannot download
#            WikiText-2; CORPUS=DIR uses another corpus); compared: the best validation loss.
#   dcgan    examples/dcgan.cpp (cpp/dcgan) vs bench/torch/dcgan.py, on Fashion-MNIST, DCGAN_STEPS
#            steps each (no checkpoints, one loading thread); compared: whether the D and G loss
#            curves track each other (Note [DCGAN tracking] in bench/dcgan_tracking.py: the
#            curves smoothed over 25 steps, median relative difference, and the mean over the
#            last fifth (steps 401-500), each within 25 %, with PyTorch's seed r against seed r'
#            as calibration).
# Each example runs ROUNDS rounds, ALTERNATELY (the side that goes first swaps every round),
# round r with --seed r on both sides, one thread each (--threads 1 and OMP_NUM_THREADS=1).
# The two frameworks' initial weights and dropout masks come from different generators, so
# one seed of each is one draw from each distribution: the metrics are compared as medians
# over rounds. Time: each program prints the process CPU time of every epoch (training and
# the test / validation pass after it); a run's number is the mean over its epochs (dcgan: the
# CPU time of its DCGAN_STEPS steps), and the ratio ours / PyTorch is the median of the
# per-round ratios (below 1.0: we are faster).
# Prints every run, the medians, the targets of the examples (accuracy within 0.5 points,
# validation loss within 2 %, DCGAN's losses tracking, CPU time per epoch <= 0.8 x PyTorch's)
# and a JSON line each.
#
#   bench/compare_examples.sh [EXAMPLES] [ROUNDS]
#       EXAMPLES mnist,word_lm,dcgan (default all three), ROUNDS 3
#   env: BUILD=build, MNIST_EPOCHS=1, ROOT=/usr/share/datasets/fashion-mnist, DCGAN_STEPS=500,
#        LM_EPOCHS=3, LM_LINES=5000 (training lines of the synthetic corpus; valid and test
#        get a tenth each), LM_ARGS="" (more options for both LM programs, e.g. "--tied
#        --emsize 200"), CORPUS (a corpus directory instead of the synthetic one), TORCH_PY
# Both LM programs default to the original's hyper-parameters (emsize = nhid = 200, 2 layers,
# lr 20, clip 0.25, bptt 35, batch 20, dropout 0.2).
# Read before: bench/torch/mnist.py, bench/torch/word_language_model.py, bench/torch/dcgan.py.
# Read next: bench/dcgan_tracking.py, docs/results/examples.md.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/.."
examples=${1:-mnist,word_lm,dcgan} rounds=${2:-3}
build=${BUILD:-build} root=${ROOT:-/usr/share/datasets/fashion-mnist}
mnist_epochs=${MNIST_EPOCHS:-1} lm_epochs=${LM_EPOCHS:-3} lm_lines=${LM_LINES:-5000}
dcgan_steps=${DCGAN_STEPS:-500}
read -r -a lm_args <<<"${LM_ARGS:-}"
die() { echo "compare_examples: $*" >&2; exit 2; }
for v in rounds mnist_epochs lm_epochs lm_lines dcgan_steps; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
IFS=, read -r -a list <<<"$examples"
for e in "${list[@]}"; do
  case "$e" in
    mnist) bin=mnist ;;
    word_lm) bin=word_language_model ;;
    dcgan) bin=dcgan ;;
    *) die "EXAMPLES is a comma-separated list of mnist, word_lm and dcgan, got '$e'" ;;
  esac
  [[ -x $build/bin/$bin ]] || die "$build/bin/$bin not found; build it (cmake --build $build --target $bin)"
done
source "$HERE/openblas_coretype.sh"  # a PyTorch linked to OpenBLAS: its best kernels
source "$HERE/compare_setup.sh"
torch_side_setup 1

corpus=${CORPUS:-}
if [[ " ${list[*]} " == *" word_lm "* && -z $corpus ]]; then
  corpus=$out/corpus
  held_out=$(( lm_lines >= 10 ? lm_lines / 10 : 1 ))
  python3 tools/make_word_corpus.py "$corpus" --train-lines "$lm_lines" --valid-lines "$held_out" \
    --test-lines "$held_out"
fi

# One run: EXAMPLE SIDE ROUND; appends "EXAMPLE SIDE ROUND METRIC CPU_PER_EPOCH" to results.
run_one() {
  local example=$1 side=$2 round=$3 log=$out/$1_$2_$3.log
  case "$example/$side" in
    mnist/ours) "$build/bin/mnist" --root "$root" --epochs "$mnist_epochs" --seed "$round" --threads 1 \
                  --log-interval 1000000 >"$log" 2>&1 ;;
    mnist/pytorch) "$TORCH_PY" bench/torch/mnist.py --root "$root" --epochs "$mnist_epochs" --seed "$round" \
                     --threads 1 >"$log" 2>&1 ;;
    word_lm/ours) "$build/bin/word_language_model" --data "$corpus" --epochs "$lm_epochs" --seed "$round" \
                    --threads 1 --log-interval 1000000 --save "$out/lm.safetensors" "${lm_args[@]}" >"$log" 2>&1 ;;
    word_lm/pytorch) "$TORCH_PY" bench/torch/word_language_model.py --data "$corpus" --epochs "$lm_epochs" \
                       --seed "$round" --threads 1 "${lm_args[@]}" >"$log" 2>&1 ;;
    dcgan/ours) "$build/bin/dcgan" --root "$root" --out "$out" --epochs 100000 --steps "$dcgan_steps" \
                  --seed "$round" --threads 1 --workers 0 --log-interval 1 --checkpoint-every 1000000000 \
                  >"$log" 2>&1 ;;
    dcgan/pytorch) "$TORCH_PY" bench/torch/dcgan.py --root "$root" --epochs 100000 --steps "$dcgan_steps" \
                     --seed "$round" --threads 1 --log-interval 1 >"$log" 2>&1 ;;
  esac || { tail -n 20 "$log" >&2; die "$example ($side, round $round) failed"; }
  local metric cpu
  if [[ $example == dcgan ]]; then  # bench/dcgan_tracking.py reads the whole curves from $log
    metric=$(awk '/D_loss:/ {n++; d[n] = $(NF - 3); g[n] = $NF}  # the means over the last fifth
                  END {k = int(n / 5); for (i = n - k + 1; i <= n; ++i) {sd += d[i]; sg += g[i]}
                       if (k) printf "D %.4f G %.4f", sd / k, sg / k}' "$log")
    cpu=$(awk '$1 == "final" && $2 == "steps" {print $5}' "$log")
    [[ -n $metric && -n $cpu ]] || { cat "$log" >&2; die "dcgan ($side, round $round): no result lines"; }
    printf "%-8s round %s %-8s losses_last_fifth %s cpu_s/%s_steps %s\n" "$example" "$round" "$side" \
      "$metric" "$dcgan_steps" "$cpu"
    return
  fi
  if [[ $example == mnist ]]; then
    metric=$(awk '$1 == "epoch" && $3 == "test_accuracy" {v = $4} END {print v}' "$log")
  else
    metric=$(awk '$1 == "final" {print $3}' "$log")
  fi
  cpu=$(awk '$1 == "epoch" {for (i = 2; i < NF; ++i) if ($i == "cpu_seconds") {s += $(i + 1); n++}}
             END {if (n) printf "%.2f", s / n}' "$log")
  [[ -n $metric && -n $cpu ]] || { cat "$log" >&2; die "$example ($side, round $round): no result lines"; }
  echo "$example $side $round $metric $cpu" >>"$out/results.txt"
  printf "%-8s round %s %-8s %s %s cpu_s/epoch %s\n" "$example" "$round" "$side" \
    "$([[ $example == mnist ]] && echo test_accuracy || echo best_valid_loss)" "$metric" "$cpu"
}

echo "# compare_examples: $examples rounds=$rounds mnist_epochs=$mnist_epochs lm_epochs=$lm_epochs" \
     "dcgan_steps=$dcgan_steps lm_lines=$lm_lines lm_args='${LM_ARGS:-}' threads=1" \
     "torch=$("$TORCH_PY" -c 'import torch; print(torch.__version__)') load: $(cut -d' ' -f1-3 /proc/loadavg)"
machine_line
for e in "${list[@]}"; do
  for r in $(seq 1 "$rounds"); do
    if (( r % 2 )); then run_one "$e" ours "$r"; run_one "$e" pytorch "$r"
    else run_one "$e" pytorch "$r"; run_one "$e" ours "$r"; fi
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ " ${list[*]} " == *" dcgan "* ]]; then
  python3 bench/dcgan_tracking.py "$out" "$rounds" --late $((dcgan_steps * 4 / 5))  # the last fifth
fi
[[ -s $out/results.txt ]] || exit 0

"$TORCH_PY" - "$out/results.txt" <<'PYEOF'
import json, statistics, sys
runs = {}
for example, side, rnd, metric, cpu in (line.split() for line in open(sys.argv[1])):
    runs.setdefault(example, {}).setdefault(side, {})[int(rnd)] = (float(metric), float(cpu))
for example, sides in runs.items():
    ours, torch = sides["ours"], sides["pytorch"]
    med = lambda side, i: statistics.median(v[i] for v in side.values())
    ratio = statistics.median(ours[r][1] / torch[r][1] for r in ours)
    if example == "mnist":
        what, diff = "test_accuracy", round(100 * (med(ours, 0) - med(torch, 0)), 6)  # no float residue at 0.5
        met = abs(diff) <= 0.5
        gap = f"difference {diff:+.2f} points (target: within 0.5)"
    else:
        what, diff = "best_valid_loss", 100 * (med(ours, 0) / med(torch, 0) - 1)
        met = abs(diff) <= 2.0
        gap = f"difference {diff:+.2f} % (target: within 2 %)"
    print(f"# {example}: medians over {len(ours)} round(s)   ours   pytorch")
    print(f"{example:8s} {what:24s} {med(ours, 0):8.4f} {med(torch, 0):8.4f}   {gap}: "
          f"{'met' if met else 'missed'}")
    print(f"{example:8s} {'cpu_s/epoch':24s} {med(ours, 1):8.2f} {med(torch, 1):8.2f}   ours/pytorch "
          f"{ratio:.3f} (target: <= 0.8): {'met' if ratio <= 0.8 else 'missed'}")
    print(json.dumps({"bench": "compare_examples", "summary": True, "example": example,
                      "rounds": len(ours), "metric": what, "ours": med(ours, 0), "pytorch": med(torch, 0),
                      "difference": round(diff, 3), "ours_cpu_s": med(ours, 1),
                      "pytorch_cpu_s": med(torch, 1), "cpu_ratio": round(ratio, 3)}))
PYEOF
