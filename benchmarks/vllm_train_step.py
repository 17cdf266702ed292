"""A whole GRPO training step on the CPU with vLLM generation against transformers generation (issue 25).

``vllm_generation.py`` times generation alone; this times what a user pays per step: a real
``mutualrl train`` of a pool recipe, once with ``grpo.use_vllm=false`` and once with
``grpo.use_vllm=true`` (TRL colocate: the engine in the policy's process, weights synced into it
every step, LoRA merged for the sync), same seed, steps and settings otherwise. Rounds alternate
(transformers, vLLM, transformers, ...) so machine noise hits both. Per policy it reports the
median of TRL's ``step_time`` and of ``mutual/rollout_seconds`` (generation + rewards) over the
steps after the first (the first pays vLLM's warm-up), and each run's wall time (engine start-up
included). Validation is cut to a few prompts at the end so it does not dominate either run::

    python benchmarks/vllm_train_step.py --pool smol-arith --steps 5 --out DIR

Three arms: transformers, vLLM as the plan runs it on a CPU (no importance-sampling pass), and vLLM with TRL's
``vllm_importance_sampling_correction`` on (TRL's default, the CPU plan's before session 18).
``ratio_<arm> = transformers / arm`` (> 1: vLLM faster). Writes ``DIR/vllm-train-step.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import run_one  # noqa: E402  (the benchmarks' own `mutualrl train` runner)

BACKENDS = {
    "transformers": ["grpo.use_vllm=false"],
    "vllm": ["grpo.use_vllm=true"],  # the plan's CPU default: no importance-sampling pass (vllm_cpu.SAME_SAMPLER)
    "vllm-is": ["grpo.use_vllm=true", "grpo.vllm_importance_sampling_correction=true"],  # TRL's default (before)
}
TIMED_KEYS = ("step_time", "mutual/rollout_seconds")


def step_medians(rows: list[dict[str, Any]], skip_first: int = 1) -> dict[str, dict[str, float]]:
    """Per policy: the median of each timed key over its train rows after the first ``skip_first`` steps."""
    by_policy: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row.get("kind") != "train" or row.get("step", 0) <= skip_first:
            continue
        timed = by_policy.setdefault(row["policy"], {key: [] for key in TIMED_KEYS})
        for key in TIMED_KEYS:
            if isinstance(row.get(key), (int, float)):
                timed[key].append(float(row[key]))
    return {policy: {key: statistics.median(values) for key, values in timed.items() if values}
            for policy, timed in by_policy.items()}


def ratios(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """transformers / each vLLM arm for each policy and timed key (median over rounds), and for the runs' wall
    time: ``{policy: {key: {"<arm>_s": seconds, "ratio_<arm>": transformers / arm}}}``."""
    def median_over_rounds(backend: str, policy: str, key: str) -> float | None:
        values = [r["steps"][policy][key] for r in results[backend] if key in r["steps"].get(policy, {})]
        return statistics.median(values) if values else None

    arms = [b for b in results if b != "transformers"]
    policies = sorted({p for r in results["transformers"] for p in r["steps"]})
    out: dict[str, Any] = {}
    for policy in policies:
        out[policy] = {}
        for key in TIMED_KEYS:
            seconds = {b: median_over_rounds(b, policy, key) for b in results}
            hf = seconds["transformers"]
            out[policy][key] = {**{f"{b}_s": v for b, v in seconds.items()},
                                **{f"ratio_{b}": round(hf / seconds[b], 3) if hf and seconds[b] else None
                                   for b in arms}}
    walls = {b: statistics.median(r["wall_seconds"] for r in results[b]) for b in results}
    out["wall_seconds"] = {**walls, **{f"ratio_{b}": round(walls["transformers"] / walls[b], 3) for b in arms}}
    return out


def run_once(args: argparse.Namespace, backend: str, round_index: int) -> dict[str, Any]:
    """One timed standalone run with ``backend`` generating (never a reused one: a timing must be fresh)."""
    round_dir = args.out / f"{backend}-round{round_index}"
    shutil.rmtree(round_dir, ignore_errors=True)
    settings = [*BACKENDS[backend], "validation.at_start=false",
                f"validation.limit={args.validation_prompts}", "grpo.save_steps=100000"]
    started = time.perf_counter()
    run_dir = run_one(args.pool, "standalone", args.seed, round_dir, args.steps,
                      [x for setting in settings for x in ("--set", setting)])
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"run": f"{round_dir.name}/{run_dir.name}", "wall_seconds": round(wall, 1), "steps": step_medians(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pool", default="smol-arith", help="Pool recipe to train (standalone baseline).")
    parser.add_argument("--steps", type=int, default=5, help="Training steps per run (the first is not timed).")
    parser.add_argument("--rounds", type=int, default=1, help="Runs per backend, alternated.")
    parser.add_argument("--seed", type=int, default=1, help="Training seed (the same for both backends).")
    parser.add_argument("--validation-prompts", type=int, default=4, help="Held-out prompts validated at the end.")
    parser.add_argument("--out", type=Path, required=True, help="Folder for the runs and vllm-train-step.json.")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"Comma-separated arms, transformers first ({', '.join(BACKENDS)}).")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is not timed)")
    args.out.mkdir(parents=True, exist_ok=True)
    backends = args.backends.split(",")
    if backends[0] != "transformers" or not set(backends) <= set(BACKENDS):
        parser.error(f"--backends: transformers first, then any of {', '.join(BACKENDS)}; got {args.backends}")
    results: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    for round_index in range(args.rounds):
        for backend in backends:
            results[backend].append(run_once(args, backend, round_index))
    report = {"command": " ".join(["python", "benchmarks/vllm_train_step.py", *(argv or sys.argv[1:])]),
              "pool": args.pool, "steps": args.steps, "rounds": args.rounds, "runs": results,
              "transformers_over_vllm": ratios(results)}
    path = args.out / "vllm-train-step.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["transformers_over_vllm"], indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
