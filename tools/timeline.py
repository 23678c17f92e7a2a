#!/usr/bin/env python3
"""tools/timeline.py — merge the ranks' LOCKSTEP_TIMELINE traces, summarise, draw.

    LOCKSTEP_TIMELINE=/tmp/t/trace.json build/bin/lockstep-run --nproc-per-node 2 -- \\
        build/bin/bench_ddp --model resnet18 --image 64 --iters 6
    /usr/bin/python3 tools/timeline.py /tmp/t/trace.rank*.json -o /tmp/t/merged.json \\
        --png docs/results/figures/timeline.png

Input: one Chrome-trace JSON per rank, as core/timeline.h writes them.
Output:
  -o FILE     one trace with every rank (pid = rank, process named "rank r"),
              for ui.perfetto.dev or chrome://tracing;
  --png FILE  per rank, a lane of compute (DDP forward, backward, optimizer
              step) and a lane per bucket's AllReduce span (matplotlib);
  stdout      per rank: the fraction of AllReduce time that ran while the
              backward pass was running ("overlapped fraction"), and the mean
              forward / backward / optimizer / AllReduce times per iteration.

Overlap ("overlapped fraction"): the union of the "allreduce bucket k" spans
intersected with the time the compute thread spent running backward nodes
(the spans nested in "autograd.backward": ConvBackward, AccumulateGrad with
DDP's hook, ...), divided by the union of the AllReduce spans. AllReduce time
while the compute thread waits at the end of backward (DDP's finalize) is not
overlapped; the second number printed ("within backward()") counts it too.
Timestamps: the monotonic clock, shared by the processes of one host; with
--align, each rank is shifted so that its first event is at 0 (for traces
from several hosts, whose clocks differ).

Read before: core/timeline.h, distributed/ddp/reducer_timeline.h.
"""
import argparse
import json
import sys

COMPUTE_SPANS = {"DDP.forward": "tab:blue", "autograd.backward": "tab:orange",
                 "optimizer.step": "tab:green"}


