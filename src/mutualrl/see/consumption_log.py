"""The consumption log: which peer round each step of a policy read, and which rounds it skipped.

``<see>/_consumed/<policy>.jsonl`` is written by the policy's rank 0 only, one JSON line per
decision (plain appends: a reader skips a line still being written):

- a *read* row per exchange round: ``{"run_id", "step", "peer_step", "age", "waited", "peers",
  "departed", "read_from", "time", "clock", "wait_s"}`` (``see.max_staleness``, ``see.on_peer_failure``; ``clock``: the
  writer's monotonic clock, for round times);
- a *skip* row per catch-up decision (``see.catch_up``): ``{"run_id", "kind": "skip", "step",
  "until"}``: the policy trains no round in ``[step, until)``. Peers read these rows to tell a
  skipped round (committed as "no data", never waited for) from a late one;
- a *rejoin* row when the launcher restarted the policy into the run (``see.max_restarts``):
  ``{"run_id", "kind": "rejoin", "step"}`` (the checkpoint it resumed from). Peers forget its
  earlier lines: what it committed or skipped before says nothing about where it is now.

The other ranks of the policy poll it for rank 0's decisions, peers read it for skips and round
times, and ``see.replay_consumption`` replays it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import append_text, write_text_atomic
from mutualrl.run_folder import read_bytes

CONSUMED_DIR = "_consumed"
SKIP = "skip"
REJOIN = "rejoin"


def log_path(see_root: Path | str, policy: str) -> Path:
    """``<see>/_consumed/<policy>.jsonl``: one line per decision, written by the policy's rank 0."""
    return Path(see_root) / CONSUMED_DIR / f"{policy}.jsonl"


def parse_log(path: Path) -> list[dict[str, Any]]:
    try:
        lines = read_bytes(path, max_bytes=2**40).decode("utf-8", errors="replace").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    return _parse_lines(lines)


def _parse_lines(lines: list[str]) -> list[dict[str, Any]]:
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:  # a line being appended right now
            continue
        if isinstance(row, dict) and all(isinstance(row.get(k, 0), int) for k in ("step", "until")):  # else damaged
            rows.append(row)
    return rows


def is_skip_row(row: dict[str, Any]) -> bool:
    return row.get("kind") == SKIP


def is_read_row(row: dict[str, Any]) -> bool:
    return row.get("kind") is None


def read_consumption(see_root: Path | str, policy: str, run_id: str | None = None,
                     kind: str = "read") -> list[dict[str, Any]]:
    """The consumption log of ``policy`` in the exchange ``see_root``: its ``kind`` rows ("read" or "skip"),
    of ``run_id`` only when given."""
    rows = parse_log(log_path(see_root, policy))
    return [r for r in rows if (run_id is None or r.get("run_id") == run_id) and (r.get("kind") or "read") == kind]


def rollback_log(see_root: Path | str, step: int) -> int:
    """Resuming from optimizer step ``step``: drop every policy's lines of rounds from ``step`` on (and skip spans
    reaching past it), as the exchange's step folders are; returns how many lines went."""
    removed = 0
    folder = Path(see_root) / CONSUMED_DIR
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        rows = parse_log(path)
        kept = [r if not is_skip_row(r) else {**r, "until": min(int(r["until"]), step)}
                for r in rows if int(r.get("step", 0)) < step]  # a span cut by the resume ends there
        removed += len(rows) - len(kept)
        if kept != rows:
            write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
    return removed


def append_row(see_root: Path | str, policy: str, row: dict[str, Any]) -> None:
    path = log_path(see_root, policy)
    path.parent.mkdir(parents=True, exist_ok=True)
    append_text(path, json.dumps(row) + "\n")  # a whole line or none; a full disk names the file


class LogTail:
    """A peer's consumption log of one run, read incrementally (only bytes appended since the last call)."""

    def __init__(self, see_root: Path | str, policy: str, run_id: str, from_end: bool = False):
        self.path = log_path(see_root, policy)
        self.run_id = run_id
        self.offset = 0
        if from_end:  # only what is appended from now on (a restarted policy's own earlier lines are not news)
            try:
                self.offset = os.stat(self.path).st_size
            except (FileNotFoundError, NotADirectoryError):
                pass
        self.rows: list[dict[str, Any]] = []
        self.skipped_spans: list[tuple[int, int]] = []
        self.rejoined = False  # restarted into the run: only lines after its rejoin line count

    def refresh(self) -> list[dict[str, Any]]:
        try:
            size = os.stat(self.path).st_size
        except (FileNotFoundError, NotADirectoryError):
            return self.rows
        if size <= self.offset:
            return self.rows
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read(size - self.offset)
        complete = chunk[: chunk.rfind(b"\n") + 1]  # keep a half-written last line for the next call
        self.offset += len(complete)
        for row in _parse_lines(complete.decode(errors="replace").splitlines()):
            if row.get("run_id") != self.run_id:
                continue
            if row.get("kind") == REJOIN:
                self.rows, self.skipped_spans, self.rejoined = [], [], True
                continue
            self.rows.append(row)
            if is_skip_row(row) and row["until"] > row["step"]:
                self.skipped_spans.append((int(row["step"]), int(row["until"])))
        return self.rows

    def skipped(self, step: int) -> bool:
        """Whether this policy decided to train no round at ``step``."""
        self.refresh()
        return any(start <= step < until for start, until in self.skipped_spans)

    def skipped_past(self, step: int) -> bool:
        """Whether a skip took this policy past round ``step`` (decisions come in round order, so every round
        before a skipped span was committed or skipped too)."""
        self.refresh()
        return any(until > step for _, until in self.skipped_spans)

    def read_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.refresh() if is_read_row(r)]

    def reached(self, step: int) -> bool:
        """From its lines alone: whether this policy read a round at or after ``step`` (after committing it), or
        skipped past it."""
        return self.skipped_past(step) or any(int(r["step"]) >= step for r in self.read_rows())
