"""Where a test suite's CPU goes, by kind of process: run pytest with every Python process it starts logging its
own CPU time (``suite_cpu_site/sitecustomize.py``), then sum by kind (a policy worker, a launcher, a CLI command,
the pytest processes themselves) and by test file.

    python benchmarks/suite_cpu.py -- -q -n 2 --dist loadgroup        # the README's suite, then the tables
    python benchmarks/suite_cpu.py --log /tmp/suite-cpu.jsonl --report  # the tables of a log already written

A process that ends by a signal (the chaos tests' SIGKILLs) logs nothing; a worker that ends with ``os._exit``
logs once for each of its exit paths, so lines are kept once per pid (the last). The total of all children as the
kernel counts it (``RUSAGE_CHILDREN``) is printed beside the logged sum: the gap is what logged nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SITE = Path(__file__).resolve().parent / "suite_cpu_site"
WORKER_MODULE = "mutualrl/training/worker.py"


def process_kind(row: dict) -> str:
    """A short name for what the process was: a policy worker, ``mutualrl <command>``, pytest, or its script."""
    argv = row["argv"]
    joined = " ".join(argv)
    if any(a.endswith(WORKER_MODULE) for a in argv) or "--policy" in argv and "--run-dir" in argv:
        return "policy worker"
    if argv and (argv[0].endswith("mutualrl/__main__.py") or argv[0].endswith("bin/mutualrl")):
        return f"mutualrl {argv[1] if len(argv) > 1 else ''}".strip()
    started_as_pytest = bool(argv) and (argv[0].endswith("pytest/__main__.py") or Path(argv[0]).name == "pytest")
    if started_as_pytest or argv == ["-c"] and row.get("xdist") and not row["test"]:  # xdist's workers: `-c`
        return "pytest (controller and xdist workers: the tests run in-process)"
    if "torch/distributed/run.py" in joined or "torch.distributed.run" in joined:
        return "torchrun"
    name = Path(argv[0]).name if argv and argv[0] not in ("-c", "-m") else (argv[0] if argv else "?")
    return f"{name}{' (torch)' if row.get('torch') else ''}"


def read_log(path: Path) -> list[dict]:
    """One row per pid (its last line)."""
    rows: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["pid"]] = row
    return list(rows.values())


def table(rows: list[dict], key, top: int) -> list[str]:
    sums: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for row in rows:
        entry = sums[key(row)]
        entry[0] += 1
        entry[1] += row["user"] + row["sys"]
    total = sum(cpu for _, cpu in sums.values()) or 1.0
    lines = [f"{'CPU s':>8} {'share':>6} {'procs':>6} {'per proc':>9}  what"]
    for name, (count, cpu) in sorted(sums.items(), key=lambda item: -item[1][1])[:top]:
        lines.append(f"{cpu:8.0f} {cpu / total:6.1%} {count:6d} {cpu / count:9.1f}  {name}")
    return lines


def report(rows: list[dict], top: int) -> str:
    logged = sum(r["user"] + r["sys"] for r in rows)
    out = [f"{len(rows)} processes logged, {logged:.0f} s of CPU", "", "by kind of process:",
           *table(rows, process_kind, top), "", "by test file (the processes a test started, and pytest's own):",
           *table(rows, lambda r: r["test"].split("::")[0] or "(pytest, between tests)", top)]
    return "\n".join(out)


def run_pytest(pytest_args: list[str], site: Path, env: dict[str, str]) -> int:
    """pytest's exit code, run with ``site`` first on the ``PYTHONPATH`` every process it starts inherits, and ``env``
    (a log's path) added to the environment."""
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "pytest", *pytest_args],
                          env={**os.environ, **env, "PYTHONPATH": path}).returncode


def run_suite(pytest_args: list[str], log: Path) -> tuple[int, float, float]:
    """Run pytest under the logging site; (exit code, wall seconds, CPU seconds of all children)."""
    started = time.monotonic()
    code = run_pytest(pytest_args, SITE, {"SUITE_CPU_LOG": str(log)})
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return code, time.monotonic() - started, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, default=None, help="The per-process log (default: a new temporary file).")
    parser.add_argument("--report", action="store_true", help="Only print the tables of an existing --log.")
    parser.add_argument("--top", type=int, default=25, help="Rows per table.")
    parser.add_argument("pytest_args", nargs="*", help="pytest's arguments, after --.")
    args = parser.parse_args(argv)
    if args.report:
        if args.log is None or not args.log.is_file():
            parser.error("--report needs --log FILE, a log this script wrote")
        print(report(read_log(args.log), args.top))
        return 0
    log = args.log or Path(tempfile.mkstemp(prefix="suite-cpu-", suffix=".jsonl")[1])
    log.write_text("")
    code, wall, children_cpu = run_suite(args.pytest_args, log)
    print(f"\npytest exit code {code}; {wall:.0f} s wall; {children_cpu:.0f} s CPU in all its processes (kernel)")
    print(f"log: {log}")
    print(report(read_log(log), args.top))
    return code


if __name__ == "__main__":
    sys.exit(main())
