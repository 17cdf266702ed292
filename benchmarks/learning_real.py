"""Learning benchmark on real pretrained models: does sharing help when nothing is built to make it help?

Trains the real-model pool (``--pool``, default ``smol-qa``: SmolLM2-135M-Instruct and
Gemma-3-270M, docs/pools.md "Real pretrained models on a paper benchmark") with each regime and seed, all with the
recipe's settings (only ``--regime`` differs), and reports each policy's greedy held-out
reward@1 before → after, SGT's rescues and the rescue log-prob (first → last logged steps).
The weaker and the stronger policy are fixed from the step-0 validation, which is the same
for every run (same weights, greedy decoding). Targets (issue 29): SGT − standalone, same
seed, ≥ +0.05 for the weaker policy on every seed and ≥ 0.00 for the stronger::

    python benchmarks/learning_real.py                         # standalone+sgt on 1-3, other regimes on 1
    python benchmarks/learning_real.py --quick                 # standalone+sgt on seed 1
    python benchmarks/learning_real.py --seeds 17 --regimes standalone,sgt --out DIR
    python benchmarks/learning_real.py --seeds '' --regimes prp-peer,prp-learner \
        --reuse benchmarks/results/learning-real --out DIR   # add runs to the committed ones

Every (regime, seed) is a real ``mutualrl train`` run; runs already finished in ``--out``
are reused (delete the folder to start again). Each finished run also leaves
``OUT/results/<regime>-seed<N>-{summary.json,metrics.jsonl,answers.json}``: what the JSON
and the figure are built from. ``--reuse DIR`` takes runs from such a folder (the committed
``benchmarks/results/learning-real``) instead of training them again, so a benchmark can
be completed across sessions and machines. Writes ``OUT/learning-real.json`` (the keys of
``learning-tiny.json``: ``roles``, ``regimes``, ``sgt_minus_standalone``, ``paper_orderings``,
``wall_seconds``) and ``OUT/learning-real.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from learning import REGIME_ARGS, group_curves, orderings, plot, run_one, spread  # noqa: E402

DEFAULT_POOL = "smol-qa"
MAIN_REGIMES = ("standalone", "sgt")  # every seed of --seeds
OTHER_REGIMES = ("xgrpo", "grpo-randpert", "prp-peer", "prp-learner")  # every seed of --other-seeds
WEAKER_TARGET, STRONGER_TARGET = 0.05, 0.0


def roles_from(summary: dict[str, Any]) -> dict[str, str]:
    """``policy -> "weaker" | "stronger"`` by step-0 held-out reward@1 (ties: the first policy is weaker)."""
    before = {p: e["eval_before"] for p, e in summary["policies"].items()}
    weaker = min(before, key=lambda p: (before[p], list(before).index(p)))
    return {p: "weaker" if p == weaker else "stronger" for p in before}


def sgt_gains(runs: dict[str, dict[int, dict]], roles: dict[str, str]) -> dict[str, Any]:
    """SGT − standalone final held-out reward@1 per policy, per seed both regimes ran; targets checked."""
    seeds = sorted(set(runs.get("sgt", {})) & set(runs.get("standalone", {})))
    rows = {seed: {p: round(runs["sgt"][seed]["policies"][p]["eval_after"]
                            - runs["standalone"][seed]["policies"][p]["eval_after"], 6) for p in roles}
            for seed in seeds}
    if not rows:
        return {}
    by_role = {role: [rows[s][p] for s in seeds for p, r in roles.items() if r == role]
               for role in ("weaker", "stronger")}
    worst = {role: min(v) for role, v in by_role.items() if v}
    return {"seeds": rows, "worst_weaker_gain": worst.get("weaker"), "worst_stronger_change": worst.get("stronger"),
            "target": {"weaker_gain_at_least": WEAKER_TARGET, "stronger_change_at_least": STRONGER_TARGET},
            "target_met_every_seed": worst.get("weaker", -1) >= WEAKER_TARGET
            and worst.get("stronger", -1) >= STRONGER_TARGET}


def mechanism(run_dir: Path, policy: str) -> dict[str, Any]:
    """Per-step SGT gate rate and rescue log-prob of one policy (what the learner got from its peer)."""
    gate, logp, reward = [], [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        obj = json.loads(line)
        if obj.get("kind") != "train" or obj.get("policy") != policy:
            continue
        reward.append(obj.get("reward_mean"))
        if obj.get("sgt/gate_rate") is not None:
            gate.append(obj["sgt/gate_rate"])
        if obj.get("sgt/rescue_logp") is not None:
            logp.append(obj["sgt/rescue_logp"])
    out: dict[str, Any] = {"train_reward_per_step": reward}
    if gate:
        out["gate_rate_per_step"] = gate
        out["gate_rate_mean"] = sum(gate) / len(gate)
    if logp:
        out["rescue_logp_per_step"] = logp
    out.update(run_answers(run_dir, policy))
    return out


def answer_histogram(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What greedy answered on the held-out prompts, against the best constant answer.

    ``constant_ceiling`` is the accuracy of always giving the most frequent gold answer:
    a policy that learned only an answer prior (not the questions) cannot beat it.
    """
    answers = Counter(str(r.get("extracted")) for r in records)
    gold = Counter(str(r.get("answer")) for r in records)
    top, count = answers.most_common(1)[0]
    return {"answers": dict(sorted(answers.items())), "top_answer": top, "top_answer_share": count / len(records),
            "accuracy": sum(float(r.get("score", 0.0)) for r in records) / len(records),
            "constant_ceiling": max(gold.values()) / len(records), "accuracy_by_group": accuracy_by_group(records)}


