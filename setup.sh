#!/usr/bin/env bash
# Set up mutualrl in ./.venv: CPU torch where there is no CUDA, the package with its dev
# and DeepSpeed extras, and the offline assets (real tokenizers, data) used by the tiny pool
# and the tests. Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
"${PIP[@]}" install --quiet --upgrade pip

if "$PY" -c "import torch" 2>/dev/null; then
  echo "==> torch $("$PY" -c 'import torch; print(torch.__version__)') already installed"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "==> NVIDIA GPU found: installing the default (CUDA) torch build from PyPI."
  echo "    To use another CUDA version, install torch yourself first (README, 'GPU notes')."
  "${PIP[@]}" install --quiet torch
else
  echo "==> no GPU: installing the CPU build of torch 2.13.0"
  # The CPU wheel through pip's own configuration (pip.conf, PIP_INDEX_URL / PIP_EXTRA_INDEX_URL,
  # a find-links wheel folder). A plain `torch` requirement would pull a multi-GB CUDA build.
  if ! "${PIP[@]}" install --quiet "torch==2.13.0+cpu"; then
    echo "setup: pip's configured indexes offer no CPU build of torch 2.13.0; install one into $VENV" \
         "following PyTorch's own install selector (CPU), then run ./setup.sh again" >&2
    exit 1
  fi
fi

echo "==> installing mutualrl (editable) with its dev extras"
"${PIP[@]}" install --quiet -e ".[dev]"

if ! "$PY" -c "import deepspeed" 2>/dev/null; then
  echo "==> installing DeepSpeed (ops compiled on first use)"
  # No build isolation: DeepSpeed's build imports torch, and an isolated build env would fetch a CUDA torch.
  DS_BUILD_OPS=0 "${PIP[@]}" install --quiet --no-build-isolation "deepspeed>=0.19"
fi

echo "==> fetching offline assets (tokenizers, data) into ${MUTUALRL_CACHE:-~/.cache/mutualrl}"
"$VENV/bin/mutualrl" assets fetch
echo "==> done. Try: $VENV/bin/mutualrl train"
