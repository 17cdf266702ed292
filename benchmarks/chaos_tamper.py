"""Chaos, run-folder tampering: damage one file of a finished run folder, then use the folder; nothing may break badly.

Issue 42's classes, one random damage per trial, applied to a copy of one finished ``tiny`` run
(trained once, 6 steps, checkpoints and validation every 2):

- ``json_type``: a JSON file of the folder (``run.json``, ``summary.json``, a status file, a planned GRPO
  file, the launch plan, a validation result, a checkpoint's trainer state or manifest, a SEE manifest)
  replaced by ``null``, ``[]``, ``"text"``, ``{}`` or its first half;
- ``special``: one of those files replaced by a FIFO or a folder (a reader must never wait on it);
- ``binary``: a torch file or safetensors of the newest checkpoint, or a SEE shard, cut to half or with
  bytes changed in the middle (same size);
- ``metrics``: a line of a policy's ``metrics/<policy>.jsonl`` cut short, a garbage line, a row whose step is
  text, or the merged-bytes marker made garbage;
- ``huge_log``: a 20 MB line appended to a worker's log;
- ``yaml``: ``config.yaml`` given a duplicate key, an alias bomb, or made a list;
- ``live``: while the killed run trains again (``--resume``, at its step 5), a status file set to ``null``,
  garbage appended to a policy's metrics, a 20 MB log line, the SEE folder deleted, or ``run.json`` set to
  ``null``: the launcher must end without a traceback and leave ``run.json`` true.

The folder is that of the finished run, or (at random) of the run killed near its end (``run.json``
"running", no summary, the last checkpoint and final models gone). Then it is used as a user would:
``mutualrl train --resume`` (a finished run prints its summary; a killed one, or one whose record no longer
says it finished, is rolled back to its newest intact checkpoint and trains the rest again),
``mutualrl see inspect`` and ``mutualrl plot``. Each trial checks: no traceback in any output, no command
running past :data:`HANG_S` (a hang), ``run.json`` true afterwards (done, failed or interrupted, never
"running"), and nothing silently lost: every validation result and train row there before is still there
(or re-made), unless the output names the file that lost it. Prints one JSON object::

    python benchmarks/chaos_tamper.py --trials 24 --seed 0 --out /tmp/tamper
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_trials import chaos_main, summary, trial_class  # noqa: E402

CLASSES = ("json_type", "special", "binary", "metrics", "huge_log", "yaml", "live")
STEPS = 6
HANG_S = 60.0
TRAIN_S = 600.0  # the base run, and a resume that validates and saves the last checkpoint again (training)
JSON_DAMAGE = ("null", "[]", '"text"', "{}", "half")
STATES = ("finished", "stopped")  # the folder of a run that ended, or of one killed near its end
LIVE_DAMAGE = ("status null", "metrics garbage", "huge log line", "see deleted", "run.json null")


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def train_command(run_dir: Path, resume: bool) -> list[str]:
    return [sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "-o", str(run_dir), "--max-steps",
            str(STEPS), "--set", "grpo.save_steps=2", "--set", "validation.every_steps=2", "--set",
            "validation.limit=20", *(["--resume"] if resume else [])]


def json_files(run: Path) -> list[Path]:
    """The run folder's JSON files a reader reads back (the classes of issue 42)."""
    found = [run / "run.json", run / "summary.json", run / "launch" / "plan.json"]
    found += sorted((run / "status").glob("*.json")) + sorted((run / "launch").glob("*.grpo.json"))
    found += sorted((run / "eval").glob("*/step-*.json"))
    found += sorted((run / "policies").glob("*/checkpoint-*/trainer_state.json"))
    found += sorted((run / "policies").glob("*/checkpoint-*/mutualrl-manifest.json"))
    found += sorted((run / "see").glob("step-*/*/*.json"))
    return [p for p in found if p.is_file()]


