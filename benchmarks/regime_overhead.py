"""Per-step overhead of the sharing regimes relative to standalone GRPO, on one pool.

Targets (issue: the three sharing regimes): XGRPO <= 1.02x, SGT <= 1.05x standalone; PRP
reported (the paper: about one extra rollout's scoring). Every regime trains the same
pool for the same steps with validation off; rounds alternate the regimes so machine
noise spreads evenly. Also reported: the exchange's own share of a policy's step (building
records, publishing, reading, the regime's transform -- measured inside the step) and the
share spent waiting at the barrier for the slower peer. The pool's step time is, per step, the slowest policy's TRL
``step_time`` (generation, scoring, the SEE round-trip and barrier, and the update), and
the figure per regime is the median over steps and rounds::

    python benchmarks/regime_overhead.py [--pool tiny] [--steps 12] [--rounds 2]
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
    # Control: the full exchange and per-step barrier, with XGRPO's sharing switched off (advantages
    # equal standalone's bit for bit, so both runs follow the same trajectory). Its ratio is the cost
    # of running the policies in lock-step, separate from any regime's work.
    "lockstep-control": ["--regime", "xgrpo", "--set", "regime.xgrpo.cross_model_factor=0",
                         "--set", "regime.xgrpo.length_correction=0", "--set", "regime.xgrpo.advantage_clip=1e9"],
}
NO_VALIDATION = ["--set", "validation.every_steps=0", "--set", "validation.at_start=false",
                 "--set", "validation.limit=0"]


EXCHANGE_KEYS = ("mutual/build_s", "mutual/publish_s", "mutual/read_s", "mutual/transform_s")


def pool_step_times(run_dir: Path, skip: int) -> tuple[list[float], list[float], list[float]]:
    """Per step: the slowest policy's step time; and per policy-step the exchange's own share of the
    step (build records, publish, read, regime transform) and the barrier wait share."""
    per_step: dict[int, list[float]] = defaultdict(list)
    own, wait = [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        obj = json.loads(line)
        if obj.get("kind") != "train" or obj.get("step_time") is None or int(obj["step"]) <= skip:
            continue
        per_step[int(obj["step"])].append(float(obj["step_time"]))
        own.append(sum(float(obj.get(k) or 0.0) for k in EXCHANGE_KEYS) / float(obj["step_time"]))
        wait.append(float(obj.get("mutual/wait_s") or 0.0) / float(obj["step_time"]))
    return [max(times) for _, times in sorted(per_step.items())], own, wait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="tiny")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip", type=int, default=2, help="first steps dropped (warm-up)")
    parser.add_argument("--regimes", default="standalone,lockstep-control,xgrpo,sgt,prp-peer")
    args = parser.parse_args()
    regimes = args.regimes.split(",")
    times: dict[str, list[float]] = {r: [] for r in regimes}
    own: dict[str, list[float]] = {r: [] for r in regimes}
    wait: dict[str, list[float]] = {r: [] for r in regimes}
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
                step_times, own_share, wait_share = pool_step_times(run_dir, args.skip)
                times[regime] += step_times
                own[regime] += own_share
                wait[regime] += wait_share
    base = statistics.median(times["standalone"])
    out = {"pool": args.pool, "steps": args.steps, "rounds": args.rounds,
           "standalone_step_s_median": round(base, 4), "ratio_to_standalone": {},
           "exchange_share_of_step": {}, "barrier_wait_share_of_step": {}}
    for regime in regimes:
        out["ratio_to_standalone"][regime] = round(statistics.median(times[regime]) / base, 4)
        out["exchange_share_of_step"][regime] = round(statistics.median(own[regime]), 4)
        out["barrier_wait_share_of_step"][regime] = round(statistics.median(wait[regime]), 4)
    out["targets"] = {"xgrpo": "<= 1.02", "sgt": "<= 1.05", "prp-peer": "reported"}
    if "lockstep-control" in times:
        lock = statistics.median(times["lockstep-control"])
        out["ratio_to_lockstep_control"] = {r: round(statistics.median(times[r]) / lock, 4) for r in regimes}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
