"""When a test suite's workers are busy, and with what: run pytest with each test's start, end and xdist worker
logged (``suite_timeline_site/suite_timeline_plugin.py``), then report each worker's busy time and idle gaps, the
longest tests and the files they are in; against an earlier log, what changed test by test.

    python benchmarks/suite_timeline.py --log /tmp/after.jsonl -- -q -n 2 --dist loadgroup     # the README's suite
    python benchmarks/suite_timeline.py --log /tmp/after.jsonl --report --against /tmp/before.jsonl

A worker's wall time is its busy time (the sum of its tests) plus its gaps (between tests: the scheduler, the
fixtures' teardown); with no gaps and both workers ending together, the suite's wall time is the sum of its tests
divided by the workers, and only cheaper tests shorten it.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_cpu import run_pytest  # noqa: E402  (runs pytest with a folder first on every process's PYTHONPATH)

SITE = Path(__file__).resolve().parent / "suite_timeline_site"


def read_log(path: Path) -> tuple[dict[str, float], list[dict]]:
    """(worker -> its session's start, the tests' rows) of a log."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    starts = {r["worker"]: r["session_start"] for r in rows if "session_start" in r}
    return starts, [r for r in rows if "test" in r]


def worker_lines(starts: dict[str, float], tests: list[dict]) -> list[str]:
    """One line per worker: its first test (seconds after the earliest session start), its last end, busy, gaps."""
    origin = min(starts.values(), default=min((t["start"] for t in tests), default=0.0))
    lines = []
    for worker in sorted({t["worker"] for t in tests}):
        mine = sorted((t for t in tests if t["worker"] == worker), key=lambda t: t["start"])
        busy = sum(t["end"] - t["start"] for t in mine)
        span = mine[-1]["end"] - mine[0]["start"]
        lines.append(f"{worker}: {len(mine)} tests, first at {mine[0]['start'] - origin:.1f} s, last ends at "
                     f"{mine[-1]['end'] - origin:.1f} s; busy {busy:.1f} s, gaps {span - busy:.1f} s")
    return lines


def durations(tests: list[dict]) -> dict[str, float]:
    return {t["test"]: t["end"] - t["start"] for t in tests}


def by_file(times: dict[str, float]) -> dict[str, float]:
    files: dict[str, float] = collections.defaultdict(float)
    for test, seconds in times.items():
        files[test.split("::")[0]] += seconds
    return dict(files)


def report(log: Path, against: Path | None, top: int) -> list[str]:
    starts, tests = read_log(log)
    times = durations(tests)
    lines = [f"{len(times)} tests, {sum(times.values()):.1f} s in all", *worker_lines(starts, tests),
             f"the {top} longest tests:"]
    lines += [f"{s:8.1f}  {test}" for test, s in sorted(times.items(), key=lambda kv: -kv[1])[:top]]
    lines.append(f"the {top} longest files:")
    lines += [f"{s:8.1f}  {name}" for name, s in sorted(by_file(times).items(), key=lambda kv: -kv[1])[:top]]
    if against is not None:
        before = durations(read_log(against)[1])
        shared = sorted(set(times) & set(before))
        change = {test: times[test] - before[test] for test in shared}
        lines.append(f"against {against}: {len(shared)} tests in both, {sum(before[t] for t in shared):.1f} s -> "
                     f"{sum(times[t] for t in shared):.1f} s; the largest changes (s, before -> after):")
        lines += [f"{d:+8.1f}  {before[test]:.1f} -> {times[test]:.1f}  {test}"
                  for test, d in sorted(change.items(), key=lambda kv: -abs(kv[1]))[:top]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, required=True, help="the JSON-lines log (appended to by a run)")
    parser.add_argument("--report", action="store_true", help="only report the log, run nothing")
    parser.add_argument("--against", type=Path, help="an earlier run's log: report the change test by test")
    parser.add_argument("--top", type=int, default=25, help="how many tests and files each list shows")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args(argv)
    code = 0
    if not args.report:
        args.log.unlink(missing_ok=True)
        code = run_pytest(["-p", "suite_timeline_plugin", *args.pytest_args], SITE,
                          {"SUITE_TIMELINE_LOG": str(args.log.resolve())})
        print(f"pytest exit code {code}; log: {args.log}")
    print("\n".join(report(args.log, args.against, args.top)))
    return code


if __name__ == "__main__":
    sys.exit(main())
