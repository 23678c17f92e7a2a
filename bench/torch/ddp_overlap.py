"""bench/torch/ddp_overlap.py — PyTorch's twin of bench_overlap: local, flat and ddp INTERLEAVED.

    $TORCH_PY bench/torch/ddp_overlap.py resnet50 --world 2 --batch 4 --cycles 8 [--amp bf16]

Each mode trains its own replica of the workload of bench/torch/models.py (the same seed), with
SGD lr 0.01 momentum 0.9 and a barrier before every iteration; a cycle runs one iteration of
every mode, starting one mode later each cycle, so a machine whose speed drifts slows every mode
alike. The modes are those of bench/torch/ddp.py: local (no communication), flat (one AllReduce
of every gradient concatenated, after backward) and ddp (DistributedDataParallel, bucket_cap_mb
--bucket-mb). Rank 0 prints one line per timed iteration, then a JSON summary with the same keys
as bench_overlap's: <mode>_ms (medians), <mode>_over_local (median over cycles of the ratio to
local's iteration in the same cycle) and hidden (median over cycles of (flat - ddp) / (flat - local)).
Read before: bench/torch/ddp.py, bench/bench_overlap.cpp. Read next: bench/compare_overlap.sh.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp import add_common_args, spawned  # noqa: E402
from models import workload  # noqa: E402

MODES = ["local", "flat", "ddp"]


def make_mode(name, a):
    model, x, loss_fn = workload(a.model, a.batch, a.image, a.seq, a.layers)
    if a.amp == "bf16" and a.model.startswith("resnet"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    net = DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb) if name == "ddp" else model
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def iteration():
        opt.zero_grad()
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if a.amp == "bf16" else contextlib.nullcontext()
        with amp:
            loss = loss_fn(net(x))
        loss.backward()
        if name == "flat":
            dist.all_reduce(torch.cat([q.grad.reshape(-1) for q in model.parameters() if q.grad is not None]))
        opt.step()
    return iteration


def train(rank, world, a):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    names = a.modes.split(",")
    modes = [(n, make_mode(n, a)) for n in names]
    times = {n: [] for n in names}
    for c in range(a.warmup + a.cycles):
        for k in range(len(modes)):
            name, iteration = modes[(c + k) % len(modes)]
            dist.barrier()
            start = time.perf_counter()
            iteration()
            ms = 1e3 * (time.perf_counter() - start)
            if rank == 0:
                print(json.dumps({"bench": "overlap_torch", "cycle": c - a.warmup, "warmup": c < a.warmup,
                                  "mode": name, "iter_ms": round(ms, 2)}), flush=True)
            if c >= a.warmup:
                times[name].append(ms)
    if rank == 0:
        s = {"bench": "overlap_torch", "summary": True, "model": a.model, "batch": a.batch, "world": world,
             "amp": a.amp, "cycles": a.cycles, "torch": torch.__version__}
        for n in names:
            s[n + "_ms"] = round(statistics.median(times[n]), 2)
        if "local" in times:
            for n in names:
                if n != "local":
                    s[n + "_over_local"] = round(statistics.median(
                        t / l for t, l in zip(times[n], times["local"])), 4)
            if "flat" in times and "ddp" in times:
                h = [(f - d) / (f - l) for f, d, l in zip(times["flat"], times["ddp"], times["local"]) if f > l]
                s["hidden"] = round(statistics.median(h), 4) if h else None
                s["hidden_cycles"] = len(h)
        print(json.dumps(s), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--modes", default="local,flat,ddp")
    p.add_argument("--cycles", type=int, default=8)
    p.add_argument("--warmup", type=int, default=1)
    args = p.parse_args()
    bad = [m for m in args.modes.split(",") if m not in MODES]
    if bad or len(set(args.modes.split(","))) != len(args.modes.split(",")):
        p.error(f"--modes: a comma-separated subset of {','.join(MODES)} without repeats, got '{args.modes}'")
    if args.cycles < 1 or args.warmup < 0:
        p.error("--cycles must be >= 1 and --warmup >= 0")
    mp.spawn(spawned, args=(train, args), nprocs=args.world)
