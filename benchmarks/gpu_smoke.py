"""GPU smoke check: the first thing to run on a machine with NVIDIA GPUs (prints one JSON object).

Each check is a real ``mutualrl train`` of the embedded tiny pool for a few steps (or the smol
pool with ``--learning``), run as a user would, with its exit code, wall time, the steps every
policy finished and the tail of its output on failure. It runs on 1 GPU or more. Per check: what
it proves on the GPU, then the CPU tests that run the same branch (``covered_on_cpu`` in the
JSON), so that a failure here points at what only a GPU exercises.

- ``two-policies-transformers``: the tiny pool with SGT, generation by transformers, each policy
  on its own GPU(s), or both on GPU 0 of a 1-GPU machine (``--device-map``): CUDA placement, bf16,
  the GPU kernels.
  CPU: ``tests/test_train_e2e.py::test_sgt_on_the_tiny_pool_rescues_and_compares_with_its_standalone_baseline``.
- ``vllm-colocate-sleep``: TRL's colocated engine in sleep mode, per-step weight sync
  (``load_weights``), validation through the sleeping engine, real KV-cache memory. One engine per
  GPU and nothing else on it: on 1 GPU one policy (tiny-bpe, standalone), on 2+ GPUs the two
  policies with SGT, each on its own GPUs. vLLM measures free memory device-wide and asserts that
  it did not grow while the engine profiled (``vllm/v1/worker/gpu_worker.py:determine_available_memory``)
  and that sleeping did not raise the memory in use (``Worker.sleep``): a second process starting,
  freeing or sleeping on the same GPU meanwhile trips either. Without vLLM installed the report says
  ``"vllm": "not installed"`` and this check is skipped (``ok: null``), not failed; the others run
  with transformers generation. CPU: ``tests/test_vllm_cpu.py::test_every_policy_trains_with_its_own_synced_engine``,
  ``tests/test_gpu_branches.py::test_validation_through_a_sleeping_engine_wakes_it_and_puts_it_back_to_sleep``,
  ``tests/test_gpu_smoke.py::test_the_vllm_check_puts_one_engine_on_a_gpu_and_nothing_beside_it``.
- ``zero3``: the paper's DeepSpeed ZeRO-3 path (bf16, 16-bit weights gathered for generation and on
  save): on 1 GPU both policies on GPU 0 with one rank each, on 2-3 GPUs one policy on 2 ranks, on
  4+ two ranks per policy (NCCL). CPU: ``tests/test_train_e2e.py::test_zero3_on_cpu_trains_the_tiny_pool``
  (one rank), ``tests/test_multirank_cpu.py::test_zero3_and_bounded_staleness_with_two_cpu_ranks_per_policy`` (two gloo ranks),
  ``tests/test_gpu_branches_audit.py::test_a_gpu_plan_without_grpo_bf16_writes_a_deepspeed_file_transformers_accepts``.
- ``step-time``: standalone vs vanilla TRL on the same GPU (``benchmarks/step_time.py``).
  CPU: ``tests/test_benchmarks_smoke.py::test_step_time``.
- ``smol-sgt-vs-standalone`` (``--learning``): the smol pool (real pretrained models) with SGT and,
  on the same seed, standalone GRPO (``--baseline standalone``), held-out accuracy per policy from
  ``comparison.json``. CPU: ``tests/test_pool_smol_qa.py::test_two_steps_of_every_regime`` (the same
  two models, SGT, 2 steps).

On a machine without a CUDA GPU it prints ``{"skipped": "no GPU"}`` and exits 0::

    python benchmarks/gpu_smoke.py --out /tmp/gpu-smoke            # a few minutes
    python benchmarks/gpu_smoke.py --out /tmp/gpu-smoke --learning # + the smol pool comparison

Exit code 1 if any check that ran failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
SMOL_POLICIES = ("smollm2-135m", "gemma3-270m")  # recipes/pools/smol.yaml
ONE_POLICY = "pool.policies=[{name: tiny-bpe, model: 'builtin:tiny-bpe'}]"
VLLM_SLEEP = ["--set", "grpo.use_vllm=true", "--set", "grpo.vllm_mode=colocate", "--set",
              "grpo.vllm_enable_sleep_mode=true", "--set", "grpo.vllm_gpu_memory_utilization=0.25"]
#: Per check: what only a GPU exercises of it, and the CPU tests that run the same branch (the docstring says more).
CHECKS: dict[str, dict[str, Any]] = {
    "two-policies-transformers": {
        "gpu_only": "CUDA placement, bf16 and the GPU kernels",
        "covered_on_cpu": ["tests/test_train_e2e.py::test_sgt_on_the_tiny_pool_rescues_and_compares_with_its_"
                           "standalone_baseline"]},
    "vllm-colocate-sleep": {
        "gpu_only": "CUDA kernels, real memory (vllm_gpu_memory_utilization, KV cache, sleep mode's offload), TRL's "
                    "own load_weights sync; one engine per GPU, so vLLM's device-wide memory assertions hold",
        "covered_on_cpu": ["tests/test_vllm_cpu.py::test_every_policy_trains_with_its_own_synced_engine",
                           "tests/test_gpu_branches.py::test_validation_through_a_sleeping_engine_wakes_it_and_puts_"
                           "it_back_to_sleep",
                           "tests/test_gpu_smoke.py::test_the_vllm_check_puts_one_engine_on_a_gpu_and_nothing_"
                           "beside_it"]},
    "zero3": {
        "gpu_only": "NCCL, bf16 ZeRO-3 on CUDA",
        "covered_on_cpu": ["tests/test_train_e2e.py::test_zero3_on_cpu_trains_the_tiny_pool",
                           "tests/test_multirank_cpu.py::test_zero3_and_bounded_staleness_with_two_cpu_ranks_per_policy",
                           "tests/test_gpu_branches_audit.py::test_a_gpu_plan_without_grpo_bf16_writes_a_deepspeed_"
                           "file_transformers_accepts"]},
    "step-time": {"gpu_only": "the GPU's step time",
                  "covered_on_cpu": ["tests/test_benchmarks_smoke.py::test_step_time"]},
    "smol-sgt-vs-standalone": {
        "gpu_only": "learning at GPU speed over a full run",
        "covered_on_cpu": ["tests/test_pool_smol_qa.py::test_two_steps_of_every_regime"]},
}


def cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def vllm_status() -> tuple[str, str | None]:
    """(what is installed, why the vLLM check cannot run here or None); read from package metadata, not imported."""
    from mutualrl.host.vllm_cpu import installed_build
    from mutualrl.versions import installed_versions

    build = installed_build()
    if not build.installed or importlib.util.find_spec("vllm") is None:
        return "not installed", "vLLM is not installed (pip install -e '.[vllm]', the tested vllm 0.30.x)"
    version = next(v for v in installed_versions() if v.library == "vllm")
    if build.cpu:
        return version.describe(), (f"{build.describe()} cannot run on a GPU: pip uninstall {build.distribution}, "
                                    "then pip install -e '.[vllm]'")
    return version.describe(), None


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


def checks(out: Path, gpus: int, steps: int, learning: bool,
           vllm_skip: str | None = None) -> list[tuple[str, list[str] | str]]:
    """(name, command) per check, or (name, reason) for a check skipped on this machine (``vllm_skip``: why the
    vLLM check cannot run, :func:`vllm_status`)."""
    # One GPU: the policies share it (MWRA gives each policy its own GPUs unless told otherwise).
    share = (lambda *names: ["--device-map", ";".join(f"{n}=0" for n in names)]) if gpus == 1 else (lambda *n: [])
    short = ["--max-steps", str(steps), "--set", "validation.limit=20", "--set", f"grpo.save_steps={steps}"]
    tiny = ["--pool", "tiny", "--regime", "sgt", *short]
    plan: list[tuple[str, list[str] | str]] = [
        ("two-policies-transformers", train(out, "two-policies-transformers", *tiny, *share("tiny-bpe", "tiny-sp")))]
    if vllm_skip is not None:
        plan.append(("vllm-colocate-sleep", f"skipped: {vllm_skip}"))
    elif gpus == 1:  # one engine alone on the GPU: no other process profiles, frees or sleeps beside it
        plan.append(("vllm-colocate-sleep", train(out, "vllm-colocate-sleep", "--pool", "tiny", "--regime",
                                                  "standalone", *short, "--set", ONE_POLICY, *VLLM_SLEEP)))
    else:  # each policy on its own GPUs, one engine per rank, one rank per GPU
        plan.append(("vllm-colocate-sleep", train(out, "vllm-colocate-sleep", *tiny, *VLLM_SLEEP)))
    zero3 = ["--set", "launch.deepspeed=zero3"]
    if gpus >= 4:
        plan.append(("zero3", train(out, "zero3", *tiny, *zero3, "--device-map", "tiny-bpe=0,1;tiny-sp=2,3")))
    elif gpus >= 2:
        plan.append(("zero3", train(out, "zero3", "--pool", "tiny", "--regime", "standalone", *short, *zero3,
                                    "--set", ONE_POLICY)))
    else:  # one rank per policy, both on GPU 0
        plan.append(("zero3", train(out, "zero3", *tiny, *zero3, *share("tiny-bpe", "tiny-sp"))))
    plan.append(("step-time", [sys.executable, str(ROOT / "benchmarks" / "step_time.py"), "--rounds", "3",
                               "--steps", "8"]))
    if learning:
        plan.append(("smol-sgt-vs-standalone", train(out, "smol-sgt-vs-standalone", "--pool", "smol", "--regime", "sgt",
                                                     "--baseline", "standalone", *share(*SMOL_POLICIES))))
    return plan


Runner = Callable[[str, list[str], Path, float], dict[str, Any]]


def smoke(out: Path, gpus: int, steps: int, learning: bool, timeout_s: float,
          runner: Runner = run_check) -> dict[str, Any]:
    """Run every check of :func:`checks` on this machine's ``gpus`` GPUs; the report without the machine's facts."""
    installed, vllm_skip = vllm_status()
    report: dict[str, Any] = {"gpus": gpus, "vllm": installed, "checks": []}
    for name, command in checks(out, gpus, steps, learning, vllm_skip):
        if isinstance(command, str):
            result: dict[str, Any] = {"check": name, "ok": None, "skipped": command}
        else:
            result = runner(name, command, out, timeout_s)
            comparison = out / name / "comparison.json"
            if comparison.exists():
                result["comparison"] = json.loads(comparison.read_text())
            print(json.dumps({k: v for k, v in result.items() if k != "output_tail"}), file=sys.stderr, flush=True)
        report["checks"].append({**result, **CHECKS[name]})
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu-smoke")
    parser.add_argument("--steps", type=int, default=5, help="training steps of each tiny-pool check")
    parser.add_argument("--learning", action="store_true", help="also train the smol pool, SGT vs standalone")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per check")
    args = parser.parse_args(argv)
    gpus = cuda_devices()
    if gpus == 0:
        print(json.dumps({"skipped": "no GPU", "detail": "torch sees no CUDA device; nothing was run",
                          "checks": CHECKS}))
        return 0
    import torch

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    machine = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    report = {**machine, **smoke(out, gpus, args.steps, args.learning, args.timeout)}
    (out / "gpu_smoke.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 1 if any(c["ok"] is False for c in report["checks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
