"""Chaos, user code and user data: one random fault per trial in what a user brings to a 2-step ``tiny`` run.

The classes (each trial draws one fault of one class):

- ``rows``: a row of the user's dataset (``task.name=dataset``) with an empty prompt, a lone surrogate, a prompt
  over ``task.max_prompt_chars``, chat content parts of another type than text, a column whose type changes, a
  row without ``prompt``: the launch must refuse in one line naming the file, the row and the column, before
  any worker starts; or chat content given as text parts: the run must train;
- ``code``: between the run and ``--resume``, its reward module edited, or the resume run from another folder
  holding a module of the same name (which writes a file when imported): refused in one line naming the module,
  and that other module never imported;
- ``copy``: the run's data copy (``RUN/data/*.jsonl``) edited, then ``--resume`` or ``mutualrl eval RUN``: refused
  in one line naming the file;
- ``folder``: a symlink loop put in the run folder, then ``--resume``; a policy's final weights cut short, then
  ``eval RUN``: one line naming it;
- ``see``: a second run started with the first's ``see.dir`` while the first trains: refused in one line, and
  the first run ends "done";
- ``trust``: the run folder names code the command does not: its ``config.yaml`` and a forged ``inputs.json``
  (the module's real path and sha256) name an installed module that writes a file when imported, then ``eval
  RUN`` or ``--resume``; or a recipe names a pool ``../../esc`` or a ``task.name`` that is a function
  (``tempfile:mkdtemp``): refused in one line naming it (``--allow-code``), nothing of it imported or called;
- ``finished``: ``--resume --max-steps 1`` of a finished 2-step run, ``eval -o README.json`` beside a
  ``README.md``, ``eval -o RUN/config.yaml``: refused in one line, and the final models, metrics rows and the
  files are what they were;
- ``values``: a reward function returning a list, a string, a complex number, ``inf``, ``1e308`` or ``NaN``: the
  run stops naming the function and the value; a reward module calling ``sys.exit(0)`` at import: refused naming
  it; a column mixing types in a list: refused naming file, row and column; a prompt holding U+2028: trains;
- ``writes``: a link planted where a command writes, pointing outside (``plot -o DIR``'s figure, ``report -o``'s
  file, ``RUN/plots``, ``RUN/distill``, a sweep's run folder or log), a sweep's run folder with files but no
  ``config.yaml``: refused in one line naming it, the user's file and the outside folder untouched; a task group
  named ``all``: ``report`` keeps it apart from the overall reward@1;
- ``stall``: a reward function that never returns in the step-0 validation, ``launch.stall_timeout_s=30``: the run
  stops naming the function and "scoring the validation of step 0";
- ``orphan``: ``kill -9`` of a sweep while its run trains: the run stops too (``interrupted``), and the sweep run
  again finishes it.

A trial holds when every command ended as it must (exit 0 for what trains, 2 with one ``error:`` line naming
what is asked for a refusal), printed no traceback, and nothing ran that must not. Prints one JSON object::

    python benchmarks/chaos_user_inputs.py --trials 12 --seed 0 --out /tmp/chaos-user
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_trials import chaos_main, summary, trial_class  # noqa: E402

CLASSES = ("rows", "code", "copy", "folder", "see", "trust", "finished", "values", "writes", "stall", "orphan")
LIMIT_S = 300.0
REWARDS = "def exact(completions, answer, **kwargs):\n    return [float(str(answer) in str(c)) for c in completions]\n"
HOSTILE = "import pathlib\npathlib.Path('IMPORTED').write_text('ran')\n" + REWARDS
ALLOW = ("--allow-code", "g_rewards")
"""What a command that opens the run folder says to import its reward module (a run folder chooses no code)."""
TRACEBACK_RE = re.compile(r'Traceback \(most recent call last\)|File\s+"[^"]+",\s*line\s*\d+')
GOOD_ROWS = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(12)]
PARTS = [{"role": "user", "content": [{"type": "text", "text": "2+"}, {"type": "text", "text": "2="}]}]
ROW_FAULTS = {  # fault -> (the bad row, what the one line must say; None: the run trains)
    "empty prompt": ({"prompt": "", "answer": "1"}, "empty prompt"),
    "lone surrogate": ({"prompt": "a\ud800", "answer": "1"}, "not valid Unicode"),
    "huge prompt": ({"prompt": "x" * 300_000, "answer": "1"}, "more than task.max_prompt_chars"),
    "image part": ({"prompt": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                    "answer": "1"}, "'image_url' is not text"),
    "column type": ({"prompt": "5+5=", "answer": 10}, "holds number, but row 0 holds text"),
    "no prompt": ({"question": "5+5=", "answer": "10"}, "no field 'prompt'"),
    "text parts": ({"prompt": PARTS, "answer": "4"}, None),
}


def mutualrl(args: list[str], cwd: Path, limit: float = LIMIT_S, path: str = "") -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + (os.pathsep + path if path else "")}
    started = time.time()
    try:
        done = subprocess.run([sys.executable, "-m", "mutualrl", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=limit, errors="replace")
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:
        output, code = str(err.stdout or "") + str(err.stderr or ""), None
    return {"args": args[:1], "rc": code, "seconds": round(time.time() - started, 1), "output": output}


def train_args(run: Path, *extra: str) -> list[str]:
    return ["train", "--pool", "tiny", "--regime", "xgrpo", "--max-steps", "2", "-o", str(run), "--set",
            "task.name=dataset", "--set", "task.source=rows.jsonl", "--set", "task.reward_funcs=[g_rewards.exact]",
            *extra]


def workdir(out: Path, index: int, rows: list[dict[str, Any]]) -> Path:
    home = out / f"trial-{index:03d}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    (home / "g_rewards.py").write_text(REWARDS)
    (home / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return home


def refused(outcome: dict[str, Any], *needles: str) -> bool:
    lines = [line for line in outcome["output"].splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return outcome["rc"] == 2 and last.startswith("error:") and all(n in last for n in needles)


def trial_rows(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    fault = rng.choice(sorted(ROW_FAULTS))
    bad, needle = ROW_FAULTS[fault]
    rows = [*GOOD_ROWS[:5], bad, *GOOD_ROWS[5:]]
    if fault == "text parts":
        rows = [{"prompt": PARTS, "answer": str(i)} for i in range(12)]
    (home / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ran = mutualrl(train_args(home / "run"), home)
    ok = ran["rc"] == 0 if needle is None else refused(ran, "rows.jsonl", "row 5", needle)
    return fault, [ok], [ran]


def trained(home: Path) -> dict[str, Any]:
    return mutualrl(train_args(home / "run"), home)


def trial_code(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    first = trained(home)
    fault = rng.choice(["module edited", "module elsewhere"])
    cwd = home
    if fault == "module edited":
        (home / "g_rewards.py").write_text(REWARDS.replace("float(", "0.0 * float("))
    else:
        cwd = home / "elsewhere"
        cwd.mkdir()
        (cwd / "g_rewards.py").write_text(HOSTILE)
    again = mutualrl(["train", "-o", str(home / "run"), "--resume", "--max-steps", "3", *ALLOW], cwd)
    return fault, [first["rc"] == 0, refused(again, "g_rewards"), not (cwd / "IMPORTED").exists()], [first, again]


def trial_copy(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    first = trained(home)
    name = rng.choice(["train.jsonl", "eval.jsonl"])
    path = home / "run" / "data" / name
    text = path.read_text()
    row = json.loads(text.splitlines()[0])
    path.write_text(json.dumps({**row, "prompt": "7+7=", "prompt_id": "dataset/added"}) + "\n" + text)  # a row added
    command = rng.choice(["resume", "eval"])
    args = (["train", "-o", str(home / "run"), "--resume", "--max-steps", "3", *ALLOW] if command == "resume"
            else ["eval", str(home / "run"), "--device", "cpu", "--limit", "2", *ALLOW])
    again = mutualrl(args, home)
    return f"{name} edited, {command}", [first["rc"] == 0, refused(again, name, "changed")], [first, again]


def trial_folder(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    first = trained(home)
    run = home / "run"
    if rng.random() < 0.5:
        (run / "metrics" / "a").symlink_to(run / "metrics" / "b")
        (run / "metrics" / "b").symlink_to(run / "metrics" / "a")
        again = mutualrl(["train", "-o", str(run), "--resume", "--max-steps", "3", *ALLOW], home)
        return "symlink loop, resume", [first["rc"] == 0, refused(again, "symlink loop")], [first, again]
    weights = next((run / "policies").glob("*/final/model.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    again = mutualrl(["eval", str(run), "--device", "cpu", "--limit", "2", *ALLOW], home)
    return "final weights cut, eval", [first["rc"] == 0, refused(again, str(weights))], [first, again]


def trial_see(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    shared = home / "shared-see"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    first = subprocess.Popen([sys.executable, "-m", "mutualrl", *train_args(home / "a", "--set", f"see.dir={shared}",
                                                                            "--max-steps", "4")],
                             cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + LIMIT_S
    while not (home / "a" / "run.json").exists() and first.poll() is None and time.time() < deadline:  # launched
        time.sleep(0.2)
    second = mutualrl(train_args(home / "b", "--set", f"see.dir={shared}"), home)
    output, _ = first.communicate(timeout=LIMIT_S)
    status = json.loads((home / "a" / "run.json").read_text()).get("status") if (home / "a" / "run.json").exists() \
        else None
    ran = {"args": ["train"], "rc": first.returncode, "seconds": None, "output": output}
    return "second live run", [refused(second, "in use by the live run"), status == "done"], [ran, second]


def trial_trust(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    fault = rng.choice(["forged record, eval", "forged record, resume", "pool name", "task.name function"])
    if fault == "pool name":
        ran = mutualrl(train_args(home / "run", "--set", "pool.name=../../esc"), home)
        return fault, [refused(ran, "pool.name"), not (home.parent / "esc").exists()], [ran]
    if fault == "task.name function":
        ran = mutualrl(train_args(home / "run", "--set", "task.name=tempfile:mkdtemp"), home)
        return fault, [refused(ran, "not a mutualrl.tasks.base.Task subclass")], [ran]
    first = trained(home)
    site = home / "site"  # an installed module: on PYTHONPATH, outside the run folder
    site.mkdir()
    (site / "g_hostile.py").write_text(f"import pathlib\npathlib.Path({str(home / 'IMPORTED')!r}).write_text('ran')\n")
    forge_plugin(home / "run", "g_hostile", site / "g_hostile.py")
    args = (["eval", str(home / "run"), "--device", "cpu", "--limit", "2", *ALLOW] if fault.endswith("eval")
            else ["train", "-o", str(home / "run"), "--resume", "--max-steps", "3", *ALLOW])
    again = mutualrl(args, home, path=str(site))
    return fault, [first["rc"] == 0, refused(again, "--allow-code g_hostile"), not (home / "IMPORTED").exists()], \
        [first, again]


def forge_plugin(run: Path, module: str, file: Path) -> None:
    """What whoever can write the run folder can do: name ``module`` in its config and vouch for it in its record."""
    import hashlib

    config = run / "config.yaml"
    config.write_text(config.read_text().replace("plugins: []", f"plugins:\n- {module}"))
    inputs = json.loads((run / "inputs.json").read_text())
    inputs["code"][module] = {"file": str(file.resolve()), "sha256": hashlib.sha256(file.read_bytes()).hexdigest()}
    (run / "inputs.json").write_text(json.dumps(inputs))


def trial_finished(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    first = trained(home)
    run = home / "run"
    before = {p: p.read_bytes() for p in [run / "metrics.jsonl", *sorted(run.glob("policies/*/final/*.safetensors"))]}
    fault = rng.choice(["resume shorter", "eval over README.md", "eval over config.yaml"])
    if fault == "resume shorter":
        again = mutualrl(["train", "-o", str(run), "--resume", "--max-steps", "1", *ALLOW], home)
        ok = refused(again, "deletes no finished work")
    else:
        kept = home / "README.md" if fault == "eval over README.md" else run / "config.yaml"
        kept.write_text(kept.read_text() if kept.exists() else "finished work\n")
        before[kept] = kept.read_bytes()
        target = home / "README.json" if kept.name == "README.md" else kept
        again = mutualrl(["eval", str(run), "--device", "cpu", "--limit", "2", "-o", str(target), *ALLOW], home)
        ok = refused(again, "exists", "--overwrite")
    unchanged = all(path.exists() and path.read_bytes() == data for path, data in before.items())
    return fault, [first["rc"] == 0, ok, unchanged], [first, again]


BAD_VALUES = {"list": "[1.0]", "str": "'1'", "complex": "1j", "inf": "float('inf')", "1e308": "-1e308",
              "nan": "float('nan')"}


def trial_values(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    fault = rng.choice([*BAD_VALUES, "exit at import", "mixed list column", "U+2028 in a prompt"])
    if fault in BAD_VALUES:
        (home / "g_rewards.py").write_text(f"def exact(completions, **kwargs):\n    return [{BAD_VALUES[fault]} "
                                           "for c in completions]\n")
        ran = trained(home)
        lines = [line for line in ran["output"].splitlines() if line.startswith("error:")]
        return fault, [ran["rc"] not in (0, None), bool(lines) and "reward function 'exact' returned" in lines[0]], \
            [ran]
    if fault == "exit at import":
        (home / "g_rewards.py").write_text("import sys\nsys.exit(0)\n")
        ran = trained(home)
        return fault, [refused(ran, "g_rewards", "sys.exit(0)")], [ran]
    rows = [*GOOD_ROWS[:5], {**GOOD_ROWS[5], "tags": ["sum", 2]}, *GOOD_ROWS[6:]]
    if fault == "mixed list column":
        rows = [{**row, "tags": ["sum"]} for row in GOOD_ROWS[:5]] + rows[5:]
        (home / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        ran = trained(home)
        return fault, [refused(ran, "rows.jsonl", "row 5", "column 'tags'")], [ran]
    rows = [{**row, "prompt": row["prompt"] + "\u2028"} for row in GOOD_ROWS]
    (home / "rows.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    ran = trained(home)
    return fault, [ran["rc"] == 0], [ran]


def plant(link: Path, target: Path) -> None:
    """A link at ``link`` (its folder made) to ``target``, a file of the user's or a folder outside."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


