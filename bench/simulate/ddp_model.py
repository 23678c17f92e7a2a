# bench/simulate/ddp_model.py — the scaling model: one DDP iteration, replayed from measured
# gradient-ready times and a latency-bandwidth ring AllReduce cost.
#
# Inputs (measured by bench/simulate/validate.sh; docs/results/simulate.md):
#   Profile  bench_grad_ready's summary line: fwd/bwd/opt ms of one local iteration, every
#            parameter's bytes and ready_ms (time after loss.backward() at which its gradient
#            was accumulated), copy_gbps (memcpy rate of the bucket copies), buffer_bytes.
#   Comm     alpha_ms, beta_ms_per_mb of one ring step (comm_fit.py):
#              ring AllReduce of B bytes over N workers = 2(N-1) * (alpha + B/N * beta)
#              broadcast of B bytes                      = ceil(log2 N) * (alpha + B * beta)
#            (a binomial tree; the model's assumption, not a measurement).
#
# One synced iteration, as lockstep's DDP runs it (distributed/ddp/reducer.h):
#   forward   fwd_ms, plus the synced forward's collectives: the fingerprint exchange (one
#             AllReduce of a few bytes) and one broadcast per module buffer (broadcast_buffers);
#   backward  parameters become ready at ready_ms (compute time); each one's hook copies it
#             into its bucket (bytes / copy_gbps, on the compute thread, delaying later work);
#             buckets are built as compute_bucket_assignment builds them from the traced
#             order (Note [Bucket rebuild from the traced order]): parameters in ready order,
#             a bucket closes once it holds >= its cap (the first: min(first_bucket_mb,
#             bucket_cap_mb); 0 = one parameter a bucket); bucket j's AllReduce starts when
#             all its gradients are ready AND bucket j-1's AllReduce has finished
#             (Note [Bucket launch order]: one collective at a time, in index order);
#   finalize  after the last AllReduce, the averages are copied back into .grad
#             (total bytes / copy_gbps);
#   optimizer opt_ms.
#   iteration = forward + max(backward compute end, last AllReduce end) + copy-out + opt.
# A no_sync iteration is fwd_ms + bwd_ms (no collective, no hook copy, no optimizer step:
# bench_ddp steps only on the syncing iteration); with sync_every S the mean iteration is
# ((S-1) * no_sync + synced) / S.
#
# § Note [Simulated core sharing]
# On a GPU cluster the AllReduce runs beside
# the compute without slowing it. On this CPU machine both are CPU work on the same cores,
# so while an AllReduce overlaps backward compute each runs at 1/share of its speed
# (share = 1: no contention, the default; share = 2: the two halve a core between them).
# The simulation advances both activities event by event at those rates.
#
# Read before: distributed/ddp/bucket_assignment.h, distributed/ddp/reducer.h,
# bench/bench_grad_ready.cpp.
# Read next: bench/simulate/simulate.py.
import math

MB = 1024.0 * 1024.0


def ring_allreduce_ms(nbytes, world, comm):
    """2(N-1) ring steps of alpha + (B/N) * beta each; 0 on one worker."""
    if world <= 1:
        return 0.0
    return 2 * (world - 1) * (comm["alpha_ms"] + nbytes / world / MB * comm["beta_ms_per_mb"])


def broadcast_ms(nbytes, world, comm):
    """Binomial-tree broadcast: ceil(log2 N) steps of alpha + B * beta (assumed)."""
    if world <= 1:
        return 0.0
    return math.ceil(math.log2(world)) * (comm["alpha_ms"] + nbytes / MB * comm["beta_ms_per_mb"])


def ready_order(profile):
    """Parameter indices in the order their gradients became ready: the hooks' firing order
    (ready_seq) where the profile has it, else by ready_ms (ties: later registered first, as
    reverse registration order would have it); unused ones (ready_ms < 0) last, in reverse
    registration order (Note [Bucket rebuild from the traced order])."""
    ps = profile["params"]
    used = [i for i, p in enumerate(ps) if p["ready_ms"] >= 0]
    unused = [i for i, p in enumerate(ps) if p["ready_ms"] < 0]
    if all(ps[i].get("ready_seq", -1) >= 0 for i in used):
        used.sort(key=lambda i: ps[i]["ready_seq"])
    else:
        used.sort(key=lambda i: (ps[i]["ready_ms"], -i))
    return used + sorted(unused, reverse=True)


def assign_buckets(profile, bucket_cap_mb, first_bucket_mb):
    """compute_bucket_assignment (distributed/ddp/bucket_assignment.cpp) for one dtype/device:
    a list of buckets, each a list of parameter indices, in launch order."""
    if bucket_cap_mb < 0 or first_bucket_mb < 0:
        raise ValueError(f"bucket sizes must be >= 0, got bucket_cap_mb={bucket_cap_mb} "
                         f"first_bucket_mb={first_bucket_mb}")
    ps = profile["params"]
    buckets, cur, cur_bytes, first = [], [], 0, True
    for i in ready_order(profile):
        cur.append(i)
        cur_bytes += ps[i]["bytes"]
        limit = 0.0 if bucket_cap_mb == 0 else (min(first_bucket_mb, bucket_cap_mb) if first
                                                  else bucket_cap_mb)
        if cur_bytes >= limit * MB:
            buckets.append(cur)
            cur, cur_bytes, first = [], 0, False
    if cur:
        buckets.append(cur)
    return buckets


