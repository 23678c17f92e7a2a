#!/usr/bin/env bash
# bench/compare_custom_dataset_replay.sh [EPOCHS] — the custom_dataset port and its PyTorch twin
# trained from the same start (bench/compare_fashion_mnist_replay.sh's method, for
# examples/custom_dataset.cpp's AlexNet-style network): for each seed,
# bench/torch/custom_dataset_replay.py runs bench/torch/custom_dataset.py's training with
# --seed SEED and records its initial weights, its order of the images and its dropout masks;
# build/bin/bench_custom_dataset_replay trains lockstep from those. Both read the same shape
# images (tools/make_shape_images.py, SHAPES per class, written once).
# The calibration: PyTorch once more from its initial weights moved by about one float32
# rounding (--perturb 1e-7), same order and masks: how far rounding alone carries this training.
# Prints, per seed: whether every batch's input sum agrees (the data pipelines), the relative
# loss difference |x - PyTorch's| / PyTorch's of ours and of the calibration at a few steps and
# its maximum over steps 1-10, 1-50, 1-100, 1-200 and all, the largest relative difference of a
# parameter's gradient norm at steps 1, 2, 10, 50 and 100, and the three test accuracies per epoch.
# Identical computations differ by float rounding alone: about 1e-7 at first, growing as a ReLU
# or a max-pool's choice flips and training amplifies it, as the calibration's does.
#   SEEDS="1 2 3" LR=0.05 bench/compare_custom_dataset_replay.sh 1     (defaults: SEEDS=1, LR=0.05)
# Env: BUILD (default build), SHAPES="480 100", TORCH_PY. Results: docs/results/examples.md.
# Read before: bench/bench_custom_dataset_replay.cpp, bench/torch/custom_dataset_replay.py.
# Read next: bench/compare_examples_more.sh.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/.."
epochs=${1:-1} seeds=${SEEDS:-1} lr=${LR:-0.05} build=${BUILD:-build}
read -r shapes_train shapes_test <<<"${SHAPES:-480 100}"
die() { echo "compare_custom_dataset_replay: $*" >&2; exit 2; }
[[ -x $build/bin/bench_custom_dataset_replay ]] ||
  die "$build/bin/bench_custom_dataset_replay not found; cmake --build $build --target bench_custom_dataset_replay"
source "$HERE/openblas_coretype.sh"
source "$HERE/compare_setup.sh"
torch_side_setup 1
python3 tools/make_shape_images.py "$out/shapes" "$shapes_train" "$shapes_test" >/dev/null
for s in $seeds; do
  "$TORCH_PY" bench/torch/custom_dataset_replay.py "$s" "$out/$s" --dataset "$out/shapes" \
    --info "$out/shapes/info.txt" --epochs "$epochs" --lr "$lr" >"$out/torch_$s.log"
  "$TORCH_PY" bench/torch/custom_dataset_replay.py "$s" "$out/${s}_perturbed" --dataset "$out/shapes" \
    --info "$out/shapes/info.txt" --epochs "$epochs" --lr "$lr" --perturb 1e-7 >"$out/perturbed_$s.log"
  "$build/bin/bench_custom_dataset_replay" --dir "$out/$s" --dataset "$out/shapes" --epochs "$epochs" \
    --lr "$lr" --threads 1 >"$out/lockstep_$s.log"
done
echo "# compare_custom_dataset_replay: epochs=$epochs lr=$lr seeds='$seeds' shapes='$shapes_train $shapes_test'"
python3 - "$out" $seeds <<'PYEOF'
import sys
out, seeds = sys.argv[1], sys.argv[2:]

def parse(path):
    steps, grads, acc = {}, {}, {}
    for f in (line.split() for line in open(path)):
        if f[0] == "step":
            steps[int(f[1])] = (float(f[3]), float(f[5]))
        elif f[0] == "grad":
            grads[(int(f[1]), f[2])] = float(f[3])
        elif f[0] == "epoch":
            acc[int(f[1])] = float(f[3])
    return steps, grads, acc

rel = lambda a, b: abs(a - b) / max(abs(b), 1e-30)
for s in seeds:
    ours, torch, perturbed = (parse(f"{out}/{side}_{s}.log") for side in ("lockstep", "torch", "perturbed"))
    assert sorted(ours[0]) == sorted(torch[0]), f"seed {s}: the two runs made different numbers of steps"
    steps = sorted(torch[0])
    inputs = max(rel(ours[0][k][1], torch[0][k][1]) for k in steps)
    print(f"seed {s}: {len(steps)} steps; batch input sums: max relative difference {inputs:.2e}"
          f" ({'same data' if inputs < 1e-6 else 'DIFFERENT DATA'})")
    print("  relative difference to PyTorch of: lockstep (ours), PyTorch from weights moved by 1e-7 (calibration)")
    print(f"  {'step':>5} {'lockstep_loss':>14} {'pytorch_loss':>14} {'ours':>9} {'calib':>9}")
    loss_rel = lambda run, k: rel(run[0][k][0], torch[0][k][0])
    for k in (1, 2, 5, 10, 20, 50, 100, 150, 200, steps[-1]):
        if k in torch[0]:
            print(f"  {k:5d} {ours[0][k][0]:14.7g} {torch[0][k][0]:14.7g} {loss_rel(ours, k):9.2e} {loss_rel(perturbed, k):9.2e}")
    for last in (10, 50, 100, 200, steps[-1]):
        print(f"  max relative loss difference, steps 1-{last}: ours {max(loss_rel(ours, k) for k in steps if k <= last):.2e}"
              f"  calibration {max(loss_rel(perturbed, k) for k in steps if k <= last):.2e}")
    for step in sorted({k for (k, n) in torch[1]}):
        worst = lambda run: max(rel(run[1][(k, n)], torch[1][(k, n)]) for (k, n) in torch[1] if k == step)
        print(f"  step {step}: gradient norms, max relative difference over parameters: ours {worst(ours):.2e}"
              f"  calibration {worst(perturbed):.2e}")
    for e in sorted(torch[2]):
        print(f"  epoch {e} test_accuracy: lockstep {ours[2][e]:.4f} pytorch {torch[2][e]:.4f}"
              f" pytorch_perturbed {perturbed[2][e]:.4f}")
PYEOF
