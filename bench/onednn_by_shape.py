#!/usr/bin/env python3
# bench/onednn_by_shape.py — where a step's oneDNN time goes: reads a program's output run
# with DNNL_VERBOSE=1 and sums the `onednn_verbose,exec` lines by primitive, kernel and
# shape (calls, total ms, GFLOP/s for matmuls), largest first.
#
#   DNNL_VERBOSE=1 build/bin/bench_step --model bert --amp bf16 --iters 1 --warmup 1 > v.txt
#   python3 bench/onednn_by_shape.py v.txt [--last-fraction 0.5] [--top 25]
#
# --last-fraction 0.5 keeps the last half of the exec lines: with one warm-up and one timed
# step of equal work, the timed step alone (the warm-up's lines include JIT and first-touch).
# Read before: bench/bench_step.cpp. Read next: docs/results/bf16.md.
import argparse
import collections
import sys


def gflops(problem, calls, ms):
    """2*M*N*K*batch per call for a matmul problem 'AxB:BxC:...' (batched when 3-d)."""
    try:
        a, b = problem.split(':')[:2]
        a = [int(v) for v in a.split('x')]
        b = [int(v) for v in b.split('x')]
        batch = a[0] if len(a) == 3 else 1
        return 2.0 * a[-2] * a[-1] * b[-1] * batch * calls / ms / 1e6
    except (ValueError, IndexError):
        return 0.0


def main():
    p = argparse.ArgumentParser(description='oneDNN exec time by primitive, kernel and shape (DNNL_VERBOSE=1 output)')
    p.add_argument('file')
    p.add_argument('--last-fraction', type=float, default=0.5)
    p.add_argument('--top', type=int, default=25)
    a = p.parse_args()
    if not 0.0 < a.last_fraction <= 1.0:
        sys.exit('onednn_by_shape: --last-fraction must be in (0, 1]')
    with open(a.file) as f:
        rows = [l.strip().split(',') for l in f if l.startswith(('onednn_verbose,exec', 'dnnl_verbose,exec'))]
    if not rows:
        sys.exit('onednn_by_shape: no exec lines in %s (run the program with DNNL_VERBOSE=1)' % a.file)
    rows = rows[int(len(rows) * (1.0 - a.last_fraction)):]
    sums = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        key = (r[3], r[4], r[-2], r[6][:70])  # primitive, kernel, problem, layouts
        sums[key][0] += 1
        sums[key][1] += float(r[-1])
    total = sum(v[1] for v in sums.values())
    print('%d exec lines, %.1f ms in oneDNN' % (len(rows), total))
    print('calls | ms | GFLOP/s | primitive | kernel | problem | layouts')
    for (prim, kernel, problem, layouts), (calls, ms) in sorted(sums.items(), key=lambda kv: -kv[1][1])[:a.top]:
        rate = gflops(problem, calls, ms) if prim == 'matmul' else 0.0
        print('%d | %.1f | %s | %s | %s | %s | %s' % (calls, ms, '%.0f' % rate if rate else '-', prim,
                                                      kernel, problem, layouts))


if __name__ == '__main__':
    main()