def accuracy_by_group(records: list[dict[str, Any]]) -> dict[str, float]:
    """Accuracy per group of the task (``synthetic-arith``'s families); empty for a task without groups."""
    from mutualrl.tasks.base import TaskExample
    from mutualrl.tasks.registry import get_task

    tasks: dict[str, Any] = {}
    scores: dict[str, list[float]] = {}
    for r in records:
        if "task" not in r:  # records of an older format
            continue
        task = tasks.setdefault(r["task"], get_task(r["task"]))
        group = task.group_of(TaskExample(r["prompt_id"], r.get("prompt", ""), str(r["answer"]), r["task"]))
        if group is not None:
            scores.setdefault(group, []).append(float(r.get("score", 0.0)))
    return {group: sum(v) / len(v) for group, v in sorted(scores.items())}


def answer_drift(run_dir: Path, policy: str) -> dict[str, Any]:
    """Greedy answer histogram at the first and the last validation (``eval/<policy>/step-*.json``)."""
    files = sorted((run_dir / "eval" / policy).glob("step-*.json"))
    if not files:
        return {}
    first, last = (json.loads(f.read_text())["records"] for f in (files[0], files[-1]))
    return {"answers_before": answer_histogram(first), "answers_after": answer_histogram(last)}


def save_run(run_dir: Path, results_dir: Path, answers: dict[str, Any]) -> None:
    """Keep what the benchmark reads of a finished run: ``<run>-summary.json``, ``-metrics.jsonl``, ``-answers.json``
    (each policy's greedy answer histograms before/after; the eval files they come from are not kept)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "metrics.jsonl"):
        shutil.copyfile(run_dir / name, results_dir / f"{run_dir.name}-{name}")
    (results_dir / f"{run_dir.name}-answers.json").write_text(json.dumps(answers, indent=1))


def restore_run(reuse: Path, run_dir: Path) -> bool:
    """Put a run saved by :func:`save_run` back as ``run_dir`` (summary and metrics); False if ``reuse`` lacks it."""
    if (run_dir / "summary.json").exists():  # already there (trained or restored earlier)
        return True
    if not (reuse / f"{run_dir.name}-summary.json").exists():
        return False
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "metrics.jsonl"):
        shutil.copyfile(reuse / f"{run_dir.name}-{name}", run_dir / name)
    answers = reuse / f"{run_dir.name}-answers.json"
    if answers.exists():
        shutil.copyfile(answers, run_dir / "answers.json")
    return True


def run_answers(run_dir: Path, policy: str) -> dict[str, Any]:
    """Greedy answer histograms of ``policy``: from its eval files, else from a restored ``answers.json``."""
    drift = answer_drift(run_dir, policy)
    if not drift and (run_dir / "answers.json").exists():
        drift = json.loads((run_dir / "answers.json").read_text()).get(policy, {})
    return drift


def regime_entry(by_seed: dict[int, dict], roles: dict[str, str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"seeds": sorted(by_seed)}
    for policy in roles:
        rows = [s["policies"][policy] for s in by_seed.values()]
        entry[policy] = {
            "before": spread([r["eval_before"] for r in rows]),
            "final_reward@1": spread([r["eval_after"] for r in rows]),
            "per_seed": {seed: {k: s["policies"][policy].get(k) for k in (
                "eval_before", "eval_after", "sgt_rescues", "rescue_logp_first", "rescue_logp_last", "steps")}
                for seed, s in by_seed.items()},
            "seconds": [s["seconds"] for s in by_seed.values()],
        }
    return entry


def run_order(regimes: list[str], seeds: list[int], other_seeds: list[int]) -> list[tuple[str, int]]:
    """Seed by seed, standalone then SGT first (the pairs the targets compare), then the other regimes."""
    order = [(r, s) for s in seeds for r in regimes if r in MAIN_REGIMES]
    return order + [(r, s) for s in other_seeds for r in regimes if r not in MAIN_REGIMES]


def write_results(args: argparse.Namespace, runs: dict[str, dict[int, dict]],
                  curves: dict[str, dict[str, dict[str, list]]], mechanisms: dict[str, dict[int, dict]],
                  seconds: float) -> dict[str, Any]:
    """Write ``learning-real.json`` and the figure for the runs finished so far; returns the results."""
    first = next(iter(next(iter(runs.values())).values()))
    roles = roles_from(first)
    results: dict[str, Any] = {"pool": args.pool, "command": " ".join(sys.argv), "roles": roles,
                               "regimes": {r: regime_entry(by_seed, roles) for r, by_seed in runs.items()}}
    final = {r: {p: e[p]["final_reward@1"]["mean"] for p in roles} for r, e in results["regimes"].items()}
    results["sgt_minus_standalone"] = sgt_gains(runs, roles)
    results["paper_orderings"] = orderings(final)
    results["mechanism"] = mechanisms
    results["wall_seconds"] = round(seconds, 1)
    figure = args.out / "learning-real.png"
    # Real models move by a few points around chance: zoom to the data rather than 0..1.
    plot(curves, f"{args.pool}: held-out reward@1 per policy (mean over seeds, band = min-max)", figure, ylim=None)
    results["figure"] = str(figure)
    (args.out / "learning-real.json").write_text(json.dumps(results, indent=1))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default=DEFAULT_POOL, help="Pool (recipe) to train.")
    parser.add_argument("--regimes", default=",".join(MAIN_REGIMES + OTHER_REGIMES), help="Regimes, comma-separated.")
    parser.add_argument("--seeds", default="1,2,3", help="Seeds of standalone and sgt.")
    parser.add_argument("--other-seeds", default="1", help="Seeds of the other regimes.")
    parser.add_argument("--quick", action="store_true", help="standalone and sgt on seed 1 only (checking a change).")
    parser.add_argument("--max-steps", type=int, default=None, help="Override the recipe's steps (every run).")
    parser.add_argument("--out", type=Path, default=BENCH.parent / "runs" / "learning-real", help="Output folder.")
    parser.add_argument("--set", action="append", default=[], help="Extra --set overrides for every run.")
    parser.add_argument("--reuse", type=Path, default=None,
                        help="Folder of saved runs (OUT/results of an earlier benchmark, or the committed "
                             "benchmarks/results/learning-real): its runs are taken instead of trained again.")
    args = parser.parse_args(argv)
    regimes = list(MAIN_REGIMES) if args.quick else [r for r in args.regimes.split(",") if r]
    unknown = [r for r in regimes if r not in REGIME_ARGS]
    if unknown:
        parser.error(f"--regimes: unknown {', '.join(unknown)}; known: {', '.join(REGIME_ARGS)}")
    seeds = [1] if args.quick else [int(s) for s in args.seeds.split(",") if s]
    other_seeds = [int(s) for s in args.other_seeds.split(",") if s]
    extra = [x for item in args.set for x in ("--set", item)]
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs: dict[str, dict[int, dict]] = {}
    curves: dict[str, dict[str, dict[str, list]]] = {}
    mechanisms: dict[str, dict[int, dict]] = {}
    order = run_order(regimes, seeds, other_seeds)
    if args.reuse is not None:  # every saved run of the pool, then what this call adds
        saved = sorted(f.name[: -len("-summary.json")] for f in args.reuse.glob("*-seed*-summary.json"))
        kept = [(name.rsplit("-seed", 1)[0], int(name.rsplit("-seed", 1)[1])) for name in saved]
        order = [*[run for run in kept if run[0] in REGIME_ARGS], *[run for run in order if run not in kept]]
    for regime, seed in order:
        run_dir = args.out / f"{regime}-seed{seed}"
        if args.reuse is None or not restore_run(args.reuse, run_dir):
            run_dir = run_one(args.pool, regime, seed, args.out, args.max_steps, extra)
        summary = json.loads((run_dir / "summary.json").read_text())
        save_run(run_dir, args.out / "results", {p: run_answers(run_dir, p) for p in summary["policies"]})
        runs.setdefault(regime, {})[seed] = summary
        mechanisms.setdefault(regime, {})[seed] = {p: mechanism(run_dir, p) for p in summary["policies"]}
        for policy in summary["policies"]:
            for group, curve in group_curves(run_dir, policy).items():
                curves.setdefault(regime, {}).setdefault(policy, {}).setdefault(group, []).append(curve)
        # Written after every run, so a long benchmark stopped half-way still leaves its measured part.
        results = write_results(args, runs, curves, mechanisms, time.perf_counter() - started)
    gains = results["sgt_minus_standalone"]
    roles = results["roles"]
    if gains:
        for seed, row in gains["seeds"].items():
            print("seed", seed, "SGT - standalone:", ", ".join(f"{p} ({roles[p]}) {v:+.3f}" for p, v in row.items()))
        print("targets met on every seed:", gains["target_met_every_seed"])
    print("paper orderings:", results["paper_orderings"])
    print(f"wrote {args.out / 'learning-real.json'} ({results['wall_seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
