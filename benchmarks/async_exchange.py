"""Bounded-staleness exchange (issue 19): how much barrier wait it removes, and what it costs in learning.

Two parts, each a set of real ``mutualrl train`` runs of the embedded ``tiny`` pool with SGT:

1. **Wait.** A pool made heterogeneous on purpose (``MUTUALRL_DEBUG_STEP_DELAY``, a sleep per
   step that changes wall time only, never results) under lock-step (``see.max_staleness=0``)
   and with ``S = 2``, in two shapes:
   - ``slow-peer``: tiny-sp sleeps ``--delay`` every step, so its step time is several times
     tiny-bpe's (measured: the ratio of own-work time per step, wait excluded, is printed);
   - ``jitter``: equal mean speed, tiny-bpe slow on even steps and tiny-sp on odd ones.
   For the fast policy (tiny-bpe) it reports the share of its step time spent waiting at the
   SEE (``mutual/wait_s`` / interval between its steps), over the steps after the first. The
   slow-peer shape also runs ``S = 2`` with ``see.catch_up`` (the slow policy skips rounds).
2. **Learning.** The default recipe (only ``--seed`` and the SEE settings vary) with standalone
   GRPO, SGT at ``S = 0`` and SGT at ``S = 2`` with the slow peer (so the fast policy really
   reads stale rounds), held-out reward@1 per policy and task group; SGT's gain over
   standalone on each policy's weak group (fixed from the step-0 validation) at ``S = 2`` as a
   fraction of its lock-step size; and SGT at ``S = 2`` with ``see.catch_up`` beside the same
   slow peer (which then trains only some rounds): both policies' weak-group gains, the rounds
   the slow one trained and the wall time of each run.

    python benchmarks/async_exchange.py --quick     # 12-step wait runs, learning on seed 1 (~15 min)
    python benchmarks/async_exchange.py             # 30-step wait runs, learning on seeds 1-3

Runs already finished in ``--out`` are reused (delete the folder to start again). Prints one JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]



FAST, SLOW = "tiny-bpe", "tiny-sp"
STALENESS = 2
CATCH_UP = f"S={STALENESS} + catch_up"
WAIT_TARGET = 0.25  # stale wait share <= 1/4 of lock-step's
LEARNING_TARGET = 0.80  # SGT's weak-group gain at S=2 keeps >= 80% of its lock-step size


def train(run_dir: Path, args: list[str], delay: str = "") -> Path:
    if (run_dir / "summary.json").exists():
        return run_dir
    cmd = [sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "-o", str(run_dir), "--overwrite", *args]
    env = {**os.environ, "MUTUALRL_DEBUG_STEP_DELAY": delay}
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode != 0:
        raise SystemExit(f"run {run_dir.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"  {run_dir.name}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    return run_dir


def train_rows(run_dir: Path, policy: str) -> list[dict[str, Any]]:
    path = run_dir / "metrics" / f"{policy}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted((r for r in rows if r["kind"] == "train"), key=lambda r: r["step"])


def trained_rounds(run_dir: Path, policy: str) -> int:
    """Rounds ``policy`` trained (the read lines of its consumption log: skipped rounds have none)."""
    from mutualrl.see.consumption_log import read_consumption

    return len(read_consumption(run_dir / "see", policy))


def wait_profile(run_dir: Path) -> dict[str, Any]:
    """Per policy: mean interval between steps, mean wait, own work (interval - wait), wait share (steps 2..N)."""
    out: dict[str, Any] = {}
    for policy in (FAST, SLOW):
        rows = train_rows(run_dir, policy)
        steps = rows[1:]
        intervals = [b["time"] - a["time"] for a, b in zip(rows, steps, strict=False)]
        waits = [r.get("mutual/wait_s", 0.0) for r in steps]
        ages = [r["mutual/peer_age"] for r in steps if r.get("mutual/peer_age") is not None]
        out[policy] = {
            "interval_s": statistics.fmean(intervals),
            "wait_s": statistics.fmean(waits),
            "own_s": statistics.fmean(i - w for i, w in zip(intervals, waits, strict=True)),
            "wait_share": sum(waits) / sum(intervals),
            "peer_age_mean": statistics.fmean(ages) if ages else 0.0,
            "peer_age_max": max(ages) if ages else 0,
        }
    return out


def wait_part(out: Path, steps: int, delay: float) -> dict[str, Any]:
    shapes = {"slow-peer": f"{SLOW}={delay}", "jitter": f"{FAST}={delay}@even,{SLOW}={delay}@odd"}
    common = ["--regime", "sgt", "--max-steps", str(steps), "--set", "validation.every_steps=0",
              "--set", "validation.limit=20", "--seed", "1"]
    result: dict[str, Any] = {}
    for shape, spec in shapes.items():
        profiles = {}
        variants = {"S=0": ["--set", "see.max_staleness=0"],
                    f"S={STALENESS}": ["--set", f"see.max_staleness={STALENESS}"]}
        if shape == "slow-peer":
            variants[CATCH_UP] = [*variants[f"S={STALENESS}"], "--set", "see.catch_up=true"]
        for name, settings in variants.items():
            tag = name.replace(" + ", "-").replace("=", "")
            run = train(out / f"wait-{shape}-{tag}-{steps}steps", [*common, *settings], delay=spec)
            profiles[name] = wait_profile(run)
            profiles[name]["trained_rounds"] = {p: trained_rounds(run, p) for p in (FAST, SLOW)}
        lock, stale = profiles["S=0"][FAST]["wait_share"], profiles[f"S={STALENESS}"][FAST]["wait_share"]
        own = profiles["S=0"]
        result[shape] = {
            "throttle": spec,
            "step_time_ratio_slow_over_fast": own[SLOW]["own_s"] / own[FAST]["own_s"],
            "fast_wait_share_lockstep": lock,
            f"fast_wait_share_S{STALENESS}": stale,
            "stale_over_lockstep": stale / lock if lock > 0 else None,
            "target_met": lock > 0 and stale <= WAIT_TARGET * lock,
        }
        if CATCH_UP in profiles:
            caught = profiles[CATCH_UP][FAST]["wait_share"]
            result[shape].update({
                f"fast_wait_share_S{STALENESS}_catch_up": caught,
                "catch_up_over_lockstep": caught / lock if lock > 0 else None,
                "catch_up_target_met": lock > 0 and caught <= WAIT_TARGET * lock,
                "slow_trained_rounds_catch_up": profiles[CATCH_UP]["trained_rounds"][SLOW],
            })
        result[shape]["profiles"] = profiles
    return result


def weak_groups(summary: dict[str, Any]) -> dict[str, str]:
    return {p: min(e["groups_before"], key=e["groups_before"].get) for p, e in summary["policies"].items()}


def learning_part(out: Path, seeds: list[int], delay: float) -> dict[str, Any]:
    per_seed: dict[int, Any] = {}
    for seed in seeds:
        runs = {
            "standalone": train(out / f"learn-standalone-seed{seed}", ["--regime", "standalone", "--seed", str(seed)]),
            "sgt-S0": train(out / f"learn-sgt-S0-seed{seed}", ["--regime", "sgt", "--seed", str(seed)]),
            f"sgt-S{STALENESS}": train(out / f"learn-sgt-S{STALENESS}-seed{seed}",
                                       ["--regime", "sgt", "--seed", str(seed), "--set",
                                        f"see.max_staleness={STALENESS}"], delay=f"{SLOW}={delay}"),
            "sgt-catch-up": train(out / f"learn-sgt-S{STALENESS}-catch-up-seed{seed}",
                                  ["--regime", "sgt", "--seed", str(seed), "--set", f"see.max_staleness={STALENESS}",
                                   "--set", "see.catch_up=true"], delay=f"{SLOW}={delay}"),
        }
        summaries = {k: json.loads((v / "summary.json").read_text()) for k, v in runs.items()}
        weak = weak_groups(summaries["standalone"])
        rows = {}
        for policy, group in weak.items():
            after = {k: s["policies"][policy]["groups_after"][group] for k, s in summaries.items()}
            gain0 = round(after["sgt-S0"] - after["standalone"], 6)
            gain_s = round(after[f"sgt-S{STALENESS}"] - after["standalone"], 6)
            gain_c = round(after["sgt-catch-up"] - after["standalone"], 6)
            rows[policy] = {"weak_group": group, "after": after, "gain_S0": gain0, f"gain_S{STALENESS}": gain_s,
                            "kept": gain_s / gain0 if gain0 > 0 else None, "gain_catch_up": gain_c,
                            "kept_catch_up": gain_c / gain0 if gain0 > 0 else None,
                            "trained_rounds_catch_up": trained_rounds(runs["sgt-catch-up"], policy),
                            "final_all": {k: s["policies"][policy]["eval_after"] for k, s in summaries.items()}}
        stale_rows = train_rows(runs[f"sgt-S{STALENESS}"], FAST)
        ages = [r["mutual/peer_age"] for r in stale_rows if r.get("mutual/peer_age") is not None]
        per_seed[seed] = {"policies": rows, "fast_peer_age_mean": statistics.fmean(ages) if ages else None,
                          "seconds": {k: s["seconds"] for k, s in summaries.items()}}
    kept = [r["kept"] for s in per_seed.values() for r in s["policies"].values() if r["kept"] is not None]
    caught = [r["kept_catch_up"] for s in per_seed.values() for r in s["policies"].values()
              if r["kept_catch_up"] is not None]
    return {"seeds": per_seed, "worst_kept": min(kept) if kept else None,
            "target_met_every_seed": bool(kept) and min(kept) >= LEARNING_TARGET,
            "worst_kept_catch_up": min(caught) if caught else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12-step wait runs; learning on seed 1 only.")
    parser.add_argument("--seeds", default=None, help="Learning seeds, comma-separated (default 1,2,3; --quick: 1).")
    parser.add_argument("--delay", type=float, default=1.0, help="Seconds the throttled policy sleeps per step.")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "async-exchange")
    parser.add_argument("--skip-learning", action="store_true", help="Only the wait part.")
    ns = parser.parse_args()
    seeds = [int(s) for s in (ns.seeds or ("1" if ns.quick else "1,2,3")).split(",")]
    ns.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"staleness": STALENESS, "delay_s": ns.delay,
                              "wait": wait_part(ns.out, 12 if ns.quick else 30, ns.delay)}
    if not ns.skip_learning:
        report["learning"] = learning_part(ns.out, seeds, ns.delay)
    print(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
