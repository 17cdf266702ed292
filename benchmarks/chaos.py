"""Chaos: kill, damage or fill the disk of a short run at a random moment, resume, and check that nothing was lost.

Each trial trains the embedded ``tiny`` pool for a few steps (checkpoints every 2 steps,
validation every 2) and injects one or two faults, each at a random moment of a launch
(during start-up, or a random time into a random training step):

- ``launcher``: SIGKILL of ``mutualrl train`` (its workers must stop by themselves);
- ``worker``: SIGKILL of one policy worker (the launcher stops the pool and names it);
- ``all``: SIGKILL of the launcher and every worker at once (a dead node);
- ``interrupt``: SIGINT of the launcher (Ctrl-C: every process stopped within seconds);
- ``damage``: SIGKILL of everything once a checkpoint exists, then one file of the newest complete
  checkpoint of a random policy deleted or cut to half (weights, optimizer, scheduler, RNG
  or trainer state), before ``--resume`` (``chaos_faults.py``);
- ``disk_full``: the launch runs with ENOSPC injected at a random write (a random site:
  metrics, status, checkpoint, SEE shard or log, validation result, run.json, heartbeat).

After each fault it waits for every process of the run to end (a process still alive
30 s after the fault is an orphan), then ``mutualrl train --resume`` (itself the target of
the second fault, when there is one) until a resume finishes. It then checks: exactly
one train row per policy and step 1..max_steps and one validation row per validated step
in ``metrics.jsonl``, final models that load, an exchange that ``see inspect`` finds clean,
``run.json`` "done", no process of the run left, no run stuck (a launcher that outlived its
fault but did not end, or wrote ``run.json`` "running" and left it so), every damaged checkpoint named and
skipped by the next resume, a full disk reported as one line with ``run.json`` failed, and
no silent optimizer reset (every checkpoint's AdamW step count equals its step). Prints one
JSON object::

    python benchmarks/chaos.py --trials 30 --out /tmp/chaos
    python benchmarks/chaos.py --trials 10 --seed 3   # tests/test_chaos.py runs each fault kind once instead
    python benchmarks/chaos.py --every-damage         # one trial per damaged file kind and mode
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_faults import (  # noqa: E402
    CHECKPOINT_FILES,
    DAMAGE_MODES,
    damage_checkpoint,
    disk_full_spec,
    judge_damage,
    judge_disk_full,
    optimizer_resets,
)

from mutualrl.fault_injection import DISK_FULL_ENV  # noqa: E402

FAULTS = ("launcher", "worker", "all", "interrupt", "damage", "disk_full")
STEPS, SAVE_EVERY, VALIDATE_EVERY = 6, 2, 2
ORPHAN_WAIT_S = 30.0
LAUNCH_TIMEOUT_S, FINAL_TIMEOUT_S = 300, 900
# Counted per trial while it runs / over all trials; every one of MUST_BE_ZERO must be 0.
TRIAL_COUNTS = ("orphans", "stuck", "damage_unreported", "damaged_checkpoint_used", "disk_full_unclear")
MUST_BE_ZERO = ("rows_lost", "rows_duplicated", *TRIAL_COUNTS, "optimizer_resets", "models_unloadable",
                "see_issues")


def train_command(run_dir: Path, resume: bool) -> list[str]:
    """The user's command; a resume repeats it with --resume (as a user would, from the shell history)."""
    return [sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "-o", str(run_dir), "--max-steps", str(STEPS),
            "--set", f"grpo.save_steps={SAVE_EVERY}", "--set", f"validation.every_steps={VALIDATE_EVERY}",
            "--set", "validation.limit=20", *(["--resume"] if resume else [])]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def processes_of(run_dir: Path) -> list[int]:
    """Pids of every live process whose command line names the run folder (launcher and workers)."""
    needle = str(run_dir).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def inject(fault: str, launcher: subprocess.Popen, run_dir: Path, rng: random.Random) -> bool:
    """Apply ``fault``; False when there was nothing to hit (the launch ended first)."""
    workers = [p for p in processes_of(run_dir) if p != launcher.pid]
    deadline = time.time() + 30
    while fault == "worker" and not workers and launcher.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # a worker fault during start-up hits the first worker to appear
        workers = [p for p in processes_of(run_dir) if p != launcher.pid]
    if fault == "launcher":
        kill(launcher.pid, signal.SIGKILL)
    elif fault == "interrupt":
        kill(launcher.pid, signal.SIGINT)
    elif fault == "all":
        for pid in [launcher.pid, *workers]:
            kill(pid, signal.SIGKILL)
    elif workers:
        kill(rng.choice(workers), signal.SIGKILL)
    else:
        return False
    return True