def load(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    rank = trace.get("otherData", {}).get("rank", -1) if isinstance(trace, dict) else -1
    if rank is None or rank < 0:
        pids = {e.get("pid") for e in events if e.get("ph") != "M"}
        rank = pids.pop() if len(pids) == 1 else 0
    return rank, events


def union(intervals):
    """Sorted, disjoint intervals covering the given (start, end) pairs."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(intervals):
    return sum(e - s for s, e in intervals)


def intersection_length(a, b):
    """Length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def allreduce_spans(events):
    """[(bucket, start, end)] from the async b/e pairs of category allreduce."""
    begins, spans = {}, []
    for e in events:
        if e.get("cat") != "allreduce":
            continue
        if e["ph"] == "b":
            begins[e["id"]] = e
        elif e["ph"] == "e" and e["id"] in begins:
            b = begins.pop(e["id"])
            spans.append((int(b.get("args", {}).get("bucket", 0)), b["ts"], e["ts"]))
    return spans


def compute_thread(events):
    counts = {}
    for e in events:
        if e.get("ph") == "X" and e["name"] == "autograd.backward":
            counts[e["tid"]] = counts.get(e["tid"], 0) + 1
    return max(counts, key=counts.get) if counts else None


def summarise(rank, events):
    tid = compute_thread(events)
    spans = {name: [(e["ts"], e["ts"] + e["dur"]) for e in events
                    if e.get("ph") == "X" and e["name"] == name and e["tid"] == tid]
             for name in COMPUTE_SPANS}
    comm = allreduce_spans(events)
    comm_union = union([(s, e) for _, s, e in comm])
    backward_union = union(spans["autograd.backward"])
    # Backward nodes: spans on the compute thread nested in a backward pass.
    nodes = union([(e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("ph") == "X" and e["tid"] == tid and e["name"] != "autograd.backward"
                   and any(s <= e["ts"] and e["ts"] + e["dur"] <= t for s, t in backward_union)])
    comm_ms = length(comm_union) / 1000.0
    overlap_ms = intersection_length(comm_union, nodes) / 1000.0
    within_ms = intersection_length(comm_union, backward_union) / 1000.0
    fraction = overlap_ms / comm_ms if comm_ms > 0 else 0.0
    iters = max(1, len(spans["autograd.backward"]))
    print(f"rank {rank} overlapped fraction: {fraction:.3f} "
          f"(AllReduce busy {comm_ms:.2f} ms, {overlap_ms:.2f} ms of it while backward nodes ran, "
          f"{within_ms:.2f} ms within backward(); {len(comm)} bucket AllReduces, "
          f"{len(spans['autograd.backward'])} backward passes)")
    means = ", ".join(f"{name} {length(v) / 1000.0 / max(1, len(v)):.2f} ms"
                      for name, v in spans.items() if v)
    print(f"rank {rank} per iteration: {means}, AllReduce busy {comm_ms / iters:.2f} ms")
    return spans, comm, fraction


def draw(path, ranks, t0):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    lanes = []  # (label, [(start, width)], color)
    for rank, (spans, comm, fraction) in sorted(ranks.items()):
        for name, color in COMPUTE_SPANS.items():
            if spans[name]:
                lanes.append((f"rank {rank} compute", [((s - t0) / 1e3, (e - s) / 1e3) for s, e in spans[name]],
                              color))
        for bucket in sorted({b for b, _, _ in comm}):
            bars = [((s - t0) / 1e3, (e - s) / 1e3) for b, s, e in comm if b == bucket]
            lanes.append((f"rank {rank} bucket {bucket}", bars, "tab:red"))
    labels = list(dict.fromkeys(label for label, _, _ in lanes))
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.32 * len(labels)))
    for label, bars, color in lanes:
        y = labels.index(label)
        ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=color, linewidth=0)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    title = ", ".join(f"rank {r}: {f:.0%} of AllReduce time overlapped with backward computation"
                      for r, (_, _, f) in sorted(ranks.items()))
    ax.set_title(title, fontsize=9)
    handles = [Patch(color=c, label=n) for n, c in COMPUTE_SPANS.items()]
    handles.append(Patch(color="tab:red", label="bucket AllReduce (launch to done)"))
    height = fig.get_size_inches()[1]
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=len(handles), frameon=False)
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1))
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", help="per-rank trace files (trace.rank0.json ...)")
    ap.add_argument("-o", "--output", help="merged Chrome-trace JSON")
    ap.add_argument("--png", help="summary figure")
    ap.add_argument("--align", action="store_true", help="shift each rank's first event to 0")
    args = ap.parse_args()

    per_rank = {}
    for path in args.traces:
        rank, events = load(path)
        if rank in per_rank:
            sys.exit(f"timeline.py: two traces for rank {rank} ({path}); pass each rank's file once")
        per_rank[rank] = [e for e in events if e.get("ph") != "M"]
    if args.align:
        for events in per_rank.values():
            first = min((e["ts"] for e in events), default=0.0)
            for e in events:
                e["ts"] -= first
    t0 = min((e["ts"] for events in per_rank.values() for e in events), default=0.0)

    summaries = {rank: summarise(rank, events) for rank, events in sorted(per_rank.items())}

    if args.output:
        merged = []
        for rank, events in sorted(per_rank.items()):
            merged.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                           "args": {"name": f"rank {rank}"}})
            for e in events:
                e = dict(e, pid=rank, ts=e["ts"] - t0)
                merged.append(e)
        with open(args.output, "w") as f:
            json.dump({"displayTimeUnit": "ms", "traceEvents": merged}, f)
        print(f"wrote {args.output} ({len(merged)} events, {len(per_rank)} ranks)")
    if args.png:
        draw(args.png, summaries, t0)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