def binary_files(run: Path) -> list[Path]:
    newest = sorted((run / "policies").glob("*/checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))[-2:]
    found = [p for folder in newest for p in sorted(folder.iterdir()) if p.suffix in (".pt", ".pth", ".safetensors")]
    return found + sorted((run / "see").glob("step-*/*/*.arrow"))


def damage_json(path: Path, rng: random.Random) -> str:
    how = rng.choice(JSON_DAMAGE)
    text = path.read_text(errors="replace")
    path.write_text(text[: len(text) // 2] if how == "half" else how)
    return how


def damage_special(path: Path, rng: random.Random) -> str:
    path.unlink()
    if rng.random() < 0.5:
        os.mkfifo(path)
        return "fifo"
    path.mkdir()
    return "folder"


def damage_binary(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    if rng.random() < 0.5:
        path.write_bytes(bytes(data[: len(data) // 2]))
        return "truncated"
    middle = len(data) // 2
    data[middle:middle + 32] = bytes(rng.randrange(256) for _ in range(32))
    path.write_bytes(bytes(data))
    return "bytes changed"


def damage_metrics(run: Path, rng: random.Random) -> tuple[Path, str]:
    path = rng.choice(sorted((run / "metrics").glob("*.jsonl")))
    lines = path.read_text().splitlines()
    how = rng.choice(("cut", "garbage", "text step", "marker"))
    at = rng.randrange(len(lines))
    if how == "marker":
        marker = path.with_name(f".{path.stem}.merged")
        marker.write_text("not a number")
        return marker, how
    if how == "cut":
        lines[at] = lines[at][:60]
    elif how == "garbage":
        lines.insert(at, "\x00\xff garbage {")
    else:
        row = json.loads(lines[at])
        lines.append(json.dumps({**row, "step": "seven"}))
    path.write_text("\n".join(lines) + "\n")
    return path, how


def damage_yaml(run: Path, rng: random.Random) -> tuple[Path, str]:
    path = run / "config.yaml"
    text = path.read_text()
    how = rng.choice(("duplicate", "bomb", "list"))
    if how == "duplicate":
        path.write_text(text + "seed_again: 1\nseed_again: 2\n")
    elif how == "bomb":
        lines = ["bomb:", "  a: &a [x, x, x, x, x, x, x, x, x]"]
        lines += [f"  {c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefg", "bcdefgh", strict=True)]
        path.write_text(text + "\n".join(lines) + "\n")
    else:
        path.write_text("- 1\n- 2\n")
    return path, how


def tamper(run: Path, cls: str, rng: random.Random) -> dict[str, Any]:
    """Apply one damage of class ``cls`` to the run folder ``run``: {"class", "path", "how"}."""
    if cls == "json_type":
        path = rng.choice(json_files(run))
        how = damage_json(path, rng)
    elif cls == "special":
        path = rng.choice(json_files(run))
        how = damage_special(path, rng)
    elif cls == "binary":
        path = rng.choice(binary_files(run))
        how = damage_binary(path, rng)
    elif cls == "metrics":
        path, how = damage_metrics(run, rng)
    elif cls == "huge_log":
        path = rng.choice(sorted((run / "logs").glob("*.log")))
        with path.open("a") as fh:
            fh.write("x" * 20_000_000 + "\n")
        how = "20 MB line"
    else:
        path, how = damage_yaml(run, rng)
    return {"class": cls, "path": str(path.relative_to(run)), "how": how}


def kept_results(run: Path) -> tuple[set[tuple[str, str, int]], set[str]]:
    """(every (policy, kind, step) row of the merged metrics, every validation result file), as found now."""
    rows = set()
    try:
        text = (run / "metrics.jsonl").read_text(errors="replace") if (run / "metrics.jsonl").is_file() else ""
    except OSError:
        text = ""
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.add((str(row.get("policy")), str(row.get("kind")), row["step"]))
    results = {str(p.relative_to(run)) for p in (run / "eval").glob("*/step-*.json") if p.is_file()}
    return rows, results


def use(run: Path, log: Path) -> list[dict[str, Any]]:
    """Use the folder as a user would; each command's exit code, seconds, whether it hung and printed a traceback."""
    commands = [("resume", train_command(run, True), TRAIN_S),
                ("see inspect", [sys.executable, "-m", "mutualrl", "see", "inspect", str(run / "see")], HANG_S),
                ("plot", [sys.executable, "-m", "mutualrl", "plot", str(run), "--out", str(run / "plots")], HANG_S)]
    outcomes = []
    with log.open("a") as fh:
        for name, argv, limit in commands:
            started = time.time()
            try:
                done = subprocess.run(argv, env=child_env(), cwd=ROOT, capture_output=True, text=True,
                                      timeout=limit, errors="replace")
                output, code, hung = done.stdout + done.stderr, done.returncode, False
            except subprocess.TimeoutExpired as err:
                output, code, hung = str(err.stdout or "") + str(err.stderr or ""), None, True
            fh.write(f"$ {' '.join(argv)}\n{output[-20000:]}\n[rc {code}]\n")
            outcomes.append({"command": name, "rc": code, "seconds": round(time.time() - started, 1), "hung": hung,
                             "traceback": has_traceback(output), "output": output})
    return outcomes


TRACEBACK_RE = re.compile(r'Traceback \(most recent call last\)|File\s+"[^"]+",\s*line\s*\d+')


def has_traceback(output: str) -> bool:
    """A traceback, or the end of one (a worker's log tail the launcher shows), in a command's output."""
    return TRACEBACK_RE.search(output) is not None


def judge(run: Path, damage: dict[str, Any], before: tuple[set, set], outcomes: list[dict[str, Any]]) -> dict[str, int]:
    """The trial's failures, each 0 or 1."""
    said = "".join(o["output"] for o in outcomes)
    named = Path(damage["path"]).name in said
    try:
        status = json.loads((run / "run.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        status = None
    rows, results = kept_results(run)
    lost_rows, lost_results = before[0] - rows, before[1] - results
    return {
        "tracebacks": int(any(o["traceback"] for o in outcomes)),
        "hangs": int(any(o["hung"] for o in outcomes)),
        "run_json_untrue": int((status not in ("done", "failed", "interrupted") and not named)
                               or any(o.get("left_running") for o in outcomes)),
        "silently_lost": int(bool(lost_rows or lost_results) and not named),
    }


def trial(index: int, base: Path, out: Path, rng: random.Random, cls: str | None = None) -> dict[str, Any]:
    run = (out / f"tamper-{index:03d}" / base.name).resolve()  # same name: the SEE's run id (the folder's name) holds
    shutil.rmtree(run.parent, ignore_errors=True)
    shutil.copytree(base, run, symlinks=True)
    for path in run.rglob("*"):  # the copy is its own run: paths inside name the new folder
        if path.name in ("config.yaml", "plan.json") or path.suffix == ".yaml":
            path.write_text(path.read_text().replace(str(base), str(run)))
    cls = cls or rng.choice(CLASSES)
    state = "running" if cls == "live" else rng.choice(STATES)
    if state != "finished":
        stop(run)
    before = kept_results(run)
    log = out / f"tamper-{index:03d}.log"
    log.unlink(missing_ok=True)
    live: list[dict[str, Any]] = []
    if state == "running":
        damage, live = run_live(run, rng, log)
    else:
        damage = tamper(run, cls, rng)
    outcomes = live + use(run, log)
    verdict = judge(run, {**damage, "state": state}, before, outcomes)
    damage["state"] = state
    return {"trial": index, **damage, **verdict,
            "commands": [{k: v for k, v in o.items() if k != "output"} for o in outcomes]}


def tamper_live(run: Path, rng: random.Random) -> dict[str, Any]:
    """One damage a hand (or a bug) does to the folder of a run while it trains."""
    how = rng.choice(LIVE_DAMAGE)
    policy = rng.choice(sorted(p.stem for p in (run / "metrics").glob("*.jsonl")))
    path = {"status null": run / "status" / f"{policy}.json", "metrics garbage": run / "metrics" / f"{policy}.jsonl",
            "huge log line": run / "logs" / f"{policy}.log", "see deleted": run / "see",
            "run.json null": run / "run.json"}[how]
    if how == "see deleted":
        shutil.rmtree(path, ignore_errors=True)
    elif how in ("status null", "run.json null"):
        path.write_text("null")
    else:
        with path.open("ab") as fh:
            fh.write(b"x" * 20_000_000 + b"\n" if how == "huge log line" else b'\xff\xfe garbage\n{"step": "x"}\n')
    return {"class": "live", "path": str(path.relative_to(run)), "how": how}


def run_live(run: Path, rng: random.Random, log: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``--resume`` of the killed run, damaged once it trains again (step 5); the launcher must end, without a
    traceback, leaving ``run.json`` true."""
    from mutualrl.run_folder import read_status

    started = time.time()
    with log.open("a") as fh:
        launcher = subprocess.Popen(train_command(run, True), env=child_env(), cwd=ROOT, stdout=fh,
                                    stderr=subprocess.STDOUT)
    at = log.stat().st_size
    def training_again() -> bool:  # a status written by this launch's workers (the killed run's are older)
        return any(p.stat().st_mtime > started and read_status(p).get("step", 0) >= STEPS - 1
                   for p in (run / "status").glob("*.json"))

    while launcher.poll() is None and time.time() - started < TRAIN_S and not training_again():
        time.sleep(0.1)
    damage = tamper_live(run, rng)
    try:
        code, hung = launcher.wait(timeout=max(1.0, TRAIN_S - (time.time() - started))), False
    except subprocess.TimeoutExpired:
        launcher.kill()
        code, hung = launcher.wait(), True
    output = log.read_bytes()[at:].decode(errors="replace")
    try:
        left_running = json.loads((run / "run.json").read_text()).get("status") == "running"
    except (OSError, ValueError, AttributeError):
        left_running = True
    return damage, [{"command": "live resume", "rc": code, "seconds": round(time.time() - started, 1), "hung": hung,
                     "traceback": has_traceback(output), "output": output,
                     "left_running": left_running}]


def stop(run: Path) -> None:
    """Make the finished run a killed one: killed while saving its last checkpoint, before the summary; the
    resume then rolls back to the checkpoint before and trains the last steps again."""
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, "status": "running", "finished": None}))
    (run / "summary.json").unlink()
    for folder in (run / "policies").glob(f"*/checkpoint-{STEPS}"):
        shutil.rmtree(folder)
    for final in (run / "policies").glob("*/final"):
        shutil.rmtree(final)


def base_run(out: Path) -> Path:
    """The finished run every trial copies (trained once per ``out``)."""
    base = (out / "base").resolve()
    if not (base / "summary.json").is_file():
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run(train_command(base, False), env=child_env(), cwd=ROOT, check=True, timeout=TRAIN_S,
                       stdout=subprocess.DEVNULL)
    return base


def run_trials(trials: int, seed: int, out: Path, classes: list[str] | None = None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    started = time.time()
    base = base_run(out)
    schedule = classes or [trial_class(CLASSES, i, rng) for i in range(trials)]
    results = []
    for index, cls in enumerate(schedule):
        results.append(trial(index, base, out, rng, cls))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    failures = ("tracebacks", "hangs", "run_json_untrue", "silently_lost")
    return summary(results, seed, started, [r["trial"] for r in results if any(r[k] for k in failures)],
                   {k: sum(r[k] for r in results) for k in failures})


def main() -> None:
    chaos_main(__doc__, run_trials, 24, "chaos-tamper")


if __name__ == "__main__":
    main()
