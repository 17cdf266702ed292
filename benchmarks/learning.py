"""Learning benchmark: does sharing lift each policy's weak skill? Every regime, every seed, same settings.

Trains the embedded ``tiny`` pool (docs/pools.md: two small policies with different
tokenizers, each with a blind spot on the family its peer solves) with each regime and
several seeds, all with the recipe's settings (only ``--regime`` differs), and reports the
greedy held-out reward@1 of every policy per task group. The weak and strong group of a
policy are fixed *before* training, from the step-0 validation (lowest / highest).

For every seed it prints SGT − standalone on each policy's weak and strong group (the
target of issue 14: weak ≥ +0.30 on every seed, strong ≥ −0.05), and it reports whether
the paper's orderings hold without tuning toward them (SGT ≥ standalone, XGRPO ≥
grpo-randpert, PRP-peer ≥ PRP-learner), plus a figure of held-out accuracy per policy
and group (mean over seeds, band = min-max)::

    python benchmarks/learning.py                 # standalone+sgt on seeds 1-5, the others on 1-3
    python benchmarks/learning.py --quick         # standalone+sgt on seeds 1-2 (checking a change)
    python benchmarks/learning.py --regimes sgt,standalone --seeds 11,12 --out /tmp/learn

Each (regime, seed) is a real ``mutualrl train`` run; runs already finished in ``--out``
are reused (delete the folder to start again), a run stopped mid-way continues from its last checkpoint (the tiny
recipe saves every 100 steps). Prints one JSON object at the end.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from mutualrl.evaluation.results import group_rewards  # noqa: E402
from run_folder import resume_command, run_state  # noqa: E402

REGIME_ARGS = {
    "standalone": ["--regime", "standalone"],
    "sgt": ["--regime", "sgt"],
    "xgrpo": ["--regime", "xgrpo"],
    "grpo-randpert": ["--regime", "grpo-randpert"],
    "prp-peer": ["--regime", "prp", "--prp-denominator", "peer"],
    "prp-learner": ["--regime", "prp", "--prp-denominator", "learner"],
    # Dr. MAS's per-policy normalisation of XGRPO's pooled statistics (issue 16; the paper pools them).
    "xgrpo-per-policy": ["--regime", "xgrpo", "--set", "regime.xgrpo.normalisation=per-policy"],
    # HACPO (arXiv 2603.02604) with its paper's common settings (the regime's defaults) over GSPO's sequence ratio.
    "hacpo": ["--regime", "hacpo", "--set", "grpo.importance_sampling_level=sequence"],
    # PRP with F-TIS as published (arXiv 2605.22537) on the peer rows, the settings of
    # recipes/experiments/prp-ftis-2qwen.yaml: C = 2, g = 50, advantages within each policy's own group.
    "prp-ftis": ["--regime", "prp", "--prp-denominator", "peer", "--set", "regime.prp.correction=ftis",
                 "--set", "regime.prp.correction_level=token", "--set", "regime.prp.truncation_bound=2.0",
                 "--set", "regime.prp.kl_bound=50.0"],
    # Mutual on-policy distillation (GKD/MiniLLM across tokenizers; docs/regimes.md): the regime's defaults.
    "opd": ["--regime", "opd"],
    # OPD's distillation with SGT's rescue in one loss (issue 97; docs/regimes.md): the recipe's regime.opdsgt.
    "opd-sgt": ["--regime", "opd-sgt"],
    # The peers' next-token distributions compared over next bytes (issue 97; docs/regimes.md): its defaults.
    "byte-kd": ["--regime", "byte-kd"],
    # byte-kd's canonical approximation (each peer's next token after its own tokens only), alone and with SGT's
    # rescue at the settings measured on seeds 1-8 (results/learning-tiny.md).
    "byte-kd-canonical": ["--regime", "byte-kd", "--set", "regime.bytekd.distribution=canonical"],
    "byte-kd-canonical-rescue": ["--regime", "byte-kd", "--set", "regime.bytekd.distribution=canonical",
                                 "--set", "regime.bytekd.lam=0.3", "--set", "regime.bytekd.rescue_lam=0.3",
                                 "--set", "regime.bytekd.max_rescues_per_prompt=1"],
}
MAIN_REGIMES = ("standalone", "sgt")  # run on every seed of --seeds
WEAK_TARGET, STRONG_TARGET = 0.30, -0.05
STRONG_FULL_TEST_TARGET = -0.02  # the strong family on the whole test split (issue 25)


def run_command(pool: str, regime: str, seed: int, run_dir: Path, max_steps: int | None,
                extra: list[str]) -> list[str]:
    """A new run's ``mutualrl train``, or ``--resume`` of one stopped mid-way (a reboot, Ctrl-C: its folder has its
    settings; it continues from its last checkpoint, the recipe's ``save_steps``, with its own settings)."""
    if run_state(run_dir) == "started":
        return resume_command(run_dir)
    cmd = [sys.executable, "-m", "mutualrl", "train", "--pool", pool, *REGIME_ARGS[regime], "--seed", str(seed),
           "-o", str(run_dir), "--overwrite", *extra]
    return cmd + (["--max-steps", str(max_steps)] if max_steps is not None else [])


