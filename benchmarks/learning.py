"""Learning benchmark (issue: the three sharing regimes): held-out accuracy per policy per regime.

Trains the embedded ``tiny`` pool (two small policies with different tokenizers and
complementary skills) under matched settings with each regime and several seeds, then
reports the greedy held-out reward@1 of every policy (mean, std, min, max over seeds),
per task family where the task has families, and writes a figure in the style of the
paper's probe comparison (validation reward@1 vs step, one panel per policy, one line
per regime, shaded min-max over seeds)::

    python benchmarks/learning.py [--regimes standalone,xgrpo,sgt,prp-peer,prp-learner]
                                  [--seeds 1,2,3] [--max-steps N] [--out runs/learning]

Each (regime, seed) is a real ``mutualrl train`` run; runs already finished in ``--out``
are reused (delete the folder to start again).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

REGIME_ARGS = {
    "standalone": ["--regime", "standalone"],
    "xgrpo": ["--regime", "xgrpo"],
    "sgt": ["--regime", "sgt"],
    "prp-peer": ["--regime", "prp", "--prp-denominator", "peer"],
    "prp-learner": ["--regime", "prp", "--prp-denominator", "learner"],
    "grpo-randpert": ["--regime", "grpo-randpert"],
}


def run_one(pool: str, regime: str, seed: int, out: Path, max_steps: int | None, extra: list[str]) -> Path:
    run_dir = out / f"{regime}-seed{seed}"
    if (run_dir / "summary.json").exists():
        return run_dir
    cmd = [sys.executable, "-m", "mutualrl", "train", "--pool", pool, *REGIME_ARGS[regime], "--seed", str(seed),
           "-o", str(run_dir), "--overwrite", *extra]
    if max_steps is not None:
        cmd += ["--max-steps", str(max_steps)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"run {run_dir.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"  {run_dir.name}: {time.perf_counter() - started:.0f}s", file=sys.stderr)
    return run_dir


def eval_curve(run_dir: Path, policy: str) -> list[tuple[int, float]]:
    points = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        obj = json.loads(line)
        if obj.get("kind") == "eval" and obj.get("policy") == policy and obj.get("eval/reward@1") is not None:
            points.append((int(obj["step"]), float(obj["eval/reward@1"])))
    return sorted(points)


def family_scores(run_dir: Path, policy: str, step: int) -> dict[str, float] | None:
    path = run_dir / "eval" / policy / f"step-{step:06d}.json"
    if not path.exists():
        return None
    from mutualrl.evaluation.results import ModelEvalResult

    result = ModelEvalResult.load(path)
    try:
        from mutualrl.tasks.synthetic import family_accuracy
    except ImportError:
        return None
    try:
        return family_accuracy((r.prompt_id, r.score) for r in result.records)
    except Exception:  # not a task with families
        return None


def spread(values: list[float]) -> dict[str, Any]:
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "values": values}


def plot(results: dict[str, Any], curves: dict[str, dict[str, list[list[tuple[int, float]]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    policies = sorted({p for per_regime in curves.values() for p in per_regime})
    fig, axes = plt.subplots(1, len(policies), figsize=(5.2 * len(policies), 3.8), squeeze=False)
    for ax, policy in zip(axes[0], policies, strict=True):
        for regime, per_policy in curves.items():
            runs = per_policy.get(policy, [])
            if not runs:
                continue
            steps = sorted({s for run in runs for s, _ in run})
            grid = np.array([[dict(run).get(s, np.nan) for s in steps] for run in runs])
            mean = np.nanmean(grid, axis=0)
            ax.plot(steps, mean, marker="o", ms=3, label=regime)
            ax.fill_between(steps, np.nanmin(grid, axis=0), np.nanmax(grid, axis=0), alpha=0.15)
        ax.set_title(policy)
        ax.set_xlabel("training step")
        ax.set_ylabel("held-out reward@1 (greedy)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{results['pool']}: validation reward@1 per policy and regime "
                 f"(mean over seeds {results['seeds']}, band = min-max)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="tiny")
    parser.add_argument("--regimes", default="standalone,xgrpo,sgt,prp-peer,prp-learner")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "learning")
    parser.add_argument("--set", action="append", default=[], help="extra --set overrides for every run")
    args = parser.parse_args()
    regimes = args.regimes.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    extra = [x for item in args.set for x in ("--set", item)]
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"pool": args.pool, "seeds": seeds, "max_steps": args.max_steps, "regimes": {}}
    curves: dict[str, dict[str, list]] = {}
    for regime in regimes:
        per_policy: dict[str, dict[str, list]] = {}
        curves[regime] = {}
        for seed in seeds:
            run_dir = run_one(args.pool, regime, seed, args.out, args.max_steps, extra)
            summary = json.loads((run_dir / "summary.json").read_text())
            for policy, entry in summary["policies"].items():
                slot = per_policy.setdefault(policy, {"after": [], "before": [], "families": []})
                slot["after"].append(entry["eval_after"])
                slot["before"].append(entry["eval_before"])
                fam = family_scores(run_dir, policy, entry["eval_after_step"])
                if fam:
                    slot["families"].append(fam)
                curves[regime].setdefault(policy, []).append(eval_curve(run_dir, policy))
        results["regimes"][regime] = {}
        for policy, slot in per_policy.items():
            entry = {"final_reward@1": spread(slot["after"]), "initial_reward@1": spread(slot["before"])}
            if slot["families"]:
                entry["final_by_family"] = {f: spread([d[f] for d in slot["families"]]) for f in slot["families"][0]}
            results["regimes"][regime][policy] = entry
    means = {r: {p: v["final_reward@1"]["mean"] for p, v in pp.items()} for r, pp in results["regimes"].items()}
    checks = {}
    if "sgt" in means and "standalone" in means:
        checks["sgt_ge_standalone_every_policy"] = all(means["sgt"][p] >= means["standalone"][p]
                                                        for p in means["sgt"])
    if "prp-peer" in means and "prp-learner" in means:
        checks["prp_peer_ge_prp_learner_every_policy"] = all(means["prp-peer"][p] >= means["prp-learner"][p]
                                                              for p in means["prp-peer"])
    results["paper_ordering"] = checks
    figure = args.out / "learning.png"
    plot(results, curves, figure)
    results["figure"] = str(figure)
    (args.out / "learning.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
