"""bench/dcgan_tracking.py — whether lockstep's DCGAN (examples/dcgan.cpp) tracks PyTorch's
(bench/torch/dcgan.py): the loss curves of runs that bench/compare_examples.sh made, compared
step by step, with PyTorch against itself as the calibration, and the CPU time ratio.

    python3 bench/dcgan_tracking.py DIR ROUNDS [--window 25] [--late 400] [--tolerance 0.25]

DIR holds dcgan_ours_R.log and dcgan_pytorch_R.log for R = 1..ROUNDS, each run with
--log-interval 1 (a line "... D_loss: D | G_loss: G" per step) and ending with "final steps N
cpu_seconds C seconds S". Plain python3, no torch.

§ Note [DCGAN tracking]
Two GANs from different random generators never follow the same trajectory step by step, and a
GAN's own seed-to-seed spread is large, so "tracking" compares curves, not values, against a
tolerance that PyTorch meets against itself:
- each run's per-step losses D(t) and G(t), t = 1..N, are smoothed by a trailing mean over
  --window steps (25): S(t) for t = window..N;
- for a pair of runs (a, b): for each of D and G, "rel" = the median over t of |S_a(t) - S_b(t)|
  / |S_b(t)|, and "late" = |mean of a's raw losses over steps late+1..N - b's| / b's (steps
  401-500 of 500);
- ours vs PyTorch pairs round r of each (the same seed number r, a different draw each side);
  the four numbers are medians over the rounds; the calibration pairs PyTorch's runs of
  different seeds (every r < r'), and ours likewise, with the same medians;
- tracking is met when all four ours-vs-PyTorch medians are within --tolerance (0.25). The
  tolerance is meaningful only if PyTorch against itself also stays within it: the script
  prints that calibration beside the result and says so when it does not.
CPU time: each run's process CPU time of its N steps; the ratio is the median of the per-round
ratios ours / PyTorch (target <= 0.8).
Read before: bench/compare_examples.sh. Read next: docs/results/examples.md.
"""
import argparse
import itertools
import json
import re
import statistics
import sys

STEP = re.compile(r"D_loss: (\S+) \| G_loss: (\S+)$")


def read_run(path):
    """-> (d_losses, g_losses, cpu_seconds) of one log."""
    d, g, cpu = [], [], None
    with open(path) as f:
        for line in f:
            m = STEP.search(line.rstrip())
            if m:
                d.append(float(m.group(1)))
                g.append(float(m.group(2)))
            elif line.startswith("final steps "):
                cpu = float(line.split()[4])
    if cpu is None or not d:
        sys.exit(f"dcgan_tracking: {path} has no per-step losses or no final line; run with --log-interval 1")
    return d, g, cpu


def smooth(xs, window):
    """Trailing means over `window` values: len(xs) - window + 1 of them."""
    out, total = [], sum(xs[:window])
    out.append(total / window)
    for i in range(window, len(xs)):
        total += xs[i] - xs[i - window]
        out.append(total / window)
    return out


def compare(a, b, window, late):
    """Runs a and b (d, g, cpu) -> {D_rel, G_rel, D_late, G_late} relative to b."""
    out = {}
    for name, i in (("D", 0), ("G", 1)):
        sa, sb = smooth(a[i], window), smooth(b[i], window)
        out[name + "_rel"] = statistics.median(abs(x - y) / abs(y) for x, y in zip(sa, sb))
        ma, mb = statistics.fmean(a[i][late:]), statistics.fmean(b[i][late:])
        out[name + "_late"] = abs(ma - mb) / abs(mb)
    return out


def medians(pairs):
    return {k: statistics.median(p[k] for p in pairs) for k in pairs[0]} if pairs else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("rounds", type=int)
    p.add_argument("--window", type=int, default=25)
    p.add_argument("--late", type=int, default=400)
    p.add_argument("--tolerance", type=float, default=0.25)
    a = p.parse_args()
    rounds = range(1, a.rounds + 1)
    runs = {side: {r: read_run(f"{a.dir}/dcgan_{side}_{r}.log") for r in rounds} for side in ("ours", "pytorch")}
    steps = {len(run[0]) for side in runs.values() for run in side.values()}
    if len(steps) != 1:
        sys.exit(f"dcgan_tracking: the runs logged different numbers of steps: {sorted(steps)}")
    n = steps.pop()
    if not a.window <= n or not 0 <= a.late < n:
        sys.exit(f"dcgan_tracking: {n} steps are too few for --window {a.window} and --late {a.late}")
    ours, torch = runs["ours"], runs["pytorch"]
    result = medians([compare(ours[r], torch[r], a.window, a.late) for r in rounds])
    calib = medians([compare(torch[r], torch[s], a.window, a.late) for r, s in itertools.combinations(rounds, 2)])
    ours_self = medians([compare(ours[r], ours[s], a.window, a.late) for r, s in itertools.combinations(rounds, 2)])

    print(f"# dcgan: {n} steps, losses smoothed over {a.window} steps, late mean over steps "
          f"{a.late + 1}-{n}; relative differences, medians over {a.rounds} round(s)")
    print(f"{'dcgan':8s} {'pair':34s} {'D rel':>7s} {'G rel':>7s} {'D late':>7s} {'G late':>7s}")
    for what, m in (("ours vs pytorch (seed r vs r)", result), ("pytorch vs pytorch (seed r vs r')", calib),
                    ("ours vs ours (seed r vs r')", ours_self)):
        values = " ".join(f"{m[k]:7.3f}" for k in ("D_rel", "G_rel", "D_late", "G_late")) if m else "    n/a (one round)"
        print(f"{'dcgan':8s} {what:34s} {values}")
    tracks = max(result.values()) <= a.tolerance
    print(f"{'dcgan':8s} tracking (all four <= {a.tolerance}): {'met' if tracks else 'missed'}"
          f" (largest {max(result.values()):.3f})")
    if calib and max(calib.values()) > a.tolerance:
        print(f"{'dcgan':8s} note: PyTorch against itself exceeds the tolerance ({max(calib.values()):.3f}); "
              f"the tolerance is tighter than a GAN's seed-to-seed spread")
    cpu = {side: statistics.median(run[2] for run in runs[side].values()) for side in runs}
    ratio = statistics.median(ours[r][2] / torch[r][2] for r in rounds)
    print(f"{'dcgan':8s} cpu_s/{n} steps {cpu['ours']:8.2f} {cpu['pytorch']:8.2f}   ours/pytorch {ratio:.3f} "
          f"(target: <= 0.8): {'met' if ratio <= 0.8 else 'missed'}")
    rounded = lambda m: {k: round(v, 4) for k, v in m.items()} if m else None
    print(json.dumps({"bench": "compare_examples", "summary": True, "example": "dcgan", "rounds": a.rounds,
                      "steps": n, "window": a.window, "late_from": a.late + 1, "tolerance": a.tolerance,
                      "ours_vs_pytorch": rounded(result), "pytorch_vs_pytorch": rounded(calib),
                      "ours_vs_ours": rounded(ours_self), "tracking": tracks, "ours_cpu_s": cpu["ours"],
                      "pytorch_cpu_s": cpu["pytorch"], "cpu_ratio": round(ratio, 3)}))


if __name__ == "__main__":
    main()
