#!/usr/bin/env bash
# tests/examples/check_cli.sh BIN_DIR PROGRAM — one program's command line keeps
# the conventions of tools/cli.h (Note [Program command lines]): --help and
# --version exit 0, an unknown option and every bad value below exit 2 with a
# message naming the flag, and the launch environment (WORLD_SIZE=abc, no
# launcher) is refused the same way. CTest runs it once per program
# (tests/CMakeLists.txt). Nothing here trains for long: each bad input is
# refused before any work starts.
# Read before: tools/cli.h. Read next: tests/examples/check_resume_cli.sh.
set -uo pipefail
bin=$(cd "$1" && pwd)
prog="$2"
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run [VAR=VALUE ...] -- ARGS...: runs the program with ARGS (and the variables), leaving
# its exit status in rc and its output in out.
run() {
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  out=$(cd "$work" && env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u OMPI_COMM_WORLD_SIZE \
        -u OMPI_COMM_WORLD_RANK "${vars[@]}" timeout 120 "$bin/$prog" "$@" 2>&1)
  rc=$?
}

# check PRESENT STATUS TEXT [VAR=VALUE ...] -- ARGS...: runs the program, checks its exit
# status and that its output contains TEXT (PRESENT=1) or does not (PRESENT=0).
check() {
  local present="$1" want="$2" text="$3" out rc found=0 what="with"
  shift 3
  [ "$present" = 1 ] || what="without"
  run "$@"
  grep -qF -- "$text" <<<"$out" && found=1
  if [ "$rc" -ne "$want" ] || [ "$found" -ne "$present" ]; then
    echo "FAIL: $prog $* -> exit $rc (want $want, and output $what: $text); output:"
    echo "$out" | head -20
    failures=$((failures + 1))
  else
    echo "ok: $prog $* -> exit $rc, $([ "$present" = 1 ] && grep -F -m1 -- "$text" <<<"$out" || echo "without: $text")"
  fi
}
expect() { check 1 "$@"; }          # expect STATUS TEXT [VAR=VALUE ...] -- ARGS...
expect_without() { check 0 "$@"; }  # the same, TEXT absent

# Every program.
expect 0 "Usage: " -- --help
expect 0 "lockstep " -- --version
unknown="The following argument was not expected: --frobnicate"
required=()  # what the program needs before it looks at another option
[ "$prog" = lockstep-run ] && { unknown="unknown option '--frobnicate'"; required=(--nproc-per-node 1); }
[ "$prog" = bench_fashion_mnist_replay ] && required=(--dir .)
[ "$prog" = bench_custom_dataset_replay ] && required=(--dir . --dataset .)
expect 2 "$unknown" -- "${required[@]}" --frobnicate

