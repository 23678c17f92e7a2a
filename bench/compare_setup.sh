# bench/compare_setup.sh — sourced by bench/compare_ddp.sh and bench/compare_overlap.sh (and, for
# torch_side_setup alone, bench/compare_examples*.sh): the checks and set-up they make before
# they alternate lockstep with PyTorch.
#
#   compare_setup NAME PROGRAM VAR...
# defines die() (a message prefixed with NAME, exit 2); refuses a MODEL other than resnet50,
# resnet18, bert or bert-tiny (the models both sides build), an AMP other than off or bf16,
# and any VAR (a variable's name) that is not a positive integer; needs $build/bin/PROGRAM and
# lockstep-run; finds PyTorch's Python (bench/torch/venv.sh) and the machine line
# (bench/machine.sh); makes $out, a temporary directory removed at exit; exports the thread
# counts of $threads. Expects HERE (bench/), model, amp, build and threads set.
# Read before: bench/compare_ddp.sh. Read next: bench/compare_overlap.sh.
compare_setup() {
  local name=$1 program=$2 v b
  shift 2
  eval "die() { echo \"$name: \$*\" >&2; exit 2; }"
  [[ $model =~ ^(resnet50|resnet18|bert|bert-tiny)$ ]] || die "MODEL must be resnet50, resnet18, bert or bert-tiny, got '$model'"
  for v in "$@"; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
  done
  [[ $amp == off || $amp == bf16 ]] || die "AMP must be off or bf16, got '$amp'"
  for b in "$program" lockstep-run; do
    [[ -x $build/bin/$b ]] || die "$build/bin/$b not found; build first (scripts/build.sh)"
  done
  torch_side_setup "$threads"
}

# torch_side_setup THREADS: finds PyTorch's Python (bench/torch/venv.sh) and the machine line
# (bench/machine.sh), makes $out (removed at exit) and exports THREADS as the OpenMP and BLAS
# thread counts. Needs die() and HERE; bench/compare_examples*.sh call it alone.
torch_side_setup() {
  # shellcheck source=bench/torch/venv.sh
  source "$HERE/torch/venv.sh"
  source "$HERE/machine.sh"
  torch_python || die "no Python with torch (bench/torch/venv.sh creates the venv)"
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  export OMP_NUM_THREADS=$1 MKL_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1
}
