"""bench/torch/distributed_mnist.py — pytorch/examples' cpp/distributed (dist-mnist) in PyTorch,
to compare with its lockstep port examples/distributed.cpp (bench/compare_examples_more.sh):
the cpp/mnist network trained data-parallel by torch.nn.parallel.DistributedDataParallel over
Gloo, NPROC processes on this machine (127.0.0.1 only), started by torch.multiprocessing.spawn.

    $TORCH_PY bench/torch/distributed_mnist.py --epochs 1 [--seed 1] [--threads 1] [--nproc 2]

As the lockstep port: the network of bench/torch/mnist.py (the same as examples/mnist_net.h),
the same initial weights on every rank (torch.manual_seed(--seed) on each; DDP broadcasts rank
0's anyway), nll_loss, plain SGD lr 0.01 (no momentum: the original's), a total batch of 64
divided among the ranks, each rank reading its shard of a DistributedSampler(shuffle=True,
seed=--seed, drop_last=False) told the epoch 0, 1, ... (lockstep's loader does the same), the
last short batch kept, pixels / 255 normalised with mean 0.1307 and std 0.3081; rank 0 tests
the final model on the whole test set in one batch. The shard's batches are cut from the
in-memory tensor by index (no DataLoader, whose per-example collation would slow this side).
Each rank prints, after each epoch, "epoch E rank R train_accuracy A cpu_seconds C seconds S"
(time.process_time of the rank's training epoch, Gloo's threads included); rank 0 ends with
"final test_accuracy A test_loss L".
Read before: examples/distributed.cpp, bench/torch/mnist.py. Read next: bench/compare_examples_more.sh.
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import DEFAULT_ROOT, load  # noqa: E402
from mnist import Net  # noqa: E402


def worker(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.manual_seed(a.seed)  # the same initial weights and dropout masks on every rank
    x, y = load(a.root, "train")
    x = (x - 0.1307) / 0.3081
    sampler = DistributedSampler(range(len(x)), num_replicas=a.nproc, rank=rank, shuffle=True, seed=a.seed)
    per_rank = a.batch // a.nproc  # the effective batch size per process
    model = Net()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr)
    for epoch in range(1, a.epochs + 1):
        start, cpu_start = time.perf_counter(), time.process_time()
        sampler.set_epoch(epoch - 1)
        shard = torch.tensor(list(sampler))  # (num_samples,) this rank's indices, in order
        ddp.train()
        correct = 0
        for first in range(0, len(shard), per_rank):
            index = shard[first:first + per_rank]
            data, target = x[index], y[index]  # (b, 1, 28, 28), (b,)
            opt.zero_grad()
            prediction = ddp(data)
            F.nll_loss(prediction, target).backward()  # DDP averages the gradients during backward
            opt.step()
            correct += (prediction.argmax(1) == target).sum().item()
        print(f"epoch {epoch} rank {rank} train_accuracy {correct / len(shard):.4f} cpu_seconds "
              f"{time.process_time() - cpu_start:.2f} seconds {time.perf_counter() - start:.2f}", flush=True)
    if rank == 0:
        x_test, y_test = load(a.root, "t10k")
        x_test = (x_test - 0.1307) / 0.3081
        model.eval()
        with torch.no_grad():
            out = model(x_test)
            loss = F.nll_loss(out, y_test).item()
            accuracy = (out.argmax(1) == y_test).float().mean().item()
        print(f"final test_accuracy {accuracy:.4f} test_loss {loss:.4f}", flush=True)
    dist.barrier()  # rank 0 tests while the others wait
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=DEFAULT_ROOT)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="total batch size, divided among the ranks")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--nproc", type=int, default=2)
    a = p.parse_args()
    if a.batch < a.nproc:
        p.error(f"--batch {a.batch} is smaller than --nproc {a.nproc}; each rank needs at least one example")
    with socket.socket() as s:  # a free port on the loopback for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.nproc)


if __name__ == "__main__":
    main()
