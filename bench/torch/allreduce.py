"""bench/torch/allreduce.py — the paper's Figure 2 in PyTorch: the time to AllReduce a fixed
total number of float32 elements split into calls of a given size, over a Gloo group of
--world local processes (torch.multiprocessing.spawn, rendezvous on 127.0.0.1:--port).

    $TORCH_PY bench/torch/allreduce.py --world 2 --total 60000000 --sizes 10000,1000000 --async

For each size, rank 0 prints "world=W per_call=N calls=C total_s=S GB/s(algbw)=G": the calls
are issued back to back, all at once with async_op=True under --async (then waited in order),
or one blocking call after another without it. A barrier precedes every size.
Read before: bench/bench_allreduce.cpp. Read next: bench/compare_allreduce.sh, bench/figures/fig2.sh.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, a):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    for per_call in (int(s) for s in a.sizes.split(",")):
        calls = max(1, a.total // per_call)
        tensors = [torch.ones(per_call) for _ in range(calls)]
        dist.barrier()
        start = time.perf_counter()
        if a.async_:
            pending = [dist.all_reduce(t, async_op=True) for t in tensors]
            for work in pending:
                work.wait()
        else:
            for t in tensors:
                dist.all_reduce(t)
        seconds = time.perf_counter() - start
        if rank == 0:
            gbps = 4 * per_call * calls / seconds / 1e9
            print(f"world={a.world} per_call={per_call} calls={calls} total_s={seconds:.3f} "
                  f"GB/s(algbw)={gbps:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--total", type=int, default=60_000_000)
    p.add_argument("--sizes", default="1000,10000,100000,1000000,10000000,60000000")
    p.add_argument("--async", dest="async_", action="store_true")
    p.add_argument("--port", type=int, default=29544)
    args = p.parse_args()
    mp.spawn(rank_main, args=(args,), nprocs=args.world)