def _overlap(compute_events, comm_durations, comm_ready_at_event, share):
    """Runs backward compute and the serial AllReduce stream side by side.

    compute_events: compute-time lengths of consecutive compute segments (between hooks);
    comm_ready_at_event[k]: the buckets that become ready at the end of segment k;
    comm_durations[j]: bucket j's AllReduce time alone. While both run, each advances at
    1/share of its speed. Returns (wall end of compute, wall end of comm, launch/end times)."""
    t = 0.0
    seg, seg_left = 0, (compute_events[0] if compute_events else 0.0)
    ready = []        # buckets ready but not launched, in index order
    launched = 0      # next bucket index to launch
    active, comm_left = None, 0.0
    log = []
    n_buckets = len(comm_durations)
    compute_end = None
    while True:
        # Compute finishes segments of zero length at once (hooks firing back to back).
        while compute_end is None and seg_left <= 1e-12:
            ready.extend(comm_ready_at_event[seg])
            seg += 1
            if seg == len(compute_events):
                compute_end = t
                break
            seg_left = compute_events[seg]
        # Launch strictly in index order, one collective at a time.
        if active is None and launched < n_buckets and launched in ready:
            active, comm_left = launched, comm_durations[launched]
            log.append({"bucket": launched, "start_ms": t})
            launched += 1
            if comm_left <= 1e-12:
                log[-1]["end_ms"] = t
                active = None
                continue
        computing = compute_end is None
        if not computing and active is None:
            if launched == n_buckets:
                return compute_end, (log[-1]["end_ms"] if log else 0.0), log
            raise RuntimeError("simulate: a bucket never became ready (internal error)")
        rate = 1.0 / share if (computing and active is not None) else 1.0
        dt_c = seg_left / rate if computing else math.inf
        dt_m = comm_left / rate if active is not None else math.inf
        dt = min(dt_c, dt_m)
        t += dt
        if computing:
            seg_left -= dt * rate
        if active is not None:
            comm_left -= dt * rate
            if comm_left <= 1e-9:
                log[-1]["end_ms"] = t
                active = None


def simulate_iteration(profile, comm, world, bucket_cap_mb=25.0, first_bucket_mb=1.0,
                       share=1.0, sync=True):
    """One iteration's predicted times (ms) on `world` workers: dict with fwd_ms, bwd_ms
    (compute end), comm_end_ms, comm_wait_ms, opt_ms, iter_ms, buckets."""
    fwd, bwd, opt = profile["fwd_ms"], profile["bwd_ms"], profile["opt_ms"]
    if not sync:
        return {"fwd_ms": fwd, "bwd_ms": bwd, "comm_end_ms": 0.0, "comm_wait_ms": 0.0,
                "opt_ms": 0.0, "iter_ms": fwd + bwd, "buckets": 0}
    ps = profile["params"]
    copy_ms_per_byte = 1.0 / (profile["copy_gbps"] * 1e6)
    # Forward: fingerprint exchange + one broadcast per buffer.
    fwd_comm = 0.0
    if world > 1:
        fwd_comm = ring_allreduce_ms(8, world, comm)
        fwd_comm += sum(broadcast_ms(b, world, comm) for b in profile.get("buffer_bytes", []))
    buckets = assign_buckets(profile, bucket_cap_mb, first_bucket_mb)
    bucket_of = {i: j for j, b in enumerate(buckets) for i in b}
    pending = [len(b) for b in buckets]
    # Compute segments: the gap to each ready time, then that parameter's hook copy.
    order = ready_order(profile)
    segments, ready_after = [], []
    prev = 0.0
    for i in order:
        r = ps[i]["ready_ms"] if ps[i]["ready_ms"] >= 0 else bwd
        segments.append(max(0.0, r - prev))
        ready_after.append([])
        prev = max(prev, r)
        segments.append(ps[i]["bytes"] * copy_ms_per_byte)  # the hook's copy into the bucket
        j = bucket_of[i]
        pending[j] -= 1
        ready_after.append([j] if pending[j] == 0 else [])
    segments.append(max(0.0, bwd - prev))  # autograd's tail after the last hook
    ready_after.append([])
    durations = [ring_allreduce_ms(sum(ps[i]["bytes"] for i in b), world, comm) for b in buckets]
    compute_end, comm_end, _ = _overlap(segments, durations, ready_after, share)
    copy_out = sum(p["bytes"] for p in ps) * copy_ms_per_byte
    wait = max(0.0, comm_end - compute_end) + copy_out
    f = fwd + fwd_comm
    return {"fwd_ms": f, "bwd_ms": compute_end, "comm_end_ms": comm_end, "comm_wait_ms": wait,
            "opt_ms": opt, "iter_ms": f + compute_end + wait + opt, "buckets": len(buckets)}


def simulate_mean(profile, comm, world, bucket_cap_mb=25.0, first_bucket_mb=1.0, share=1.0,
                  sync_every=1):
    """Mean iteration ms over one cycle of sync_every iterations (S-1 no_sync, 1 synced)."""
    if sync_every < 1:
        raise ValueError(f"sync_every must be >= 1, got {sync_every}")
    synced = simulate_iteration(profile, comm, world, bucket_cap_mb, first_bucket_mb, share, True)
    if sync_every == 1:
        return dict(synced, mean_iter_ms=synced["iter_ms"])
    local = simulate_iteration(profile, comm, world, sync=False)
    mean = ((sync_every - 1) * local["iter_ms"] + synced["iter_ms"]) / sync_every
    return dict(synced, mean_iter_ms=mean)
