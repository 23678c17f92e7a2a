#!/usr/bin/env bash
# bench/torch/venv.sh — the Python interpreter that runs the PyTorch reference scripts.
#
# The comparisons are against the newest PyTorch on PyPI, installed in a virtual environment
# that this script creates the first time it is needed:
#     python3 -m venv DIR && DIR/bin/pip install torch torchvision numpy
# DIR is $LOCKSTEP_TORCH_VENV, default ~/.cache/lockstep/torch-venv (outside the repository,
# shared by every checkout; the first run downloads a few GB: PyPI's Linux wheel is the CUDA
# build, ~840 MB resident once imported, which compare_step.sh reports beside peak memory).
# TORCH_PY=/path/to/python skips the venv entirely, e.g. TORCH_PY=/usr/bin/python3 with
# Debian's python3-torch to reproduce the historical PyTorch 1.13 numbers.
#
#   source bench/torch/venv.sh && torch_python     # sets and exports TORCH_PY (compare scripts)
#   bench/torch/venv.sh                             # prints the interpreter's path and versions
#
# Concurrent first uses are serialised with flock on DIR.lock, so two scripts never install at
# once. Read next: bench/torch/README.md.

TORCH_VENV=${LOCKSTEP_TORCH_VENV:-$HOME/.cache/lockstep/torch-venv}

_torch_venv_ready() {
  "$TORCH_VENV/bin/python" -c "import torch, torchvision, numpy" 2>/dev/null
}

_torch_venv_create() {
  mkdir -p "$(dirname "$TORCH_VENV")"
  if [[ ! -x "$TORCH_VENV/bin/python" ]]; then
    echo "bench/torch/venv.sh: creating $TORCH_VENV" >&2
    python3 -m venv "$TORCH_VENV" >&2 || return 1
  fi
  echo "bench/torch/venv.sh: installing torch torchvision numpy from PyPI into $TORCH_VENV" >&2
  "$TORCH_VENV/bin/pip" install torch torchvision numpy >&2
}

# Sets TORCH_PY (exported) to a Python that imports torch, creating the venv if needed.
torch_python() {
  if [[ -n "${TORCH_PY:-}" ]]; then
    export TORCH_PY
    return 0
  fi
  if ! _torch_venv_ready; then
    if command -v flock >/dev/null; then
      mkdir -p "$(dirname "$TORCH_VENV")"
      (
        flock 9
        _torch_venv_ready || _torch_venv_create
      ) 9>"$TORCH_VENV.lock" || return 1
    else
      _torch_venv_create || return 1
    fi
    _torch_venv_ready || { echo "bench/torch/venv.sh: $TORCH_VENV cannot import torch" >&2; return 1; }
  fi
  export TORCH_PY="$TORCH_VENV/bin/python"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  torch_python
  echo "$TORCH_PY"
  "$TORCH_PY" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
fi
