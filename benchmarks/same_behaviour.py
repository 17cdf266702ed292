"""Behaviour unchanged between two revisions: the same metrics, the same weights, the same dry-run plans.

For each revision (a git revision, checked out as a worktree under ``OUT/trees``, or a working tree's path such as
``.`` for the current uncommitted tree) the launcher and its policy processes run that tree's ``src`` first on
``PYTHONPATH`` with this interpreter (the launcher hands its own ``mutualrl`` folder to its workers; a probe module
named in ``MUTUALRL_REGIMES`` records which ``mutualrl`` each process imported, and the table says whether every
one was the tree's). Then:

* behaviour: a 3-step, seed-7 run of every regime on the tiny pool (``validation.limit=20``; and prp peer with
  ``grpo.beta=0.04``, the pass with a reference model); the ``kind: train`` and ``kind: eval`` rows of
  ``metrics.jsonl`` are matched by (kind, policy, step) and every value compared, wall-clock keys aside
  (:func:`is_wall_clock`); the final ``model.safetensors`` of each policy byte for byte (else max |Δ|);
* dry runs: ``--dry-run`` text and ``--save-plan`` JSON of ``tiny``, ``2qwen --regime sgt --gpus 8`` (also with
  ``--nodes 2``) and ``3qwen --gpus 8``, into the same run folder on both sides, paths normalized (the tree, the
  output folder) and the free disk space
  (machine state: the plan's ``disk.free_gib``, "N GiB free" in its text and warnings) set aside; printed 1000
  columns wide, so that no line wraps where the tree's path is longer;
* speed (``--parts speed``): alternating rounds (A B, then B A, ...) of a short SGT run at both revisions, the pool's
  per-step time from the metrics (the median over steps, the first left out, of the slowest policy's
  ``step_time``), and the median over rounds of B / A; also the whole runs' CPU seconds (start-up included), which
  other work on a shared machine moves less.

    python benchmarks/same_behaviour.py 95cbe55 main [--regimes sgt,hacpo] [--parts behaviour,dry,speed] [--out DIR]

Exit status: 0 when everything compared is the same, 1 when something differs, 2 when a run failed.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

REGIMES: dict[str, list[str]] = {
    "standalone": ["--regime", "standalone"],
    "xgrpo": ["--regime", "xgrpo"],
    "sgt": ["--regime", "sgt"],
    "prp-peer": ["--regime", "prp", "--prp-denominator", "peer"],
    "prp-learner": ["--regime", "prp", "--prp-denominator", "learner"],
    "grpo-randpert": ["--regime", "grpo-randpert"],
    "hacpo": ["--regime", "hacpo"],
    "prp-peer-beta": ["--regime", "prp", "--prp-denominator", "peer", "--set", "grpo.beta=0.04"],
}
RUN_ARGS = ["--seed", "7", "--max-steps", "3", "--set", "validation.limit=20"]
DRY_RUNS: dict[str, list[str]] = {
    "tiny": [],
    "2qwen-sgt-gpus8": ["--pool", "2qwen", "--regime", "sgt", "--gpus", "8"],
    "2qwen-sgt-gpus8-nodes2": ["--pool", "2qwen", "--regime", "sgt", "--gpus", "8", "--nodes", "2"],
    "3qwen-gpus8": ["--pool", "3qwen", "--gpus", "8"],
}
SPEED_ARGS = ["--regime", "sgt", "--seed", "7", "--set", "validation.every_steps=0",
              "--set", "validation.at_start=false", "--set", "validation.limit=1"]
IDENTITY = ("kind", "policy", "step")
# Wall-clock keys: the last '/'-part of the key is `time` or `step_time`, or ends in `_s`, `seconds`, `runtime` or
# `_per_second` (mutual/build_s, eval/seconds, mutual/rollout_seconds, train_runtime, train_samples_per_second).
WALL_CLOCK = re.compile(r"(?:^|/)(?:time|step_time|[^/]*_s|[^/]*seconds|[^/]*runtime|[^/]*_per_second)$")
# Machine state a dry run reports, not code: the free disk space (plan field and text).
MACHINE_STATE_PLAN_PATHS = ("/disk/free_gib",)
MACHINE_STATE_TEXT = re.compile(r"\d+(?:\.\d+)? GiB free")
PROBE = '''import json, os, sys
import mutualrl
_folder = os.environ.get("SAME_BEHAVIOUR_PROBE")
if _folder:
    with open(os.path.join(_folder, f"{os.getpid()}.json"), "w") as _f:
        json.dump({"pid": os.getpid(), "argv": sys.argv, "mutualrl": mutualrl.__file__}, _f)
'''


def is_wall_clock(key: str) -> bool:
    """True for a timing key, whose value differs from run to run on the same code (see WALL_CLOCK)."""
    return WALL_CLOCK.search(key) is not None


# ----------------------------------------------------------------------------------------------- comparing


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The ``kind: train`` and ``kind: eval`` rows of a metrics file (a line that is not a JSON object is skipped)."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("kind") in ("train", "eval"):
            rows.append(row)
    return rows


def keyed(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """Rows by (kind, policy, step, n-th such row): the merged file's order depends on timing, this key does not."""
    out: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        base = tuple(row.get(k) for k in IDENTITY)
        n = sum(1 for k in out if k[:3] == base)
        out[(*base, n)] = row
    return out


