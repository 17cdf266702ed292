"""Per-step overhead of the sharing regimes relative to standalone GRPO, on one pool.

Targets (issue: the three sharing regimes): XGRPO <= 1.02x, SGT <= 1.05x standalone; PRP
reported (the paper: about one extra rollout's scoring). Every regime trains the same
pool for the same steps with validation off; rounds alternate the regimes so machine
noise spreads evenly. Figures per regime:

* ``ratio_to_standalone``: median over steps and rounds of the pool's step time (per step,
  the slowest policy's TRL ``step_time``: generation, scoring, the SEE round-trip and
  barrier, the update), over standalone's;
* ``throughput_ratio_to_standalone``: wall-clock seconds per step of the whole pool (from
  the moment every policy has logged step ``skip`` to the moment every policy has logged
  the last step), over standalone's -- what a user waits for;
* ``ratio_to_lockstep_control``: the same against a control that runs the full exchange and
  per-step barrier with XGRPO's sharing switched off (advantages equal standalone's), so the
  ratio isolates the regime's own work from the cost of running in lock-step;
* ``exchange_share_of_step``: the exchange's own work inside a policy's step (building
  records, publishing, reading, the regime transform), summed over steps / summed step time;
* ``barrier_wait_share_of_step``: time waiting at the barrier for the slower peer, likewise;
* ``predicted_lockstep_cost``: from standalone's own per-policy step times, the pool time if
  every step waited for its slowest policy (sum over steps of the max) over the time of the
  slowest free-running policy (max over policies of the sum). Synchronous exchange cannot
  beat it: it is the price of a per-step barrier when per-step times vary::

    python benchmarks/regime_overhead.py [--pool tiny] [--steps 14] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGIMES = {
    "standalone": ["--regime", "standalone"],
    "xgrpo": ["--regime", "xgrpo"],
    "sgt": ["--regime", "sgt"],
    "prp-peer": ["--regime", "prp", "--prp-denominator", "peer"],
    "prp-learner": ["--regime", "prp", "--prp-denominator", "learner"],
    # Control: the full exchange and per-step barrier, with XGRPO's sharing switched off (advantages
    # equal standalone's bit for bit, so both runs follow the same trajectory). Its ratio is the cost
    # of running the policies in lock-step, separate from any regime's work.
    "lockstep-control": ["--regime", "xgrpo", "--set", "regime.xgrpo.cross_model_factor=0",
                         "--set", "regime.xgrpo.length_correction=0", "--set", "regime.xgrpo.advantage_clip=1e9"],
}
NO_VALIDATION = ["--set", "validation.every_steps=0", "--set", "validation.at_start=false",
                 "--set", "validation.limit=1"]  # the end-of-run validation, after the timed steps


EXCHANGE_KEYS = ("mutual/build_s", "mutual/publish_s", "mutual/read_s", "mutual/transform_s")


def read_train_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if row.get("kind") == "train" and row.get("step_time") is not None]


def pool_figures(run_dir: Path, skip: int) -> dict[str, object]:
    """One run's figures over the steps after ``skip`` (see the module docstring)."""
    all_rows = read_train_rows(run_dir)
    rows = [row for row in all_rows if int(row["step"]) > skip]
    per_step: dict[int, list[float]] = defaultdict(list)
    per_policy: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        per_step[int(row["step"])].append(float(row["step_time"]))
        per_policy[row["policy"]].append(float(row["step_time"]))
    done_at: dict[int, float] = {}
    for row in all_rows:
        step = int(row["step"])
        done_at[step] = max(done_at.get(step, 0.0), float(row["time"]))
    last = max(done_at)
    total_step_time = sum(float(row["step_time"]) for row in rows)
    return {
        "pool_step_times": [max(times) for _, times in sorted(per_step.items())],
        "throughput_s_per_step": (done_at[last] - done_at[skip]) / (last - skip),
        "exchange_s": sum(sum(float(row.get(k) or 0.0) for k in EXCHANGE_KEYS) for row in rows),
        "wait_s": sum(float(row.get("mutual/wait_s") or 0.0) for row in rows),
        "step_s": total_step_time,
        "sum_of_max": sum(max(times) for times in per_step.values()),
        "max_of_sums": max(sum(times) for times in per_policy.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="tiny")
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip", type=int, default=2, help="first steps dropped (warm-up)")
    parser.add_argument("--regimes", default="standalone,lockstep-control,xgrpo,sgt,prp-peer,prp-learner")
    args = parser.parse_args()
    regimes = args.regimes.split(",")
    times: dict[str, list[float]] = {r: [] for r in regimes}
    throughput: dict[str, list[float]] = {r: [] for r in regimes}
    sums: dict[str, dict[str, float]] = {r: defaultdict(float) for r in regimes}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            order = regimes if rnd % 2 == 0 else list(reversed(regimes))
            for regime in order:
                run_dir = Path(tmp) / f"{regime}-{rnd}"
                cmd = [sys.executable, "-m", "mutualrl", "train", "--pool", args.pool, *REGIMES[regime],
                       "--max-steps", str(args.steps), "-o", str(run_dir), *NO_VALIDATION]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"{regime} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
                figures = pool_figures(run_dir, args.skip)
                times[regime] += figures["pool_step_times"]
                throughput[regime].append(figures["throughput_s_per_step"])
                for key in ("exchange_s", "wait_s", "step_s", "sum_of_max", "max_of_sums"):
                    sums[regime][key] += figures[key]
                print(f"  {regime} round {rnd}: {figures['throughput_s_per_step']:.3f} s/step", file=sys.stderr)
    base = statistics.median(times["standalone"])
    base_throughput = statistics.median(throughput["standalone"])
    out = {"pool": args.pool, "steps": args.steps, "rounds": args.rounds, "skip": args.skip,
           "standalone_step_s_median": round(base, 4),
           "standalone_throughput_s_per_step": round(base_throughput, 4),
           "ratio_to_standalone": {}, "throughput_ratio_to_standalone": {},
           "exchange_share_of_step": {}, "barrier_wait_share_of_step": {}}
    for regime in regimes:
        out["ratio_to_standalone"][regime] = round(statistics.median(times[regime]) / base, 4)
        out["throughput_ratio_to_standalone"][regime] = round(statistics.median(throughput[regime]) / base_throughput, 4)
        out["exchange_share_of_step"][regime] = round(sums[regime]["exchange_s"] / sums[regime]["step_s"], 4)
        out["barrier_wait_share_of_step"][regime] = round(sums[regime]["wait_s"] / sums[regime]["step_s"], 4)
    if "lockstep-control" in times:
        lock = statistics.median(times["lockstep-control"])
        lock_throughput = statistics.median(throughput["lockstep-control"])
        out["ratio_to_lockstep_control"] = {r: round(statistics.median(times[r]) / lock, 4) for r in regimes}
        out["throughput_ratio_to_lockstep_control"] = {
            r: round(statistics.median(throughput[r]) / lock_throughput, 4) for r in regimes}
    out["predicted_lockstep_cost"] = round(sums["standalone"]["sum_of_max"] / sums["standalone"]["max_of_sums"], 4)
    out["targets"] = {"xgrpo": "<= 1.02", "sgt": "<= 1.05", "prp-peer": "reported", "prp-learner": "reported"}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
