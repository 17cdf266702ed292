"""The run's merged metrics file: one writer (the launcher of machine 0) tails every policy's own metrics file
into it as it grows, and rolls both back when a policy restarts or the run resumes from a checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mutualrl.atomic_io import append_text, write_text_atomic
from mutualrl.run_folder import RunPaths, parse_metric_row, read_metric_rows


class MetricsMerger:
    """Tails each policy's own metrics file into the run's merged one (complete lines only)."""

    def __init__(self, paths: RunPaths, policies: Sequence[str]):
        self.paths = paths
        self.offsets = {p: 0 for p in policies}
        for policy in policies:  # on resume, skip what was merged before
            self.offsets[policy] = self._merged_bytes(policy)

    def _merged_bytes(self, policy: str) -> int:
        marker = self.paths.merged_marker(policy)
        return int(marker.read_text()) if marker.exists() else 0

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
            out_lines.extend(complete.decode().splitlines(keepends=True))
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
        for result in self.paths.policy_eval_dir(policy).glob("step-*.json"):  # validated again when redone
            if int(result.stem.split("-")[1]) > step:
                result.unlink()
        merged, _ = read_metric_rows(self.paths.metrics)
        write_text_atomic(self.paths.metrics, "".join(
            f"{line}\n" for line, obj in merged if obj.get("policy") != policy or int(obj.get("step", 0)) <= step))



def keep_policy_rows(paths: RunPaths, policy: str, step: int) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """Keep ``policy``'s metric rows up to ``step`` in its own file, marked as merged; (kept rows, rows dropped:
    after ``step`` or damaged)."""
    path = paths.policy_metrics(policy)
    rows, damaged = read_metric_rows(path)
    kept = [(line, obj) for line, obj in rows if int(obj.get("step", 0)) <= step]
    if path.exists():
        write_text_atomic(path, "".join(f"{line}\n" for line, _ in kept))
        write_text_atomic(paths.merged_marker(policy), str(path.stat().st_size))
    return kept, damaged + len(rows) - len(kept)


def rollback_metrics(paths: RunPaths, policies: list[str], step: int) -> int:
    """Keep each policy's rows up to ``step`` and rebuild the merged metrics file from them.

    The per-policy files are the source of truth: the merged file lags them by up to one
    poll of the launcher, and a killed launcher never merged its last rows. Returns how
    many rows (after ``step`` or damaged) were dropped.
    """
    dropped, merged = 0, []
    for policy in policies:
        kept, gone = keep_policy_rows(paths, policy, step)
        dropped += gone
        merged.extend(kept)
        # A validation result without its row (killed between the two writes) is run again.
        logged = {obj.get("step") for _, obj in kept if obj.get("kind") == "eval"}
        for result in paths.policy_eval_dir(policy).glob("step-*.json"):
            if int(result.stem.split("-")[1]) not in logged:
                result.unlink()
    merged.sort(key=lambda row: (row[1].get("time", 0.0), row[1].get("step", 0)))
    write_text_atomic(paths.metrics, "".join(f"{line}\n" for line, _ in merged))
    return dropped
