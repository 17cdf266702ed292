"""A short run with its workers forked from a zygote (the test suite's fork server, ``tests/fork_server/``) beside the
same run with each worker started as its own interpreter, as a user's run starts them.

Each round runs ``mutualrl train --pool tiny --regime sgt`` for ``--steps`` steps twice, once per mode, alternating
which goes first; the zygote is warm (a run before the rounds started it, as the suite's first run does). A forked
worker is a child of the zygote, not of the launcher, so the CPU figure is the whole machine's (``/proc/stat``,
user + nice + system, over the run): run it on an otherwise idle machine. Prints one line per run, then JSON with
the medians and their ratios (forked / fresh)::

    python benchmarks/forked_start.py [--rounds 4] [--steps 2] [--out benchmarks/results/forked-start.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORK_SERVER_ENV = "MUTUALRL_FORK_SERVER"
FORK_SITE = ROOT / "tests" / "fork_server"
"""Its ``sitecustomize`` plugs the zygotes into the launcher's worker start where ``FORK_SERVER_ENV`` names a folder."""


def machine_cpu_seconds() -> float:
    """CPU time of every process on the machine since boot: user, nice and system (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system = (int(v) for v in fields[:3])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def one_run(folder: Path, name: str, steps: int, zygotes: Path | None) -> tuple[float, float]:
    """Wall and machine CPU seconds of one run; its workers forked from the zygotes in ``zygotes`` or fresh."""
    pythonpath = os.pathsep.join(filter(None, [str(FORK_SITE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, FORK_SERVER_ENV: str(zygotes) if zygotes else ""}
    argv = [sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "--regime", "sgt", "-o", str(folder / name),
            "--set", f"grpo.max_steps={steps}"]
    cpu, wall = machine_cpu_seconds(), time.monotonic()
    subprocess.run(argv, env=env, cwd=folder, check=True, capture_output=True, timeout=900)
    return time.monotonic() - wall, machine_cpu_seconds() - cpu


def wait_for_zygote(zygotes: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not list(zygotes.glob("*.sock")):
        if time.monotonic() > deadline or list(zygotes.glob("*.failed")):
            sys.exit(f"no zygote started in {zygotes}: {[p.read_text() for p in zygotes.glob('*.log')]}")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="pairs of runs, alternating which mode goes first")
    parser.add_argument("--steps", type=int, default=2, help="training steps of each run")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="forked-start-"))
    zygotes = folder / "zygotes"
    zygotes.mkdir(mode=0o700)  # a folder no one else may write (the fork server uses no other)
    try:
        one_run(folder, "warm-up", args.steps, zygotes)  # starts the zygote, as the suite's first run does
        wait_for_zygote(zygotes)
        figures: dict[str, list[tuple[float, float]]] = {"fresh": [], "forked": []}
        for round_ in range(args.rounds):
            order = ("fresh", "forked") if round_ % 2 == 0 else ("forked", "fresh")
            for mode in order:
                wall, cpu = one_run(folder, f"{mode}-{round_}", args.steps, zygotes if mode == "forked" else None)
                figures[mode].append((wall, cpu))
                print(f"round {round_} {mode:6s} wall {wall:6.2f} s  machine CPU {cpu:6.2f} s", flush=True)
        forks = (zygotes / "starts.log").read_text().count("forked:")
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the zygote leaves when its folder is gone
    medians = {mode: {"wall_s": statistics.median(w for w, _ in rows), "cpu_s": statistics.median(c for _, c in rows)}
               for mode, rows in figures.items()}
    result = {"rounds": args.rounds, "steps": args.steps, "forked_workers": forks, "runs": figures, "median": medians,
              "ratio_forked_to_fresh": {k: medians["forked"][k] / medians["fresh"][k] for k in ("wall_s", "cpu_s")}}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