def value_delta(a: Any, b: Any) -> float:
    """|a - b| for numbers (NaN equals NaN), 0 or inf for anything else."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if not numbers:
        return 0.0 if a == b else math.inf
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    if a == b:
        return 0.0
    return abs(a - b)


_MISSING = object()


def compare_metrics(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> dict[str, Any]:
    """Row by row, key by key, the wall-clock keys aside: counts, the keys that differ (max |Δ| each), max |Δ|."""
    a, b = keyed(rows_a), keyed(rows_b)
    differing: dict[str, float] = {}
    ignored: set[str] = set()
    values = 0
    for key in sorted(set(a) & set(b), key=str):
        row_a, row_b = a[key], b[key]
        for name in sorted(set(row_a) | set(row_b)):
            if name in IDENTITY:
                continue
            if is_wall_clock(name):
                ignored.add(name)
                continue
            values += 1
            delta = value_delta(row_a.get(name, _MISSING), row_b.get(name, _MISSING))
            if delta:
                differing[name] = max(differing.get(name, 0.0), delta)
    only_a, only_b = sorted(set(a) - set(b), key=str), sorted(set(b) - set(a), key=str)
    return {
        "rows_a": len(a), "rows_b": len(b),
        "train_rows": sum(1 for k in a if k[0] == "train"), "eval_rows": sum(1 for k in a if k[0] == "eval"),
        "values": values,
        "differing_values": differing,
        "rows_only_a": [list(k) for k in only_a], "rows_only_b": [list(k) for k in only_b],
        "max_abs_delta": max([*differing.values(), math.inf if only_a or only_b else 0.0]),
        "ignored_keys": sorted(ignored),
    }



def compare_weights(run_a: Path, run_b: Path) -> dict[str, Any]:
    """Each policy's final ``model.safetensors``: byte-identical, else the largest |Δ| over its tensors."""
    found_a = {p.parts[-3]: p for p in run_a.glob("policies/*/final/model.safetensors")}
    found_b = {p.parts[-3]: p for p in run_b.glob("policies/*/final/model.safetensors")}
    out: dict[str, Any] = {}
    for policy in sorted(set(found_a) | set(found_b)):
        if policy not in found_a or policy not in found_b:
            out[policy] = {"identical": False, "max_abs_delta": math.inf, "note": "missing on one side"}
            continue
        same = _sha256(found_a[policy]) == _sha256(found_b[policy])
        out[policy] = {"identical": same, "max_abs_delta": 0.0 if same else _tensor_delta(found_a[policy],
                                                                                         found_b[policy])}
    return out


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _tensor_delta(path_a: Path, path_b: Path) -> float:
    from safetensors.torch import load_file

    a, b = load_file(str(path_a)), load_file(str(path_b))
    if set(a) != set(b):
        return math.inf
    worst = 0.0
    for name in a:
        if a[name].shape != b[name].shape:
            return math.inf
        worst = max(worst, float((a[name].double() - b[name].double()).abs().max()))  # [*shape] -> scalar
    return worst


