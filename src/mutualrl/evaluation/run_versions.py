"""Which of the runs a table or figure compares ran on other versions: the lines that say so.

Each run records the versions it ran with in ``run.json`` (``versions``: torch, transformers, TRL, ... and whether
the whole environment was the tested set; ``earlier_versions`` when a ``--resume`` ran on others; written by
:mod:`mutualrl.launch.rundir.record`). Runs compared on different library versions may differ for that reason alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mutualrl.run_folder import RunPaths, read_json_or
from mutualrl.versions import TESTED_SET, library_versions


def recorded_versions(run: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A run's recorded versions and the earlier ones of a resume on other versions (None: none recorded)."""
    record = read_json_or(RunPaths(run).run_json, {})
    record = record if isinstance(record, dict) else {}
    current = record.get("versions")
    earlier = record.get("earlier_versions")
    return (current if isinstance(current, dict) else None,
            [v for v in earlier if isinstance(v, dict)] if isinstance(earlier, list) else [])


def _libraries(versions: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in library_versions(versions).items()))


def version_notes(runs: Sequence[Path]) -> list[str]:
    """Nothing when every run recorded the same library versions on the tested set; else one line per run that ran
    on versions other than most runs', changed versions midway, was off the tested set, or recorded none."""
    found = {run: recorded_versions(run) for run in runs}
    common = Counter(_libraries(v) for v, _ in found.values() if v is not None).most_common(1)
    usual = dict(common[0][0]) if common else {}
    lines = []
    for run, (current, earlier) in found.items():
        if current is None:
            if common:
                lines.append(f"{run.name}: no versions recorded (a run from before versions were recorded)")
            continue
        other = [f"{k} {v} (most: {usual.get(k, 'none')})" for k, v in _libraries(current) if usual.get(k) != v]
        if other:
            lines.append(f"{run.name}: ran on other versions: {', '.join(other)}")
        if earlier:
            lines.append(f"{run.name}: resumed on other versions than it started with "
                         f"({len(earlier)} change{'s' * (len(earlier) != 1)} of versions)")
        if current.get(TESTED_SET, "yes") != "yes":
            lines.append(f"{run.name}: not the tested set ({current[TESTED_SET]})")
    return lines
