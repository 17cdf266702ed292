"""A behaviour record of the tiny pool, kept in the repository, so that the next drift is seen.

``record`` runs :mod:`same_behaviour`'s 3-step, seed-7 run of every regime on the tiny pool in the current tree
and writes every metric value (wall-clock keys aside), each policy's final weights' sha256, the versions and the
tiny models' digests to ``benchmarks/results/behaviour-tiny.json``. ``check`` runs the same and compares with the
record: the same values and weights, or a table of what moved (exit 1). Training uses the CPU's own kernels, so a
record holds for one kind of CPU: a drift with the same tiny-model digests, versions and CPU (``cpu``: torch's kernel
capability and the CPU's model name) is the code's; with another of them it may be the machine's or the versions'.
Usage::

    python benchmarks/behaviour_record.py record [--regimes sgt,hacpo] [--out DIR]
    python benchmarks/behaviour_record.py check  [--regimes sgt,hacpo] [--out DIR] [--record FILE]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "behaviour-tiny.json"
sys.path.insert(0, str(ROOT / "src"))


@functools.cache
def _same_behaviour() -> Any:
    """same_behaviour.py, loaded once (its runs, comparisons and regime list are this script's)."""
    spec = importlib.util.spec_from_file_location("same_behaviour", ROOT / "benchmarks" / "same_behaviour.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_regimes(regimes: list[str], out: Path, timeout: int) -> dict[str, Any]:
    """Each regime's 3-step run in this tree: its metric rows (timings aside) and final weights' sha256."""
    sb = _same_behaviour()
    tree = sb.Tree(str(ROOT), out / "trees")
    runs: dict[str, Any] = {}
    for regime in regimes:
        print(f"[behaviour] {regime} ...", file=sys.stderr, flush=True)
        run_dir = out / "runs" / regime
        result = sb.train(tree, str(sb.VENV_PYTHON if sb.VENV_PYTHON.exists() else sys.executable),
                          [*sb.REGIMES[regime], *sb.RUN_ARGS], run_dir, timeout)
        if result["rc"] != 0:
            raise SystemExit(f"{regime}: the run failed (exit {result['rc']}): {result.get('stderr_tail', '')[-500:]}")
        rows = [{k: v for k, v in row.items() if not sb.is_wall_clock(k)}
                for row in sb.read_rows(run_dir / "metrics.jsonl")]
        weights = {p.parts[-3]: sb._sha256(p) for p in sorted(run_dir.glob("policies/*/final/model.safetensors"))}
        runs[regime] = {"rows": rows, "weights_sha256": weights}
    return runs


def context() -> dict[str, Any]:
    from mutualrl.pools import tiny
    from mutualrl.versions import run_versions

    return {"versions": run_versions(), "cpu": cpu(),
            "tiny_sha256": {n: tiny.read_warm_start_report(n)["sha256"] for n in tiny.TINY_MODELS}}


def cpu() -> str:
    """torch's kernel capability here and the CPU's model name (what a training run's numbers also depend on)."""
    import torch

    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")] if Path("/proc/cpuinfo").exists() else []
    return f"{torch.backends.cpu.get_cpu_capability()}, {names[0] if names else 'unknown CPU'}"


def compare(record: dict[str, Any], runs: dict[str, Any]) -> dict[str, Any]:
    sb = _same_behaviour()
    out = {}
    for regime, now in runs.items():
        then = record["runs"].get(regime)
        if then is None:
            out[regime] = {"note": "not in the record"}
            continue
        metrics = sb.compare_metrics(then["rows"], now["rows"])
        same_weights = {p: then["weights_sha256"].get(p) == sha for p, sha in now["weights_sha256"].items()}
        out[regime] = {"values": metrics["values"], "differing": metrics["differing_values"],
                       "max_abs_delta": metrics["max_abs_delta"], "weights_identical": same_weights}
    return out


def main(argv: list[str] | None = None) -> int:
    sb = _same_behaviour()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("record", "check"))
    parser.add_argument("--regimes", default=",".join(sb.REGIMES), help=f"comma-separated, of {', '.join(sb.REGIMES)}")
    parser.add_argument("--out", type=Path, default=Path("/tmp/behaviour_record"), help="where the runs go")
    parser.add_argument("--record", type=Path, default=RECORD, help="the record to write or compare with")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one training run may take")
    args = parser.parse_args(argv)
    regimes = [r for r in args.regimes.split(",") if r]
    if unknown := [r for r in regimes if r not in sb.REGIMES]:
        parser.error(f"unknown regime(s): {', '.join(unknown)}")
    runs = run_regimes(regimes, args.out.resolve(), args.timeout)
    now = {"date": time.strftime("%Y-%m-%d"), "run_args": sb.RUN_ARGS, **context()}
    if args.mode == "record":
        args.record.write_text(json.dumps({**now, "runs": runs}, indent=1) + "\n")
        print(f"recorded {len(runs)} regime(s) in {args.record}")
        return 0
    record = json.loads(args.record.read_text())
    result = compare(record, runs)
    for name, entry in (("record", record), ("now", now)):
        print(f"{name + ':':<8}{entry['date']}, tiny models {entry['tiny_sha256']}, tested set "
              f"{entry['versions']['tested_set']}, CPU {entry.get('cpu', 'not recorded')}")
    for regime, entry in result.items():
        moved = ", ".join(f"{k} {v:.3g}" for k, v in sorted(entry.get("differing", {}).items())[:6])
        print(f"{regime:<14} {entry.get('values', 0):>4} values, {len(entry.get('differing', {}))} keys moved"
              f"{' (' + moved + ')' if moved else ''}; weights identical: {entry.get('weights_identical')}")
    drift = any(e.get("differing") or not all(e.get("weights_identical", {}).values()) or "note" in e
                for e in result.values())
    print("drift" if drift else "the same behaviour as recorded")
    return 1 if drift else 0


if __name__ == "__main__":
    sys.exit(main())