def json_diff(a: Any, b: Any, path: str = "") -> list[dict[str, Any]]:
    """Every leaf where two JSON values differ, as {path, a, b}."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += json_diff(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}/{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in json_diff(x, y, f"{path}/{i}")]
    return [] if a == b else [{"path": path or "/", "a": a, "b": b}]


# ------------------------------------------------------------------------------------------------ running


class Tree:
    """One side of the comparison: a folder whose ``src`` holds the ``mutualrl`` to run."""

    def __init__(self, spec: str, trees: Path) -> None:
        self.spec = spec
        self.created = False
        if Path(spec).is_dir():
            self.path = Path(spec).resolve()
            self.commit = _git(self.path, "rev-parse", "HEAD")
            dirty = _git(self.path, "status", "--porcelain", "--untracked-files=no")
            self.describe = f"{self.path} (HEAD {self.commit[:9]}{', uncommitted changes' if dirty else ''})"
            return
        self.commit = _git(ROOT, "rev-parse", "--verify", f"{spec}^{{commit}}")
        self.path = trees / self.commit[:12]
        self.describe = f"{spec} = {self.commit[:9]} (worktree {self.path})"
        if not (self.path / "src" / "mutualrl").is_dir():
            trees.mkdir(parents=True, exist_ok=True)
            _git(ROOT, "worktree", "add", "--detach", str(self.path), self.commit)
            self.created = True

    def remove(self) -> None:
        if self.created:
            _git(ROOT, "worktree", "remove", "--force", str(self.path))

    def env(self, probe: Path | None = None) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(self.path / "src"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        env.pop("MUTUALRL_REGIMES", None)
        if probe is not None:
            env.update(MUTUALRL_REGIMES=str(probe.parent.parent / "probe.py"), SAME_BEHAVIOUR_PROBE=str(probe))
        return env


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], check=True, capture_output=True, text=True).stdout.strip()


def train(tree: Tree, python: str, args: list[str], run_dir: Path, timeout: int) -> dict[str, Any]:
    """One ``mutualrl train`` run into ``run_dir``: its exit status, seconds, and which mutualrl each process ran."""
    shutil.rmtree(run_dir, ignore_errors=True)
    probes = run_dir.parent / f".probe-{run_dir.name}"
    shutil.rmtree(probes, ignore_errors=True)
    probes.mkdir(parents=True)
    (run_dir.parent.parent / "probe.py").write_text(PROBE)
    command = [python, "-m", "mutualrl", "train", *args, "--output-dir", str(run_dir)]
    start, used = time.perf_counter(), _children_cpu_seconds()
    done = subprocess.run(command, cwd=tree.path, env=tree.env(probes), capture_output=True, text=True,
                          timeout=timeout)
    seconds, cpu = time.perf_counter() - start, _children_cpu_seconds() - used
    seen = [json.loads(p.read_text()) for p in sorted(probes.glob("*.json"))]
    workers = [s for s in seen if any("worker" in str(a) for a in s["argv"][:1])]
    src = str(tree.path / "src")
    result = {"rc": done.returncode, "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "command": command[1:],
              "processes_probed": len(seen), "workers_probed": len(workers),
              "all_from_tree": bool(seen) and all(s["mutualrl"].startswith(src + os.sep) for s in seen)}
    if done.returncode != 0:
        result["stderr_tail"] = done.stderr[-3000:]
    return result


def _children_cpu_seconds() -> float:
    """User + system CPU seconds of the finished child processes (the launcher's own waited-for workers included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def dry_run(tree: Tree, python: str, args: list[str], plan: Path, out: Path) -> dict[str, Any]:
    """A ``--dry-run --save-plan`` of ``args``: its text and plan with the tree's and the output folder's paths
    replaced by ``<TREE>`` and ``<OUT>``. Both sides plan the same run folder (a dry run writes nothing there): the
    sha256 of a policy's GRPO arguments the plan hands its worker covers the run folder's path."""
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.unlink(missing_ok=True)
    run_dir = out / "dry" / "run" / plan.name.removesuffix(".plan.json")
    command = [python, "-m", "mutualrl", "train", *args, "--output-dir", str(run_dir), "--dry-run",
               "--save-plan", str(plan)]
    # wide enough that no line wraps: where a line wraps would depend on the length of the tree's path
    env = {**tree.env(), "COLUMNS": "1000"}
    done = subprocess.run(command, cwd=tree.path, env=env, capture_output=True, text=True, timeout=600)
    swaps = [(str(plan.parent), "<PLANS>"), (str(tree.path), "<TREE>"), (str(out), "<OUT>")]

    def normal(text: str) -> str:
        for old, new in swaps:
            text = text.replace(old, new)
        return MACHINE_STATE_TEXT.sub("<FREE> GiB free", text)

    saved = json.loads(normal(plan.read_text())) if plan.is_file() else None
    return {"rc": done.returncode, "text": normal(done.stdout + done.stderr), "plan": saved}


# ------------------------------------------------------------------------------------------------ the parts


def behaviour(trees: dict[str, Tree], regimes: list[str], python: str, out: Path, timeout: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for regime in regimes:
        runs = {side: out / "runs" / side / regime for side in trees}
        entry: dict[str, Any] = {"runs": {}}
        for side, tree in trees.items():
            print(f"[behaviour] {regime} at {side} ...", file=sys.stderr, flush=True)
            entry["runs"][side] = train(tree, python, [*REGIMES[regime], *RUN_ARGS], runs[side], timeout)
        if all(r["rc"] == 0 for r in entry["runs"].values()):
            entry["metrics"] = compare_metrics(read_rows(runs["A"] / "metrics.jsonl"),
                                               read_rows(runs["B"] / "metrics.jsonl"))
            entry["weights"] = compare_weights(runs["A"], runs["B"])
        results[regime] = entry
    return results


def dry_runs(trees: dict[str, Tree], python: str, out: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, args in DRY_RUNS.items():
        print(f"[dry] {name} ...", file=sys.stderr, flush=True)
        side = {s: dry_run(t, python, args, out / "dry" / s / f"{name}.plan.json", out) for s, t in trees.items()}
        text_a, text_b = side["A"]["text"].splitlines(), side["B"]["text"].splitlines()
        diff = json_diff(side["A"]["plan"], side["B"]["plan"])
        plan_diff = [d for d in diff if d["path"] not in MACHINE_STATE_PLAN_PATHS]
        results[name] = {
            "rc": [side["A"]["rc"], side["B"]["rc"]],
            "text_same": text_a == text_b,
            # e.g. a worker's environment listed in another order: the same words on every line
            "text_same_but_word_order": text_a != text_b and len(text_a) == len(text_b)
            and all(sorted(x.split()) == sorted(y.split()) for x, y in zip(text_a, text_b)),
            "text_diff": list(difflib.unified_diff(text_a, text_b, "A", "B", lineterm="", n=0))[:200],
            "plan_same": not plan_diff,
            "plan_diff": plan_diff[:200],
            "machine_state_diff": [d for d in diff if d["path"] in MACHINE_STATE_PLAN_PATHS],
        }
    return results


def pool_step_seconds(run_dir: Path) -> float | None:
    """Median over steps (the first left out: warm-up) of the slowest policy's ``step_time`` at that step."""
    per_step: dict[int, float] = {}
    for row in read_rows(run_dir / "metrics.jsonl"):
        if row["kind"] == "train" and isinstance(row.get("step_time"), (int, float)):
            per_step[int(row["step"])] = max(per_step.get(int(row["step"]), 0.0), float(row["step_time"]))
    timed = [seconds for step, seconds in sorted(per_step.items())[1:]]
    return statistics.median(timed) if timed else None


def speed(trees: dict[str, Tree], python: str, out: Path, rounds: int, steps: int, timeout: int) -> dict[str, Any]:
    table = []
    for r in range(rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        row: dict[str, Any] = {"round": r + 1, "order": "".join(order)}
        for side in order:
            print(f"[speed] round {r + 1} at {side} ...", file=sys.stderr, flush=True)
            run_dir = out / "speed" / f"{side}-{r + 1}"
            done = train(trees[side], python, [*SPEED_ARGS, "--max-steps", str(steps)], run_dir, timeout)
            row[f"{side}_step_s"] = pool_step_seconds(run_dir) if done["rc"] == 0 else None
            row[f"{side}_process_s"], row[f"{side}_cpu_s"] = done["seconds"], done["cpu_seconds"]
        if row["A_step_s"] and row["B_step_s"]:
            row["ratio_b_over_a"] = round(row["B_step_s"] / row["A_step_s"], 4)
        table.append(row)
    ratios = [row["ratio_b_over_a"] for row in table if "ratio_b_over_a" in row]
    both = [row for row in table if "ratio_b_over_a" in row]
    return {"regime": "sgt", "steps": steps, "rounds": table,
            "median_ratio_b_over_a": statistics.median(ratios) if ratios else None,
            "ratio_of_medians": round(statistics.median(r["B_step_s"] for r in both)
                                      / statistics.median(r["A_step_s"] for r in both), 4) if both else None,
            # CPU seconds of the whole run (start-up included): less moved by other work on a shared machine
            "median_cpu_ratio_b_over_a": round(statistics.median(r["B_cpu_s"] / r["A_cpu_s"] for r in both), 4)
            if both else None}


# ------------------------------------------------------------------------------------------------ reporting


def _fmt(x: float) -> str:
    return "0" if x == 0 else ("inf" if math.isinf(x) else f"{x:.3g}")


def print_table(results: dict[str, Any]) -> None:
    if "behaviour" in results:
        print("| regime | rows (train+eval) | values | differing keys | max abs delta | weights identical | "
              "workers ran the tree's code |")
        print("|---|---:|---:|---|---:|---|---|")
        for regime, entry in results["behaviour"].items():
            ran = entry["runs"]
            code = all(r["all_from_tree"] and r["workers_probed"] > 0 for r in ran.values())
            if "metrics" not in entry:
                failed = ", ".join(s for s, r in ran.items() if r["rc"] != 0)
                print(f"| {regime} | run failed at {failed} | | | | | {code} |")
                continue
            m, w = entry["metrics"], entry["weights"]
            same = all(v["identical"] for v in w.values()) and bool(w)
            weights = "yes" if same else "no (max " + _fmt(max(v["max_abs_delta"] for v in w.values())) + ")"
            print(f"| {regime} | {m['rows_a']} ({m['train_rows']}+{m['eval_rows']}) | {m['values']} | "
                  f"{', '.join(sorted(m['differing_values'])) or '-'} | {_fmt(m['max_abs_delta'])} | {weights} | "
                  f"{code} |")
    if "dry" in results:
        print("\n| dry run | rc A, B | text same | plan same |\n|---|---|---|---|")
        for name, entry in results["dry"].items():
            text = "same but word order" if entry["text_same_but_word_order"] else entry["text_same"]
            print(f"| {name} | {entry['rc'][0]}, {entry['rc'][1]} | {text} | {entry['plan_same']} |")
    if "speed" in results:
        s = results["speed"]
        print(f"\nspeed ({s['regime']}, {s['steps']} steps, median step time, first step left out): "
              + "; ".join(f"round {r['round']} {r['order']}: A {_fmt(r['A_step_s'] or 0)} s, "
                          f"B {_fmt(r['B_step_s'] or 0)} s" for r in s["rounds"])
              + f"; median of the rounds' B/A = {s['median_ratio_b_over_a']}, "
              f"median B / median A = {s['ratio_of_medians']}; whole runs' CPU seconds, median B/A = "
              f"{s['median_cpu_ratio_b_over_a']}")


def verdict(results: dict[str, Any]) -> int:
    """0: everything the same; 1: something differs; 2: a run failed."""
    entries = results.get("behaviour", {}).values()
    if any("metrics" not in e for e in entries) or any(e["rc"] != [0, 0] for e in results.get("dry", {}).values()):
        return 2
    differs = any(e["metrics"]["max_abs_delta"] or not all(w["identical"] for w in e["weights"].values())
                  for e in entries)
    differs |= any(not (e["text_same"] and e["plan_same"]) for e in results.get("dry", {}).values())
    return 1 if differs else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev_a", help="a git revision, or a working tree's path ('.' for the current tree)")
    parser.add_argument("rev_b", help="likewise")
    parser.add_argument("--regimes", default=",".join(REGIMES), help=f"comma-separated, of {', '.join(REGIMES)}")
    parser.add_argument("--parts", default="behaviour,dry", help="comma-separated, of behaviour, dry, speed")
    parser.add_argument("--out", type=Path, default=Path("/tmp/same_behaviour"), help="runs, trees, the JSON")
    parser.add_argument("--python", default=str(VENV_PYTHON if VENV_PYTHON.exists() else sys.executable))
    parser.add_argument("--rounds", type=int, default=7, help="speed: rounds (each runs A and B once)")
    parser.add_argument("--speed-steps", type=int, default=10, help="speed: steps per run")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one training run may take")
    parser.add_argument("--keep-trees", action="store_true", help="keep the worktrees this made")
    args = parser.parse_args(argv)
    regimes = [r for r in args.regimes.split(",") if r]
    parts = {p for p in args.parts.split(",") if p}
    unknown = [r for r in regimes if r not in REGIMES] + sorted(parts - {"behaviour", "dry", "speed"})
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    trees = {"A": Tree(args.rev_a, out / "trees"), "B": Tree(args.rev_b, out / "trees")}
    results: dict[str, Any] = {"A": trees["A"].describe, "B": trees["B"].describe, "python": args.python,
                               "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                               "run_args": RUN_ARGS, "wall_clock_rule": WALL_CLOCK.pattern}
    try:
        if "behaviour" in parts:
            results["behaviour"] = behaviour(trees, regimes, args.python, out, args.timeout)
        if "dry" in parts:
            results["dry"] = dry_runs(trees, args.python, out)
        if "speed" in parts:
            results["speed"] = speed(trees, args.python, out, args.rounds, args.speed_steps, args.timeout)
    finally:
        if not args.keep_trees:
            for tree in {id(t): t for t in trees.values()}.values():
                tree.remove()
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    (out / "same_behaviour.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"A: {results['A']}\nB: {results['B']}\n")
    print_table(results)
    print(f"\nJSON: {out / 'same_behaviour.json'}")
    return verdict(results)


if __name__ == "__main__":
    sys.exit(main())