case "$prog" in
  train_fashion_mnist)
    expect 2 "--batch: '3e1' is not a whole number" -- --batch 3e1
    expect 2 "--batch: 0 is out of range" -- --batch 0
    expect 2 "--log-every: 0 is out of range" -- --log-every 0
    expect 2 "--epochs: 'abc' is not a whole number" -- --epochs abc
    expect 2 "--lr: 'fast' is not a number" -- --lr fast
    expect 2 "--lr: 0 is out of range" -- --lr 0
    expect 2 "--schedule: 'linear' is not one of constant|cosine" -- --schedule linear
    expect 2 "--threads: 0 is out of range" -- --threads 0
    expect 2 "--resume: expected nothing or 'auto'" -- --resume sometimes
    expect 2 "--resume excludes --overwrite" -- --resume --overwrite
    expect 2 "WORLD_SIZE='abc' is not an integer" WORLD_SIZE=abc -- --epochs 1
    expect 2 "RANK='abc' is not an integer" WORLD_SIZE=2 RANK=abc -- --epochs 1
    expect 0 "--resume [auto]" -- --help
    expect 2 "--batch is given 2 times; give it once" -- --batch 5 --batch 6
    ;;
  train_ddp)
    expect 2 "--batch: 0 is out of range" -- --batch 0
    expect 2 "--epochs: 'abc' is not a whole number" -- --epochs abc
    expect 2 "--lr: 0 is out of range" -- --lr 0
    expect 2 "--resume excludes --overwrite" -- --resume --overwrite
    expect 2 "--resume: no checkpoint at nothing.safetensors" -- --resume --checkpoint nothing.safetensors
    expect 2 "WORLD_SIZE='abc' is not an integer" WORLD_SIZE=abc -- --epochs 1
    expect 2 "TORCHELASTIC_RESTART_COUNT" TORCHELASTIC_RESTART_COUNT=x -- --epochs 1
    expect 2 "LOCKSTEP_TEST_SIGKILL_AT='1:2' is not RANK:EPOCH:STEP" LOCKSTEP_TEST_SIGKILL_AT=1:2 -- --epochs 1
    expect 2 "--batch is given 2 times; give it once" -- --batch 5 --batch 6
    # WORLD_SIZE=1 is one process, but a malformed launch variable is refused all the same.
    expect 2 "RANK='abc' is not an integer" WORLD_SIZE=1 RANK=abc -- --epochs 1
    expect 2 "RANK=1 but WORLD_SIZE=1; the rank must be in [0, 1)" WORLD_SIZE=1 RANK=1 -- --epochs 1
    expect 2 "MASTER_PORT='abc' is not an integer" WORLD_SIZE=1 MASTER_PORT=abc -- --epochs 1
    expect 2 "LOCAL_RANK='x' is not an integer" WORLD_SIZE=1 RANK=0 LOCAL_RANK=x -- --epochs 1
    expect 2 "LOCKSTEP_TIMEOUT_S='soon' is not a positive number" WORLD_SIZE=1 LOCKSTEP_TIMEOUT_S=soon -- --epochs 1
    expect 2 "LOCKSTEP_TIMEOUT_S='1e16' is more than" WORLD_SIZE=1 LOCKSTEP_TIMEOUT_S=1e16 -- --epochs 1
    expect 0 "epoch 1 train_loss" -- --epochs 1 --checkpoint one.safetensors
    expect 2 "the checkpoint one.safetensors exists; pass --resume" -- --epochs 1 --checkpoint one.safetensors
    ;;
  train_demo)
    expect 2 "--steps: 'abc' is not a whole number" -- --steps abc
    expect 2 "--seed: -1 is out of range; expected an integer >= 0" -- --seed -1
    expect 0 "step    0" -- --steps 0
    ;;
  bench_allreduce)
    expect 2 "not started by a launcher" -- --iters 1
    expect 2 "--iters: 0 is out of range" -- --iters 0
    expect 2 "--sizes: 'abc' is not a whole number" -- --sizes 1000,abc
    expect 2 "--backend: 'nccl' is not one of gloo|mpi" -- --backend nccl
    expect 2 "WORLD_SIZE='abc' is not an integer" WORLD_SIZE=abc -- --iters 1
    expect 2 "RANK is not set" WORLD_SIZE=2 -- --iters 1
    # A rank whose rank 0 is not there says so after a few seconds, then fails at the timeout.
    expect 1 "waiting for rank 0 at 127.0.0.2:29581 (timeout 5 s)" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.2 \
      MASTER_PORT=29581 LOCKSTEP_TIMEOUT_S=5 -- --iters 1 --sizes 10 --total 10
    ;;
  bench_ddp)
    expect 2 "--bucket-mb: expected a number >= 0 or 'auto', got 'abc'" -- --bucket-mb abc
    expect 2 "--batch: '3e1' is not a whole number" -- --batch 3e1
    expect 2 "--mode: 'fast' is not one of local|ddp|no-overlap|flat" -- --mode fast
    expect 2 "--zero 2 reduces each gradient to its owner and frees the buckets" -- --zero 2 --bucket-view 1
    expect 2 "--sync-bn: expected 0 or 1, got 'yes'" -- --sync-bn yes
    expect 2 "--iters: 0 is out of range" -- --iters 0
    expect 2 "WORLD_SIZE='abc' is not an integer" WORLD_SIZE=abc -- --iters 1
    expect 2 "RANK=2 but WORLD_SIZE=2; the rank must be in [0, 2)" WORLD_SIZE=2 RANK=2 -- --iters 1
    expect 2 "--zero-defer tunes ZeroRedundancyOptimizer: it needs --zero 1 or 2" -- --zero-defer 0
    expect 2 "--zero-split-mb tunes ZeroRedundancyOptimizer: it needs --zero 1 or 2" -- --zero-split-mb 4
    ;;
  bench_overlap)
    expect 2 "--modes: 'fast' is not one of local,flat,no-overlap,ddp,ddp-view,ddp-copy" -- --modes local,fast
    expect 2 "--modes: 'ddp' is given twice" -- --modes ddp,ddp
    expect 2 "--cycles: 0 is out of range" -- --cycles 0
    expect 2 "--amp: 'fp8' is not one of off|bf16" -- --amp fp8
    expect 2 "WORLD_SIZE='abc' is not an integer" WORLD_SIZE=abc -- --cycles 1
    expect 2 "RANK=2 but WORLD_SIZE=2; the rank must be in [0, 2)" WORLD_SIZE=2 RANK=2 -- --cycles 1
    ;;
  bench_step)
    expect 2 "--batch: '3e1' is not a whole number" -- --batch 3e1
    expect 2 "--model: 'vgg' is not one of resnet50|resnet18|bert|bert-tiny|mlp-reversed" -- --model vgg
    expect 2 "--iters: 0 is out of range" -- --iters 0
    expect 2 "--image: 8 is out of range" -- --image 8
    expect 2 "--seq 1048576 exceeds bert-tiny's 64 positions" -- --model bert-tiny --seq 1048576
    ;;
  bench_grad_ready)
    expect 2 "--iters: 0 is out of range" -- --iters 0
    expect 2 "--layers: 'x' is not a whole number" -- --layers x
    ;;
  bench_gemm_best)
    expect 2 "--reps: 0 is out of range" -- --reps 0
    expect 2 "--model: 'foo' is not one of bert|resnet50|all" -- --model foo
    ;;
  bench_gemm)
    expect 2 "--reps: 0 is out of range" -- --reps 0
    # More threads than cores: a warning, and the program goes on.
    expect 0 "warning: --threads 1024 exceeds the" -- --threads 1024 --list-shapes
    expect 2 "--dtype: 'f16' is not one of f32|bf16" -- --dtype f16
    expect 2 "--backend eigen has no bf16 GEMM" -- --dtype bf16 --backend eigen
    # One small bf16 product on oneDNN runs and reports its dtype.
    expect 0 '"dtype":"bf16","backend":"onednn"' -- --dtype bf16 --backend onednn --shape square_128 --reps 1
    ;;
  bench_conv)
    expect 2 "--reps: 'abc' is not a whole number" -- --reps abc
    expect 2 "--layer: 'nosuch' is not one of" -- --layer nosuch
    ;;
  bench_batch_norm)
    expect 2 "--reps: 0 is out of range" -- --reps 0
    ;;
  bench_bn_pair)
    expect 2 "--reps: 0 is out of range" -- --reps 0
    expect 2 "--threads: 'two' is not a whole number" -- --threads two
    ;;
  bench_bn_pool)
    expect 2 "--reps: 0 is out of range" -- --reps 0
    expect 2 "--batch: 'eight' is not a whole number" -- --batch eight
    ;;
  bench_lstm_onednn)
    expect 2 "--hidden: 0 is out of range" -- --hidden 0
    expect 2 "--seq: 'x' is not a whole number" -- --seq x
    ;;
  bench_nosync_convergence)
    expect 2 "--sync-every: 'x' is not a whole number" -- --sync-every 1,x
    expect 2 "--lr: 0 is out of range" -- --lr 0
    expect 2 "--comm-hook: 'zip' is not one of" -- --comm-hook zip
    ;;
  bench_fashion_mnist_replay)
    expect 2 "--dir is required" -- --epochs 1
    expect 2 "--epochs: '1.5' is not a whole number" -- --dir . --epochs 1.5
    ;;
  bench_custom_dataset_replay)
    expect 2 "--dataset is required" -- --dir .
    expect 2 "--lr: 0 is out of range" -- --dir . --dataset . --lr 0
    expect 1 "cannot open the info file 'no-such-dir/order.txt'" -- --dir no-such-dir --dataset .
    ;;
  mnist)
    expect 2 "--epochs: 0 is out of range" -- --epochs 0
    expect 2 "--lr: 'fast' is not a number" -- --lr fast
    expect 1 "MNIST: directory 'no-such-dir' does not exist" -- --root no-such-dir
    ;;
  custom_dataset)
    expect 2 "--image-size: 32 is out of range" -- --image-size 32
    expect 1 "cannot open the info file 'no-such-info.txt'" -- --info no-such-info.txt
    ;;
  dcgan)
    expect 2 "--batch: 0 is out of range" -- --batch 0
    expect 1 "MNIST: directory 'no-such-dir' does not exist" -- --root no-such-dir
    ;;
  distributed)
    expect 2 "--sync: 'gossip' is not one of ddp|allreduce" -- --sync gossip
    expect 2 "WORLD_SIZE='abc' is not an integer" WORLD_SIZE=abc -- --epochs 1
    expect 1 "MNIST: directory 'no-such-dir' does not exist" -- --root no-such-dir
    ;;
  word_language_model)
    expect 2 "--model: 'RNN_TANH' is not one of LSTM|GRU" -- --model RNN_TANH
    expect 2 "--bptt: 0 is out of range" -- --bptt 0
    expect 2 "--dropout: 1.5 is out of range" -- --dropout 1.5
    expect 2 "--tied needs --nhid equal to --emsize, got 100 and 200" -- --tied --nhid 100
    expect 1 "Corpus: directory 'no-such-dir' does not exist" -- --data no-such-dir
    ;;
  autograd)
    expect 2 "--seed: -1 is out of range" -- --seed -1
    expect 2 "--seed: 'x' is not a whole number" -- --seed x
    # A library setting read at the first allocation: the run stops there (exit 1) naming it.
    expect 1 "LOCKSTEP_CPU_CACHE_MB='-5' is not an integer between 0 and 16777216" LOCKSTEP_CPU_CACHE_MB=-5 --
    # The profiler's switch, read as the program starts: on prints the table at exit, off
    # does not (it used to mean on), anything else is named and leaves it off.
    expect 0 "lockstep profiler:" LOCKSTEP_PROFILE=on --
    expect_without 0 "lockstep profiler:" LOCKSTEP_PROFILE=off --
    expect 0 "LOCKSTEP_PROFILE='maybe' is neither 1 / on / true nor 0 / off / false" LOCKSTEP_PROFILE=maybe --
    expect_without 0 "lockstep profiler:" LOCKSTEP_PROFILE=maybe --
    ;;
  lockstep-run)
    expect 2 "--nproc-per-node: 'two' is not a whole number" -- --nproc-per-node two -- true
    expect 2 "--nproc-per-node is required" -- -- true
    expect 2 "--master-port: 70000 is out of range" -- --nproc-per-node 1 --master-port 70000 -- true
    expect 0 "" -- --nproc-per-node 1 -- true
    ;;
  *)
    echo "check_cli.sh: no cases for program '$prog'"
    exit 1
    ;;
esac

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed for $prog"
  exit 1
fi
echo "$prog: every check passed"
