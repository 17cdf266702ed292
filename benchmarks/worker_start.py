"""What a policy process's imports cost with and without the garbage collector (``mutualrl/host/process_start.py``).

A worker imports torch, transformers, TRL, datasets and mutualrl's trainer stack before it builds a model; the
suite starts about two hundred of them and a user's run one per policy and rank. Each round starts two fresh
Python processes that import the worker module and then make ``worker.run_policy``'s imports inside the pause
(its first two, then :func:`mutualrl.training.worker.import_training_stack`, the function the worker calls), one
with the collector on (before the change) and one with it paused as the worker now does, alternating which goes
first, and reads each one's CPU seconds (user + system,
``getrusage``: less noisy than wall time on a shared box). Prints one line per process, then JSON with the
medians and their ratio::

    python benchmarks/worker_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

IMPORTS = """
import contextlib, resource, sys, types
from mutualrl.host.process_start import collector_paused_for_imports, imports_done
import mutualrl.training.worker as worker  # its top-level imports come before the pause, as in a worker
with (collector_paused_for_imports() if sys.argv[1] == "paused" else contextlib.nullcontext()):
    import mutualrl.training.grpo_args, mutualrl.training.trackers  # run_policy's first imports (TRL's config)
    worker.import_training_stack(types.SimpleNamespace(use_vllm=False))  # then the rest, as run_policy does
    if sys.argv[1] == "paused":
        imports_done()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024)
"""


def one(mode: str) -> tuple[float, int]:
    """CPU seconds and peak RSS (MiB) of one fresh process doing the worker's imports with the collector ``mode``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", IMPORTS, mode], capture_output=True, text=True, env=env,
                          check=True, timeout=600)
    cpu, rss = done.stdout.split()[-2:]
    return float(cpu), int(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="pairs of processes (collector on, paused)")
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, int]]] = {"on": [], "paused": []}
    for round_ in range(args.rounds):
        for mode in (("on", "paused") if round_ % 2 == 0 else ("paused", "on")):
            cpu, rss = one(mode)
            runs[mode].append((cpu, rss))
            print(f"round {round_} collector {mode:6s}: {cpu:.2f} s CPU, peak RSS {rss} MiB", flush=True)
    medians = {mode: statistics.median(cpu for cpu, _ in values) for mode, values in runs.items()}
    print(json.dumps({"rounds": args.rounds, "cpu_s": runs, "median_cpu_s": medians,
                      "paused_over_on": round(medians["paused"] / medians["on"], 3),
                      "peak_rss_mib_median": {m: statistics.median(r for _, r in v) for m, v in runs.items()}}))


if __name__ == "__main__":
    main()
