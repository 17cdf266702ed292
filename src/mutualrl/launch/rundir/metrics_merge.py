"""The run's merged metrics file: one writer (the launcher of machine 0) tails every policy's own metrics file
into it as it grows, and rolls both back when a policy restarts or the run resumes from a checkpoint."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mutualrl.atomic_io import append_text, write_text_atomic
from mutualrl.evaluation.results import step_files
from mutualrl.errors import RunFolderError
from mutualrl.run_folder import RunPaths, parse_metric_row, read_bytes, read_metric_rows


class MetricsMerger:
    """Tails each policy's own metrics file into the run's merged one (complete lines only)."""

    def __init__(self, paths: RunPaths, policies: Sequence[str]):
        self.paths = paths
        self.offsets = {p: 0 for p in policies}
        for policy in policies:  # on resume, skip what was merged before
            self.offsets[policy] = self._merged_bytes(policy)

    def _merged_bytes(self, policy: str) -> int:
        try:  # damaged (not a number): merge the policy's file from its start again, rather than stop the run
            merged = int(read_bytes(self.paths.merged_marker(policy), max_bytes=100))
        except (FileNotFoundError, RunFolderError, ValueError):
            return 0
        return merged if merged >= 0 else 0

    def poll(self) -> list[dict[str, Any]]:
        """Merge what the policies wrote since the last poll; returns the new rows (parsed), in merge order."""
        out_lines: list[str] = []
        advanced: dict[str, int] = {}  # policy -> its new offset, kept once its rows are appended
        for policy, offset in self.offsets.items():
            path = self.paths.policy_metrics(policy)
            if not path.exists():
                continue
            with path.open("rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            complete = chunk[: end + 1]
            out_lines.extend(complete.decode(errors="replace").splitlines(keepends=True))  # whatever was written
            advanced[policy] = offset + len(complete)
        if out_lines:  # whole lines or none (a full disk), then the offsets that say they were merged
            append_text(self.paths.metrics, "".join(out_lines))
        for policy, offset in advanced.items():
            self.offsets[policy] = offset
            write_text_atomic(self.paths.merged_marker(policy), str(offset))
        # a damaged line is merged as it is, just not shown
        return [row for line in out_lines if (row := parse_metric_row(line)) is not None]

    def rollback(self, policy: str, step: int) -> None:
        """``policy`` restarts from optimizer step ``step`` (see.max_restarts) and redoes the steps after it: drop
        its rows past ``step`` from its file and from the merged file so none is there twice."""
        self.poll()
        keep_policy_rows(self.paths, policy, step)
        self.offsets[policy] = self._merged_bytes(policy)
        for result_step, result in step_files(self.paths.policy_eval_dir(policy)).items():
            if result_step > step:  # validated again when redone
                result.unlink()
        merged, _ = read_metric_rows(self.paths.metrics)
        write_text_atomic(self.paths.metrics, "".join(
            f"{line}\n" for line, obj in merged if obj.get("policy") != policy or row_step(obj) <= step))


def row_step(row: dict[str, Any]) -> int:
    """A row's step; a row whose step is not a whole number (damaged by hand) counts as step 0's."""
    step = row.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else 0


def keep_policy_rows(paths: RunPaths, policy: str, step: int,
                     extra: Sequence[tuple[str, dict[str, Any]]] = ()) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """Keep ``policy``'s metric rows up to ``step`` (and the re-made ``extra`` ones) in its own file, marked as
    merged; (kept rows, rows dropped: after ``step`` or damaged)."""
    path = paths.policy_metrics(policy)
    rows, damaged = read_metric_rows(path)
    kept = [(line, obj) for line, obj in rows if row_step(obj) <= step] + list(extra)
    if path.exists() or extra:
        write_text_atomic(path, "".join(f"{line}\n" for line, _ in kept))
        write_text_atomic(paths.merged_marker(policy), str(path.stat().st_size))
    return kept, damaged + len(rows) + len(extra) - len(kept)


def remade_eval_rows(paths: RunPaths, policy: str, step: int, rows: list[tuple[str, dict[str, Any]]],
                     notes: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Validation results up to ``step`` whose row is gone (a damaged line, a kill between the two writes) are
    not validated again on resume: their row is re-made from the result. A result that cannot be read is moved
    aside as ``<name>.damaged`` and named in ``notes``; results past ``step`` are removed (validated again)."""
    from mutualrl.errors import MutualRLError
    from mutualrl.evaluation.results import ModelEvalResult

    logged = {row_step(obj) for _, obj in rows if obj.get("kind") == "eval" and row_step(obj) <= step}
    regime = next((obj["regime"] for _, obj in rows if isinstance(obj.get("regime"), str)), None)
    remade = []
    for result_step, result in sorted(step_files(paths.policy_eval_dir(policy)).items()):
        if result_step > step:
            result.unlink()
        elif result_step not in logged:
            try:
                metrics = ModelEvalResult.load(result).metrics()
            except (MutualRLError, OSError, ValueError, TypeError, KeyError, AttributeError) as err:
                result.rename(result.with_name(result.name + ".damaged"))
                notes.append(f"{result}: damaged validation result ({str(err)[:200]}), moved aside as "
                             f"{result.name}.damaged")
                continue
            before = [obj["time"] for _, obj in rows if row_step(obj) <= result_step
                      and isinstance(obj.get("time"), (int, float))]  # sorts with its step's rows
            row = {"kind": "eval", "policy": policy, "step": result_step, **({"regime": regime} if regime else {}),
                   "time": max(before, default=result.stat().st_mtime), **metrics, "remade_from": result.name}
            remade.append((json.dumps(row), row))
            notes.append(f"{policy}: the validation row of step {result_step} was missing or damaged; re-made "
                         f"from {result}")
    return remade


def rollback_metrics(paths: RunPaths, policies: list[str], step: int, notes: list[str] | None = None) -> int:
    """Keep each policy's rows up to ``step`` and rebuild the merged metrics file from them.

    The per-policy files are the source of truth: the merged file lags them by up to one
    poll of the launcher, and a killed launcher never merged its last rows. Returns how
    many rows (after ``step`` or damaged) were dropped; ``notes`` gets one line per validation
    row re-made from its result and per damaged result moved aside (nothing is deleted silently).
    """
    dropped, merged = 0, []
    notes = notes if notes is not None else []
    for policy in policies:
        rows, damaged = read_metric_rows(paths.policy_metrics(policy))
        if damaged:
            notes.append(f"{paths.policy_metrics(policy)}: {damaged} damaged line(s) dropped (a row past the "
                         "checkpoint is made again; a validation row is re-made from its result)")
        kept, gone = keep_policy_rows(paths, policy, step, remade_eval_rows(paths, policy, step, rows, notes))
        dropped += gone
        merged.extend(kept)
    merged.sort(key=lambda row: (row[1].get("time", 0.0) if isinstance(row[1].get("time"), (int, float)) else 0.0,
                                 row_step(row[1])))
    write_text_atomic(paths.metrics, "".join(f"{line}\n" for line, _ in merged))
    return dropped