WRITE_FAULTS = ("plot -o link", "report -o link", "plots/ link", "distill/ link", "sweep run link",
                "sweep log link", "sweep run without config", "group named all")


def trial_writes(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    """A link planted where a command writes (pointing outside), a sweep's run folder without config.yaml, a task
    group named ``all``: refused in one line (or, for ``all``, kept apart from the overall reward@1), the user's
    file and the outside folder untouched."""
    fault = rng.choice(WRITE_FAULTS)
    outside, victim = home / "outside", home / "victim.txt"
    outside.mkdir()
    victim.write_text("the user's own file\n")
    sweep = ["sweep", "-o", str(home / "SW"), "--regimes", "standalone", "--seeds", "1", "--pool", "tiny",
             "--dry-run"]
    if fault.startswith("sweep"):
        run = home / "SW" / "standalone-seed1"
        if fault == "sweep run link":
            plant(run, outside)
        elif fault == "sweep log link":
            plant(home / "SW" / "logs" / "standalone-seed1.log", victim)
        else:
            run.mkdir(parents=True)
            (run / "run.json").write_text('{"status": "done"}')
        ran = mutualrl(sweep, home)
        needle = "no config.yaml" if fault == "sweep run without config" else "a link"
        return fault, [refused(ran, needle), not any(outside.iterdir()), victim.read_text().startswith("the user")], \
            [ran]
    first = trained(home)
    run = home / "run"
    if fault == "group named all":
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        for row in rows:
            if row.get("kind") == "eval":
                row["eval/group/all/reward@1"] = -0.5  # no reward@1 is negative: the overall figure cannot be it
        (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        ran = mutualrl(["report", str(run), "-f", "json"], home)
        try:
            rows = json.JSONDecoder().raw_decode(ran["output"][ran["output"].index("{"):])[0]["rows"]
        except (ValueError, KeyError):
            rows = []
        overall = [r["values"] for r in rows if r["task_group"] == "all"]
        apart = [r["values"] for r in rows if r["task_group"] == "all (task group)"]
        held = bool(overall) and all(-0.5 not in v for v in overall) and bool(apart) and all(v == [-0.5] for v in apart)
        return fault, [first["rc"] == 0, ran["rc"] == 0, held], [first, ran]
    commands = {"plot -o link": (["plot", str(run), "-o", str(home / "figs")], home / "figs" / "validation_reward.png"),
                "report -o link": (["report", str(run), "-f", "markdown", "-o", str(home / "t.md")], home / "t.md"),
                "plots/ link": (["plot", str(run)], run / "plots"),
                "distill/ link": (["distill", str(run), "--learner", "tiny-bpe", *ALLOW], run / "distill")}
    args, link = commands[fault]
    shutil.rmtree(link, ignore_errors=True)
    plant(link, outside if link.name in ("plots", "distill") else victim)
    ran = mutualrl(args, home)
    untouched = not any(outside.iterdir()) and victim.read_text() == "the user's own file\n"
    return fault, [first["rc"] == 0, refused(ran, link.name), untouched], [first, ran]


STALLING_REWARD = ("import time\ncalls = []\ndef exact(completions, answer, **kwargs):\n    calls.append(1)\n"
                   "    time.sleep(3600)  # the first call scores the step-0 validation: it never returns\n"
                   "    return [0.0] * len(completions)\n")


def trial_stall(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    """A reward function that never returns during the step-0 validation, a 30 s stall limit: the run stops within
    it (plus start-up) naming the function and what it was doing."""
    (home / "g_rewards.py").write_text(STALLING_REWARD)
    ran = mutualrl(train_args(home / "run", "--set", "launch.stall_timeout_s=30"), home, limit=240)
    said = " ".join(ran["output"].split())
    named = "in reward function 'exact', scoring the validation of step 0" in said
    return "hangs in validation", [ran["rc"] not in (0, None), named], [ran]


def trial_orphan(home: Path, rng: random.Random) -> tuple[str, list[bool], list[dict[str, Any]]]:
    """``kill -9`` of a sweep while its run trains: the run stops too (SIGTERM, its own stop), its run.json says
    ``interrupted``, and the sweep run again resumes and finishes it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    args = [sys.executable, "-m", "mutualrl", "sweep", "-o", str(home / "SW"), "--regimes", "standalone", "--seeds",
            "1", "--pool", "tiny", "--max-steps", "6"]
    sweep = subprocess.Popen(args, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = home / "SW" / "standalone-seed1" / "run.json"
    deadline = time.time() + 180
    while time.time() < deadline and not (record.exists() and '"running"' in record.read_text()):
        time.sleep(0.5)
    sweep.kill()
    sweep.wait()
    deadline = time.time() + 90
    while time.time() < deadline and '"running"' in record.read_text():
        time.sleep(0.5)
    status = json.loads(record.read_text()).get("status") if record.exists() else None
    again = mutualrl(args[3:], home) if status == "interrupted" else \
        {"args": ["sweep"], "rc": None, "seconds": 0, "output": f"run.json status {status}"}
    return "kill -9 of the sweep", [status == "interrupted", again["rc"] == 0], [again]


TRIALS = {"rows": trial_rows, "code": trial_code, "copy": trial_copy, "folder": trial_folder, "see": trial_see,
          "trust": trial_trust, "finished": trial_finished, "values": trial_values, "writes": trial_writes,
          "stall": trial_stall, "orphan": trial_orphan}


def run_trials(trials: int, seed: int, out: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    out = out.resolve()
    started = time.time()
    results = []
    for index in range(trials):
        cls = trial_class(CLASSES, index, rng)
        home = workdir(out, index, GOOD_ROWS)
        fault, checks, outcomes = TRIALS[cls](home, rng)
        tracebacks = any(TRACEBACK_RE.search(o["output"]) for o in outcomes)
        held = all(checks) and not tracebacks
        results.append({"trial": index, "class": cls, "fault": fault, "held": held, "checks": checks,
                        "traceback": tracebacks, "commands": [{k: v for k, v in o.items() if k != "output"}
                                                              for o in outcomes]})
        if not held:
            (home / "outputs.log").write_text("\n\n".join(o["output"][-20000:] for o in outcomes))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return summary(results, seed, started, [r["trial"] for r in results if not r["held"]])


def main() -> None:
    chaos_main(__doc__, run_trials, 12, "chaos-user")


if __name__ == "__main__":
    main()