def run_one(pool: str, regime: str, seed: int, out: Path, max_steps: int | None, extra: list[str]) -> Path:
    run_dir = out / f"{regime}-seed{seed}"
    if (run_dir / "summary.json").exists():
        return run_dir
    cmd = run_command(pool, regime, seed, run_dir, max_steps, extra)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"run {run_dir.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"  {run_dir.name}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    return run_dir


def final_groups(run_dir: Path, policy: str, task_name: str, split: str = "test",
                 limit: int | None = None) -> dict[str, float]:
    """``group -> greedy reward@1`` of the run's final weights on the task's *whole* test split (the recipe's
    validation sees a subset: 100 prompts per family cannot resolve a few points; issue 25). Cached in the run.
    ``split="train"`` (with a ``limit``) is for choosing settings without looking at the test split."""
    from mutualrl.evaluation.results import ModelEvalResult
    from mutualrl.tasks.registry import get_task

    out = run_dir / f"full-{split}" / f"{policy}.json"
    if not out.exists():
        cmd = [sys.executable, "-m", "mutualrl", "eval", str(run_dir / "policies" / policy / "final"),
               "--suite", task_name, "--split", split, "-o", str(out), *(["--limit", str(limit)] if limit else [])]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise SystemExit(f"final eval of {run_dir.name}/{policy} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    task = get_task(task_name)
    group_of = {e.prompt_id: task.group_of(e) for e in task.load(split, source="offline")}
    result = ModelEvalResult.from_json(json.loads(out.read_text())["results"][0], origin=str(out))
    return result.reward_at_1_by_group({pid: g for pid, g in group_of.items() if g is not None})


def group_curves(run_dir: Path, policy: str) -> dict[str, list[tuple[int, float]]]:
    """``group -> [(step, held-out reward@1)]`` from the run's validation lines."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        obj = json.loads(line)
        if obj.get("kind") != "eval" or obj.get("policy") != policy:
            continue
        # A single-task pool's validation has no groups: its curve is the overall held-out reward@1.
        for group, value in (group_rewards(obj) or {"held-out": obj["eval/reward@1"]}).items():
            curves.setdefault(group, []).append((int(obj["step"]), value))
    return {g: sorted(v) for g, v in curves.items()}


WEAK_REACHED = 0.8
"""The held-out accuracy on a policy's weak group whose first validation step is reported (steps to reach it)."""


def steps_to_reach(curve: list[tuple[int, float]], level: float = WEAK_REACHED) -> int | None:
    """The first validation step at which ``curve`` (``[(step, accuracy)]``) is at least ``level``; None: never."""
    return next((step for step, value in sorted(curve) if value >= level), None)


def step_costs(run_dir: Path) -> dict[str, dict[str, float]]:
    """Per policy, the mean over its training steps of TRL's ``step_time`` (generation, the exchange, the regime and
    the update: the seconds of one optimizer step) and of the regime's stage seconds that cost a pass or a wait
    (``mutual/judge_s``, ``mutual/judgements_wait_s``: the peers' scoring passes of on-policy distillation)."""
    sums: dict[str, dict[str, list[float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        obj = json.loads(line)
        if obj.get("kind") != "train":
            continue
        for key in ("step_time", "mutual/judge_s", "mutual/judgements_wait_s"):
            if isinstance(obj.get(key), (int, float)):
                sums.setdefault(obj["policy"], {}).setdefault(key, []).append(float(obj[key]))
    return {policy: {key: round(statistics.fmean(values), 4) for key, values in keys.items()}
            for policy, keys in sums.items()}


def spread(values: list[float]) -> dict[str, Any]:
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "values": values}


def weak_and_strong(summary: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Per policy, its (weak, strong) group: lowest and highest held-out accuracy at step 0."""
    out = {}
    for policy, entry in summary["policies"].items():
        before = entry["groups_before"]
        out[policy] = (min(before, key=before.get), max(before, key=before.get))
    return out


def per_seed_gains(runs: dict[str, dict[int, dict]], roles: dict[str, tuple[str, str]], key: str = "groups_after",
                   strong_target: float = STRONG_TARGET, regime: str = "sgt") -> dict[str, Any]:
    """``regime`` (SGT) − standalone on each policy's weak and strong group, per seed both were run on (``key``: the
    validation subset's ``groups_after`` or the whole test split's ``groups_full_test``)."""
    seeds = sorted(set(runs.get(regime, {})) & set(runs.get("standalone", {})))
    rows = {}
    for seed in seeds:
        sgt, base = runs[regime][seed]["policies"], runs["standalone"][seed]["policies"]
        # Accuracies are counts over 100 prompts: round away float noise (0.94 - 0.99 = -0.05000000000000004).
        rows[seed] = {p: {"weak": round(sgt[p][key][w] - base[p][key][w], 6),
                          "strong": round(sgt[p][key][s] - base[p][key][s], 6)}
                      for p, (w, s) in roles.items()}
    if not rows:
        return {}
    worst_weak = min(v["weak"] for r in rows.values() for v in r.values())
    worst_strong = min(v["strong"] for r in rows.values() for v in r.values())
    return {"seeds": rows, "worst_weak_gain": worst_weak, "worst_strong_change": worst_strong,
            "target": {"weak_gain_at_least": WEAK_TARGET, "strong_change_at_least": strong_target},
            "target_met_every_seed": worst_weak >= WEAK_TARGET and worst_strong >= strong_target}


def standalone_noise_floor(strong: dict[str, list[float]], observed: dict[str, Any], bound: float) -> dict[str, Any]:
    """How often the bound is missed with no sharing at all: over every ordered pair of different seeds of
    standalone GRPO (``strong``: policy -> its strong-family accuracy per seed), the share of pairs whose
    difference is below ``bound``; times the number of (seed, policy) comparisons SGT made (``observed``:
    ``per_seed_gains``'s result), the misses to expect if SGT changed nothing, beside the misses seen; and
    the largest drop between two standalone seeds beside SGT's largest cost."""
    pairs = [b - a for values in strong.values() for i, a in enumerate(values) for j, b in enumerate(values) if i != j]
    share = sum(round(d, 6) < bound for d in pairs) / len(pairs) if pairs else 0.0
    changes = [v["strong"] for row in observed.get("seeds", {}).values() for v in row.values()]
    return {"bound": bound, "standalone_pairs": len(pairs), "standalone_pairs_below_bound": round(share, 4),
            "standalone_worst_pair": round(min(pairs), 6) if pairs else None,
            "comparisons": len(changes), "misses_expected_without_any_effect": round(share * len(changes), 2),
            "misses_seen": sum(c < bound for c in changes), "worst_seen": min(changes) if changes else None}


def orderings(final: dict[str, dict[str, float]]) -> dict[str, bool]:
    """The paper's orderings on final held-out reward@1 (mean over seeds), every policy."""
    pairs = {"sgt_ge_standalone": ("sgt", "standalone"), "xgrpo_ge_grpo_randpert": ("xgrpo", "grpo-randpert"),
             "prp_peer_ge_prp_learner": ("prp-peer", "prp-learner")}
    return {name: all(final[a][p] >= final[b][p] for p in final[a])
            for name, (a, b) in pairs.items() if a in final and b in final}


def plot(curves: dict[str, dict[str, dict[str, list]]], title: str, path: Path,
         ylim: tuple[float, float] | None = (-0.03, 1.03)) -> None:
    """One panel per (policy, group): mean over seeds per regime, band = min-max; ``ylim=None`` zooms to the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = sorted({(p, g) for per_regime in curves.values() for p, groups in per_regime.items() for g in groups})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--")]
    for ax, (policy, group) in zip(axes[0], panels, strict=True):
        for index, (regime, per_policy) in enumerate(curves.items()):
            marker, line = styles[index % len(styles)]
            runs = per_policy.get(policy, {}).get(group, [])
            if not runs:
                continue
            steps = sorted({s for run in runs for s, _ in run})
            grid = np.array([[dict(run).get(s, np.nan) for s in steps] for run in runs])
            # Distinct marker and dash per regime: equal curves stay visible on top of each other.
            ax.plot(steps, np.nanmean(grid, axis=0), marker=marker, linestyle=line, ms=4,
                    label=f"{regime} ({len(runs)} seeds)")
            ax.fill_between(steps, np.nanmin(grid, axis=0), np.nanmax(grid, axis=0), alpha=0.15)
        ax.set_title(f"{policy}: {group}")
        ax.set_xlabel("training step")
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held-out reward@1 (greedy)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="tiny")
    parser.add_argument("--regimes", default=",".join(REGIME_ARGS))
    parser.add_argument("--seeds", default="1,2,3,4,5", help="seeds of standalone and sgt")
    parser.add_argument("--other-seeds", default="1,2,3", help="seeds of the other regimes")
    parser.add_argument("--quick", action="store_true", help="standalone and sgt on seeds 1,2 only (~15 min)")
    parser.add_argument("--regime-seeds", action="append", default=[], metavar="REGIME=SEEDS",
                        help="seeds of one regime instead of --seeds/--other-seeds (opd=1,2,3); repeatable")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "learning")
    parser.add_argument("--set", action="append", default=[], help="extra --set overrides for every run")
    parser.add_argument("--full-test-task", default="synthetic-arith",
                        help="also evaluate every run's final weights on this task's whole test split ('' to skip)")
    args = parser.parse_args()
    regimes = list(MAIN_REGIMES) if args.quick else args.regimes.split(",")
    unknown = [r for r in regimes if r not in REGIME_ARGS]
    if unknown:
        parser.error(f"--regimes: unknown {', '.join(unknown)}; known: {', '.join(REGIME_ARGS)}")
    seeds = [1, 2] if args.quick else [int(s) for s in args.seeds.split(",")]
    other_seeds = [int(s) for s in args.other_seeds.split(",") if s]
    own_seeds = {name: [int(s) for s in value.split(",") if s]
                 for name, _, value in (item.partition("=") for item in args.regime_seeds)}
    if set(own_seeds) - set(regimes):
        parser.error(f"--regime-seeds: {', '.join(sorted(set(own_seeds) - set(regimes)))} not in --regimes")
    extra = [x for item in args.set for x in ("--set", item)]
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs: dict[str, dict[int, dict]] = {}
    curves: dict[str, dict[str, dict[str, list]]] = {}
    costs: dict[str, dict[int, dict]] = {}
    for regime in regimes:
        runs[regime], curves[regime] = {}, {}
        for seed in own_seeds.get(regime, seeds if regime in MAIN_REGIMES else other_seeds):
            run_dir = run_one(args.pool, regime, seed, args.out, args.max_steps, extra)
            runs[regime][seed] = json.loads((run_dir / "summary.json").read_text())
            costs.setdefault(regime, {})[seed] = step_costs(run_dir)
            for policy, entry in runs[regime][seed]["policies"].items():
                entry["curves"] = group_curves(run_dir, policy)
            if args.full_test_task:
                for policy, entry in runs[regime][seed]["policies"].items():
                    entry["groups_full_test"] = final_groups(run_dir, policy, args.full_test_task)
            for policy in runs[regime][seed]["policies"]:
                for group, curve in group_curves(run_dir, policy).items():
                    curves[regime].setdefault(policy, {}).setdefault(group, []).append(curve)
    first = next(iter(next(iter(runs.values())).values()))
    roles = weak_and_strong(first)
    results: dict[str, Any] = {"pool": args.pool, "command": " ".join(sys.argv), "roles": {
        p: {"weak": w, "strong": s} for p, (w, s) in roles.items()}, "regimes": {}}
    final: dict[str, dict[str, float]] = {}
    for regime, by_seed in runs.items():
        entry: dict[str, Any] = {"seeds": sorted(by_seed)}
        for policy, (weak, strong) in roles.items():
            entry[policy] = {
                "final_reward@1": spread([s["policies"][policy]["eval_after"] for s in by_seed.values()]),
                "weak_after": spread([s["policies"][policy]["groups_after"][weak] for s in by_seed.values()]),
                "strong_after": spread([s["policies"][policy]["groups_after"][strong] for s in by_seed.values()]),
            }
            entry[policy]["weak_steps_to_0.8"] = {"values": [steps_to_reach(s["policies"][policy]["curves"].get(weak, []))
                                                             for s in by_seed.values()]}
            entry[policy]["step_seconds"] = spread([costs[regime][seed][policy]["step_time"] for seed in by_seed])
            judged = [costs[regime][seed][policy].get("mutual/judge_s") for seed in by_seed]
            if all(j is not None for j in judged):  # the peers' scoring passes (on-policy distillation)
                entry[policy]["judge_seconds"] = spread(judged)
                entry[policy]["judgements_wait_seconds"] = spread(
                    [costs[regime][seed][policy]["mutual/judgements_wait_s"] for seed in by_seed])
            entry["run_seconds"] = spread([s["seconds"] for s in by_seed.values()])
            used = [s["policies"][policy].get("peer_samples_used") for s in by_seed.values()]
            if any(u is not None for u in used):  # the share of peer samples the loss used, every seed
                entry[policy]["peer_samples_used"] = {"values": used}
            if args.full_test_task:
                for name, group in (("weak", weak), ("strong", strong)):
                    entry[policy][f"{name}_full_test"] = spread(
                        [s["policies"][policy]["groups_full_test"][group] for s in by_seed.values()])
        results["regimes"][regime] = entry
        final[regime] = {p: entry[p]["final_reward@1"]["mean"] for p in roles}
    results["sgt_minus_standalone"] = per_seed_gains(runs, roles)
    if args.full_test_task:  # the strong family's cost where it can be resolved: bound -0.02 (issue 25)
        results["sgt_minus_standalone_full_test"] = per_seed_gains(runs, roles, "groups_full_test",
                                                                   STRONG_FULL_TEST_TARGET)
        if "standalone" in results["regimes"]:  # is a miss an effect, or one run's noise? (docs/pools.md)
            results["noise_floor_full_test"] = standalone_noise_floor(
                {p: results["regimes"]["standalone"][p]["strong_full_test"]["values"] for p in roles},
                results["sgt_minus_standalone_full_test"], STRONG_FULL_TEST_TARGET)
    for regime in runs:  # every other sharing regime against standalone, as SGT above (on-policy distillation: opd)
        if regime not in ("standalone", "sgt"):
            results[f"{regime}_minus_standalone"] = per_seed_gains(runs, roles, regime=regime)
            if args.full_test_task:
                results[f"{regime}_minus_standalone_full_test"] = per_seed_gains(
                    runs, roles, "groups_full_test", STRONG_FULL_TEST_TARGET, regime=regime)
    results["paper_orderings"] = orderings(final)
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    figure = args.out / "learning.png"
    plot(curves, f"{args.pool}: held-out reward@1 per policy and task group (mean over seeds, band = min-max)",
         figure)
    results["figure"] = str(figure)
    (args.out / "learning.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
