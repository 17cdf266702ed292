"""The peers' judgements in an exchange (OPD, docs/regimes.md): each nested ``_judgements/<learner>/`` exchange
inspected as the exchange itself is (integrity, files), and per (judged learner, judge) what it holds: the steps, the
judgement records, and the judge's mean log-prob per token of the learner's text (its ``behaviour_logps``: how
likely the judge found what the learner wrote). ``mutualrl see inspect`` shows them beside the exchange."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from mutualrl.ops.exchange_inspect_report import FileEntry, InspectReport, Issue
from mutualrl.see import files
from mutualrl.see.errors import CorruptShardError
from mutualrl.see.shards import load_shard, read_manifest


def inspect_judgements(root: Path, verify_checksums: bool,
                       inspect_exchange: Callable[..., InspectReport]) -> tuple[list[dict[str, Any]], list[Issue],
                                                                              list[FileEntry]]:
    """Per (judged learner, judge), in name order: ``learner``, ``judge``, ``steps``, ``records``, ``tokens`` and
    ``judge_logp_mean`` (None without tokens); the nested exchanges' inconsistencies and files, their paths from
    ``root``. Nothing where the exchange holds no judgements (every regime but OPD). ``inspect_exchange`` inspects
    one nested exchange (:func:`mutualrl.ops.exchange_inspect.inspect_exchange`, passed in: it calls this)."""
    entries: list[dict[str, Any]] = []
    issues: list[Issue] = []
    listed: list[FileEntry] = []
    for nested in files.judgements_roots(root):
        if files.find_see_root(nested) is None:
            continue  # created, nothing published yet
        prefix = f"{files.JUDGEMENTS_DIR}/{nested.name}/"
        report = inspect_exchange(nested, verify_checksums=verify_checksums)
        issues += [replace(issue, message=f"judgements of {nested.name!r}: {issue.message}",
                           path=None if issue.path is None else prefix + issue.path) for issue in report.issues]
        listed += [replace(entry, path=prefix + entry.path) for entry in report.files]
        for judge in report.policies:
            cells = [row[judge] for row in report.cells.values() if judge in row]
            tokens, total = _judge_logps(nested, judge, [cell.step for cell in cells])
            entries.append({"learner": nested.name, "judge": judge, "steps": len(cells),
                            "records": sum(cell.records for cell in cells), "tokens": tokens,
                            "judge_logp_mean": total / tokens if tokens else None})
    return entries, issues, listed


def _judge_logps(nested: Path, judge: str, steps: list[int]) -> tuple[int, float]:
    """The judge's scored tokens and the sum of their log-probs over ``steps`` (shards that do not read are the
    inspection's issues already, and are left out here)."""
    tokens, total = 0, 0.0
    for step in steps:
        folder = files.step_dir(nested, step) / judge
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if not files.MANIFEST_RE.match(entry.name):
                continue
            try:
                table = load_shard(read_manifest(Path(entry.path)), verify_checksum=False)
            except (CorruptShardError, FileNotFoundError):
                continue
            if "behaviour_logps" not in table.column_names:
                continue
            flat = pc.list_flatten(table.column("behaviour_logps"))
            finite = pc.filter(flat, pc.is_finite(flat))
            tokens += len(finite)
            total += float(pc.sum(finite).as_py() or 0.0)
    return tokens, (total if math.isfinite(total) else math.nan)
