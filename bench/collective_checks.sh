#!/bin/sh
# bench/collective_checks.sh — what the default checks cost (docs/results/collective_checks.md):
#   bench/collective_checks.sh allreduce   bench_allreduce at 10K floats a call over Gloo's TCP
#                                          (LOCKSTEP_SHM=0 unless set), checks on / off
#   bench/collective_checks.sh mpi         the same over MPI (mpirun -np 2)
#   bench/collective_checks.sh ddp         bench_ddp ResNet50 and BERT-base, 2 ranks: all checks on,
#                                          collective checks off, every check off
#   bench/collective_checks.sh defaults    bench_ddp, 2 ranks: the non-finite gradient check (WARN) and
#                                          the replica check at their defaults ("on"), both off
#                                          (LOCKSTEP_NONFINITE=off LOCKSTEP_REPLICA_CHECK_EVERY=0), and the
#                                          replica check every iteration ("every1": its cost per check);
#                                          MODELS (default "resnet50 bert") picks the models
#   bench/collective_checks.sh interleaved bench_overlap, 2 ranks: ddp beside ddp-nochecks (every default
#                                          check off) and ddp-nocollchecks (collective checks off) as
#                                          replicas in ONE process, one iteration of each per cycle, the
#                                          first rotating; prints ddp / each within a cycle (median and
#                                          quartiles over CYCLES, default 12). MODELS as above; MODES
#                                          (default ddp,ddp-nochecks,ddp-nocollchecks; BERT-base needs
#                                          ~1.5 GB per mode and rank); under bench/isolate.sh when root;
#                                          LOG=file appends every cycle's JSON line there
# ROUNDS (default 3) alternating rounds; BUILD (default build). Each timing run holds
# /work/.bench.lock when that file exists (the shared machine's benchmark lock).
# Read before: docs/results/collective_checks.md.
set -e
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
lock() { if [ -e /work/.bench.lock ]; then flock /work/.bench.lock "$@"; else "$@"; fi; }
bench/machine.sh | head -1
case "$1" in
  allreduce|mpi)
    for round in $(seq 1 "$ROUNDS"); do
      for c in 1 0; do
        printf 'round %s checks %s ' "$round" "$c"
        if [ "$1" = mpi ]; then
          lock mpirun --allow-run-as-root --oversubscribe -np 2 "$BUILD/bin/bench_allreduce" --backend mpi \
              --total 6000000 --sizes 10000 --iters 7 --collective-checks "$c" 2>&1 | grep '"per_call"' | head -1
        else
          lock env LOCKSTEP_SHM="${LOCKSTEP_SHM:-0}" "$BUILD/bin/lockstep-run" --nproc-per-node 2 -- "$BUILD/bin/bench_allreduce" \
              --total 6000000 --sizes 10000 --iters 7 --collective-checks "$c" 2>&1 | grep '"per_call"' | head -1
        fi
      done
    done ;;
  ddp)
    for round in $(seq 1 "$ROUNDS"); do
      for model in "resnet50 --batch 4" "bert --batch 2 --seq 128"; do
        for c in on coll-off all-off; do
          unset LOCKSTEP_COLLECTIVE_CHECKS LOCKSTEP_REPLICA_CHECK_EVERY LOCKSTEP_NONFINITE
          [ "$c" != on ] && export LOCKSTEP_COLLECTIVE_CHECKS=0
          [ "$c" = all-off ] && export LOCKSTEP_REPLICA_CHECK_EVERY=0 LOCKSTEP_NONFINITE=off
          printf 'round %s %s %s ' "$round" "${model%% *}" "$c"
          # shellcheck disable=SC2086
          lock "$BUILD/bin/lockstep-run" --nproc-per-node 2 -- "$BUILD/bin/bench_ddp" --model $model --iters 4 \
              --mode ddp 2>&1 | grep summary | grep -o '"iter_ms":[0-9.]*,"mean_iter_ms":[0-9.]*,"fwd_ms":[0-9.]*'
        done
      done
    done ;;
  defaults)
    for round in $(seq 1 "$ROUNDS"); do
      for name in ${MODELS:-resnet50 bert}; do
        model="resnet50 --batch 4"
        [ "$name" = bert ] && model="bert --batch 2 --seq 128"
        for c in on off every1; do
          unset LOCKSTEP_REPLICA_CHECK_EVERY LOCKSTEP_NONFINITE
          [ "$c" = off ] && export LOCKSTEP_REPLICA_CHECK_EVERY=0 LOCKSTEP_NONFINITE=off
          [ "$c" = every1 ] && export LOCKSTEP_REPLICA_CHECK_EVERY=1
          printf 'round %s %s %s ' "$round" "$name" "$c"
          # shellcheck disable=SC2086
          lock "$BUILD/bin/lockstep-run" --nproc-per-node 2 -- "$BUILD/bin/bench_ddp" --model $model --iters 4 \
              --mode ddp 2>&1 | grep summary | grep -o '"iter_ms":[0-9.]*,"mean_iter_ms":[0-9.]*,"fwd_ms":[0-9.]*'
        done
      done
    done ;;
  interleaved)
    isolate=""
    [ "$(id -u)" = 0 ] && isolate=bench/isolate.sh
    for name in ${MODELS:-resnet50 bert}; do
      model="resnet50 --batch 4"
      [ "$name" = bert ] && model="bert --batch 2 --seq 128"
      printf '%s LOCKSTEP_SHM=%s load %s: ' "$name" "${LOCKSTEP_SHM:-default}" "$(cut -d' ' -f1-3 /proc/loadavg)"
      # shellcheck disable=SC2086
      lock $isolate "$BUILD/bin/lockstep-run" --nproc-per-node 2 -- "$BUILD/bin/bench_overlap" --model $model \
          --cycles "${CYCLES:-12}" --modes "${MODES:-ddp,ddp-nochecks,ddp-nocollchecks}" 2>&1 |
          sed 's/^\[rank [0-9]*\] //' | tee -a "${LOG:-/dev/null}" | grep '"summary"'
    done ;;
  *) echo "usage: bench/collective_checks.sh allreduce|mpi|ddp|defaults|interleaved" >&2; exit 2 ;;
esac