class Gone(NamedTuple):
    orphans: list[int]  # processes of the run alive ORPHAN_WAIT_S after the launcher ended (then killed)
    hung: bool  # the launcher itself did not end within LAUNCH_TIMEOUT_S (then killed): a stuck run


def wait_until_gone(run_dir: Path, launcher: subprocess.Popen) -> Gone:
    """Wait for the launcher and every worker to end."""
    hung = False
    try:
        launcher.wait(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        hung = True
        kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
    deadline = time.time() + ORPHAN_WAIT_S
    while processes_of(run_dir) and time.time() < deadline:
        time.sleep(0.2)
    orphans = processes_of(run_dir)
    for pid in orphans:
        kill(pid, signal.SIGKILL)
    return Gone(orphans, hung)


def count_rows(run_dir: Path, policies: list[str]) -> dict[str, int]:
    """Rows lost and duplicated against one train row per step 1..STEPS and one eval row per validated step."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    expected_eval = sorted({0, STEPS, *range(VALIDATE_EVERY, STEPS + 1, VALIDATE_EVERY)})
    lost = duplicated = 0
    for policy in policies:
        for kind, steps in (("train", range(1, STEPS + 1)), ("eval", expected_eval)):
            seen = Counter(r["step"] for r in rows if r.get("policy") == policy and r.get("kind") == kind)
            lost += sum(1 for s in steps if seen[s] == 0)
            duplicated += sum(n - 1 for n in seen.values() if n > 1) + sum(n for s, n in seen.items() if s not in steps)
    return {"rows_lost": lost, "rows_duplicated": duplicated}


def check_outputs(run_dir: Path) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    from mutualrl.ops.exchange_inspect import inspect_exchange

    info = json.loads((run_dir / "run.json").read_text())
    policies = [p["name"] for p in info["policies"]]
    loadable = 0
    for policy in policies:
        try:
            AutoModelForCausalLM.from_pretrained(run_dir / "policies" / policy / "final")
            loadable += 1
        except (OSError, ValueError):
            pass
    report = inspect_exchange(run_dir / "see")
    resets = optimizer_resets(run_dir)
    return {**count_rows(run_dir, policies), "models_unloadable": len(policies) - loadable,
            "see_issues": len(report.issues) + len(report.failures), "status": info["status"],
            "optimizer_resets": len(resets), **({"reset_checkpoints": resets} if resets else {})}


def progress(run_dir: Path) -> int:
    """The furthest step any policy reported (0 before the workers are up)."""
    steps = [0]
    for path in (run_dir / "status").glob("*.json"):
        try:
            steps.append(int(json.loads(path.read_text()).get("step", 0)))
        except (OSError, ValueError):
            pass
    return max(steps)


def wait_for_moment(rng: random.Random, run_dir: Path, launcher: subprocess.Popen,
                    after_checkpoint: bool = False) -> None:
    """A random moment of a launch: during start-up (planning, loading) or within a random training step
    (``after_checkpoint``: a step after the first checkpoint, so that there is one to damage)."""
    moment = rng.choice([*range(SAVE_EVERY + 1, STEPS)] if after_checkpoint else ["startup", *range(STEPS)])
    if moment == "startup":
        deadline = time.time() + rng.uniform(0.2, 8.0)
        while time.time() < deadline and launcher.poll() is None:
            time.sleep(0.05)
        return
    while progress(run_dir) < moment and launcher.poll() is None:
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 1.5))


def is_run(run_dir: Path) -> bool:
    """A launch got far enough to mark the folder: continue it with --resume (else start it anew)."""
    return (run_dir / ".mutualrl-run").exists()


def launch(run_dir: Path, log: Any, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``mutualrl train`` into ``run_dir`` (``--resume`` once the folder is a run), its output into ``log``."""
    log.flush()
    return subprocess.Popen(train_command(run_dir, is_run(run_dir)), env=env or child_env(), stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=catch_ctrl_c)


def catch_ctrl_c() -> None:
    """In the launcher's process before it starts: SIGINT at its default, as in a terminal, so the ``interrupt``
    fault is a user's Ctrl-C even when this harness was itself started with SIGINT ignored (``cmd &`` in a
    script), which the launcher would keep ignoring."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_record(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def record_mtime(run_dir: Path) -> int | None:
    """When ``run.json`` was last written (ns), None without one."""
    try:
        return (run_dir / "run.json").stat().st_mtime_ns
    except OSError:
        return None


def left_running(run_dir: Path, mtime_before: int | None) -> bool:
    """The launch that began when ``run.json`` had ``mtime_before`` left it saying "running": a stuck run.

    A launch stopped before it took the run's lock (a Ctrl-C in its first seconds) never writes the
    record; a "running" there is an earlier SIGKILLed launcher's, which no process can correct and the
    next launch marks interrupted, so it is not this launch's doing."""
    return run_record(run_dir).get("status") == "running" and record_mtime(run_dir) != mtime_before


def disk_full_launch(run_dir: Path, log: Any, rng: random.Random, tally: Counter) -> tuple[str | None, int | None]:
    """One launch with ENOSPC at a random write; (its spec when the injection fired, its exit code)."""
    spec = disk_full_spec(rng)
    start = end_of(log)
    workers = {path: path.stat().st_size for path in (run_dir / "logs").glob("*.log")}
    before = record_mtime(run_dir)
    launcher = launch(run_dir, log, {**child_env(), DISK_FULL_ENV: spec})
    gone = wait_until_gone(run_dir, launcher)
    tally["orphans"] += len(gone.orphans)
    tally["stuck"] += int(gone.hung or (launcher.returncode != 0 and left_running(run_dir, before)))
    worker_logs = "".join(read_from(str(path), workers.get(path, 0)) for path in (run_dir / "logs").glob("*.log"))
    verdict = judge_disk_full(read_from(log.name, start), launcher.returncode, run_record(run_dir), worker_logs)
    if verdict is None:
        return None, launcher.returncode
    tally.update(verdict)
    return spec, launcher.returncode


def end_of(log: Any) -> int:
    """Where the next launch's output begins (every process of the run has ended)."""
    log.flush()
    return os.path.getsize(log.name)


def read_from(path: str, offset: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.seek(offset)
        return fh.read()


def trial(index: int, rng: random.Random, out: Path, planned: tuple[str, ...] | None = None) -> dict[str, Any]:
    """One run with one or two faults (random kinds, or ``planned`` in order), resumed until it finishes."""
    run_dir = (out / f"trial-{index:03d}").resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    logs = out / f"trial-{index:03d}.log"
    faults: list[str] = []
    details: list[str] = []
    tally: Counter = Counter()
    damage: dict[str, Any] | None = None  # the last damaged checkpoint, until a launch chose where to resume
    damage_at = 0

    def judge_pending_damage() -> None:
        nonlocal damage
        if damage is not None:
            verdict = judge_damage(damage, read_from(str(logs), damage_at))
            if verdict is not None:
                tally.update(verdict)
                damage = None

    with logs.open("w") as log:
        for attempt in range(len(planned) if planned else rng.choice((1, 2))):
            fault = planned[attempt] if planned else rng.choice(FAULTS)
            if fault == "disk_full":
                spec, returncode = disk_full_launch(run_dir, log, rng, tally)
                judge_pending_damage()
                if spec is None or returncode == 0:  # finished: nothing more to resume
                    faults += ["disk_full"] if spec else []
                    details += [f"disk_full:{spec}"] if spec else []
                    break
                faults.append(fault)
                details.append(f"disk_full:{spec}")
                continue
            fault, _, variant = fault.partition(":")  # "damage:<kind>:<mode>" plans which file and how
            before = record_mtime(run_dir)
            launcher = launch(run_dir, log)
            wait_for_moment(rng, run_dir, launcher, after_checkpoint=fault == "damage")
            if launcher.poll() is not None:  # finished (or failed) before the fault
                break
            if inject("all" if fault == "damage" else fault, launcher, run_dir, rng):
                faults.append(fault if fault != "damage" else "all")
            gone = wait_until_gone(run_dir, launcher)
            tally["orphans"] += len(gone.orphans)
            tally["stuck"] += int(gone.hung)
            if fault in ("worker", "interrupt") and not gone.hung and left_running(run_dir, before):
                tally["stuck"] += 1  # the launcher outlived the fault but left the run marked as running
            judge_pending_damage()
            if fault == "damage":
                damage = damage_checkpoint(run_dir, rng, *(variant.split(":") if variant else ()))
                damage_at = end_of(log)
                details.append(f"damage:{damage['kind']}:{damage['mode']}" if damage else "damage:none (no checkpoint)")
                faults += ["damage"] if damage else []
        try:
            final = subprocess.run(train_command(run_dir, is_run(run_dir)), env=child_env(), stdout=log,
                                   stderr=subprocess.STDOUT, cwd=ROOT, timeout=FINAL_TIMEOUT_S)
            final_rc = final.returncode
        except subprocess.TimeoutExpired:
            final_rc, tally["stuck"] = None, tally["stuck"] + 1
    judge_pending_damage()
    result: dict[str, Any] = {"trial": index, "faults": faults, "details": details, "final_rc": final_rc,
                              **{key: tally[key] for key in TRIAL_COUNTS}}
    if final_rc == 0:
        result.update(check_outputs(run_dir))
    result["orphans"] += len(processes_of(run_dir))
    return result


def run_trials(trials: int, seed: int, out: Path, schedule: list[tuple[str, ...]] | None = None) -> dict[str, Any]:
    """``trials`` random trials, or one trial per entry of ``schedule`` (its fault kinds, in order)."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    started = time.time()
    results = []
    for index in range(len(schedule) if schedule else trials):
        results.append(trial(index, rng, out, schedule[index] if schedule else None))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    faults = Counter(f for r in results for f in r["faults"])
    failed = [r["trial"] for r in results if r["final_rc"] != 0 or r.get("status") != "done"]
    return {
        "trials": len(results), "seed": seed, "faults_injected": sum(faults.values()), "faults_by_kind": dict(faults),
        "fault_details": dict(Counter(d for r in results for d in r["details"])),
        **{key: sum(r.get(key, 0) for r in results) for key in MUST_BE_ZERO},
        "failed_trials": failed, "seconds": round(time.time() - started, 1), "per_trial": results,
    }


def every_damage() -> list[tuple[str, ...]]:
    """One trial per damaged file kind and mode (``--every-damage``): ``("damage:<kind>:<mode>",)``."""
    return [(f"damage:{kind}:{mode}",) for kind in CHECKPOINT_FILES for mode in DAMAGE_MODES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault schedule")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "chaos")
    parser.add_argument("--every-damage", action="store_true",
                        help="instead of random trials, one per damaged file kind and mode (10 trials)")
    args = parser.parse_args()
    summary = run_trials(args.trials, args.seed, args.out, every_damage() if args.every_damage else None)
    print(json.dumps(summary))
    sys.exit(0 if not summary["failed_trials"] and not any(summary[key] for key in MUST_BE_ZERO) else 1)


if __name__ == "__main__":
    main()
