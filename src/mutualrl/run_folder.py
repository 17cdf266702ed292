"""The run folder RUN, the interface between the launcher and its workers (docs/run-layout.md).

Every path under RUN is named here and nowhere else, and so is the one rule for a damaged line
of a metrics file: a line that is not one whole JSON object (a write cut short by a kill or a
full disk) is skipped and counted, never an error.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.errors import RunFolderError

#: The run's metrics file, every policy's rows merged by the launcher.
METRICS_FILE = "metrics.jsonl"
#: Marks a folder as a mutualrl run: ``--overwrite`` deletes nothing else.
RUN_MARKER = ".mutualrl-run"
#: The run lock (machine K > 0 of several: ``.lock-machine-K``).
LOCK_NAME = ".lock"
#: Files through which the launchers of several machines coordinate.
MACHINES_DIR = ".machines"


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        """The resolved config (what workers and ``--resume`` read)."""
        return self.root / "config.yaml"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def metrics(self) -> Path:
        """Every policy's rows, merged by the launcher from :meth:`policy_metrics`."""
        return self.root / METRICS_FILE

    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def comparison(self) -> Path:
        """``--baseline``: the run and its baseline side by side."""
        return self.root / "comparison.json"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def launch(self) -> Path:
        return self.root / "launch"

    @property
    def shipped_rewards(self) -> Path:
        """Reward functions the Python API shipped by value (cloudpickle), ``<sha256>.pkl`` each: a worker loads one
        only when its launcher named that digest (:mod:`mutualrl.tasks.shipped_rewards`)."""
        return self.launch / "rewards"

    @property
    def plan(self) -> Path:
        """The launch plan (``--dry-run`` shows the same)."""
        return self.launch / "plan.json"

    @property
    def marker(self) -> Path:
        """Marks a mutualrl run and holds its unique id (:func:`run_id`)."""
        return self.root / RUN_MARKER

    @property
    def inputs(self) -> Path:
        """What the run's user code and data were (module files and hashes, the data copy's hashes)."""
        return self.root / "inputs.json"

    @property
    def machines_dir(self) -> Path:
        return self.root / MACHINES_DIR

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def policies(self) -> Path:
        return self.root / "policies"

    @property
    def eval_dir(self) -> Path:
        return self.root / "eval"

    @property
    def status_dir(self) -> Path:
        return self.root / "status"

    def see_root(self, configured: str | None = None) -> Path:
        """The exchange folder: ``see.dir`` when the config sets one, else ``RUN/see``."""
        return Path(configured) if configured else self.root / "see"

    def training_outputs(self) -> tuple[Path, ...]:
        """What a run produces while training (removed when a run without any checkpoint starts again)."""
        return (self.policies, self.metrics_dir, self.metrics, self.eval_dir, self.status_dir, self.summary,
                self.comparison)

    def accelerate_config(self, policy: str) -> Path:
        return self.launch / f"{policy}.accelerate.yaml"

    def deepspeed_config(self, policy: str) -> Path:
        return self.launch / f"{policy}.deepspeed.json"

    def planned_grpo(self, policy: str) -> Path:
        """GRPOConfig fields the launch plan decided for ``policy`` (batch derivation, device adaptation)."""
        return self.launch / f"{policy}.grpo.json"

    def policy_metrics(self, policy: str) -> Path:
        return self.metrics_dir / f"{policy}.jsonl"

    def merged_marker(self, policy: str) -> Path:
        """How many bytes of :meth:`policy_metrics` are merged into :attr:`metrics`."""
        return self.metrics_dir / f".{policy}.merged"

    def status(self, policy: str) -> Path:
        return self.status_dir / f"{policy}.json"

    def reward_call(self, policy: str) -> Path:
        """The name of the reward function ``policy`` is calling now (gone between calls): a worker that ends or
        hangs inside one is reported naming it."""
        return self.status_dir / f"{policy}.reward-call"

    def log(self, policy: str) -> Path:
        return self.logs / f"{policy}.log"

    def policy_dir(self, policy: str) -> Path:
        return self.policies / policy

    def final_model(self, policy: str) -> Path:
        return self.policy_dir(policy) / "final"

    def policy_eval_dir(self, policy: str) -> Path:
        """A policy's validation results, one ``step-<NNNNNN>.json`` per validated step."""
        return self.eval_dir / policy

    def eval_result(self, policy: str, step: int) -> Path:
        return self.policy_eval_dir(policy) / f"step-{step:06d}.json"


def run_id(paths: RunPaths) -> str:
    """The run's unique id, written in its marker when it started; a run from before ids, or a marker that is
    damaged, has its folder's name (what the SEE keyed its records by then)."""
    marker = read_json_or(paths.marker, {})
    value = marker.get("run_id")
    ok = isinstance(value, str) and 0 < len(value) <= 200 and value.isprintable()
    return value if ok else paths.root.name


SEE_MARKER = ".mutualrl-see"


def see_marker(see_root: Path) -> Path:
    """Written into the exchange folder by the launcher as the pool starts: its disappearance mid-run means the
    folder was deleted (workers re-create the folders they write, so only a file they never write tells)."""
    return Path(see_root) / SEE_MARKER


def machine_lock_name(machine: int) -> str:
    """The lock file of machine ``machine`` (0: the run lock) of a run on several machines."""
    return LOCK_NAME if machine == 0 else f"{LOCK_NAME}-machine-{machine}"


MAX_JSON_BYTES = 256 * 1000 * 1000
"""A run-folder JSON file larger than this is damaged (the largest, an eval result, holds a few MB)."""
METRICS_MAX_BYTES = 2 * 1000 * 1000 * 1000
"""A metrics file larger than this is damaged: a row is at most a few kB (a train row with every per-source
diagnostic of an 8-policy pool), so 2 GB is some 500,000 rows, 60,000 steps of 8 policies; it is read whole, and a
file of 8 GB (``truncate -s 8G``) made ``report`` hold 16.8 GB."""
SPARSE_MIN_BYTES = 64 * 1024 * 1024
"""A file this large is checked for holes before it is read or hashed."""


def is_sparse(info: os.stat_result) -> bool:
    """Whether a file is far larger than the blocks it holds (a sparse file: ``truncate -s 4T``): real data, even
    on a compressing filesystem, holds a sixteenth of its size; reading one would read gigabytes of zeros."""
    return info.st_size > SPARSE_MIN_BYTES and info.st_blocks * 512 * 16 < info.st_size


def read_bytes(path: Path, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The content of a regular file of the run folder; a FIFO, a device, a folder, a file over ``max_bytes`` or a
    sparse one (:func:`is_sparse`) is a :class:`RunFolderError` naming it, unread (opened without blocking: a FIFO
    never hangs the reader)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise RunFolderError(f"{path}: a folder where a file belongs; remove it") from None
    except OSError as err:
        raise RunFolderError(f"{path}: cannot be read ({err.strerror or err})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RunFolderError(f"{path}: not a regular file (a FIFO, device or folder); remove it")
        if info.st_size > max_bytes:
            raise RunFolderError(f"{path}: {info.st_size:,} bytes, more than such a file ever holds (at most "
                                 f"{max_bytes:,}); damaged, not read")
        if is_sparse(info):
            raise RunFolderError(f"{path}: {info.st_size:,} bytes but only {info.st_blocks * 512:,} on disk (a sparse "
                                 "file), not one a run wrote; damaged, not read")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read()
    except OSError as err:
        raise RunFolderError(f"{path}: cannot be read ({err.strerror or err})") from None
    finally:
        os.close(fd)


def read_tail(path: Path, max_bytes: int) -> bytes:
    """The last ``max_bytes`` of a regular file (a log), without reading the rest; ``b""`` when it is missing,
    unreadable or not a regular file (a FIFO never blocks the reader)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.pread(fd, max_bytes, max(0, size - max_bytes))
    except OSError:
        return b""
    finally:
        os.close(fd)


def read_json(path: Path, expect: type | tuple[type, ...] = dict) -> Any:
    """A JSON file of the run folder, of type ``expect`` (default: an object); missing: ``FileNotFoundError``;
    anything else wrong (not JSON, another type, a special file) is one :class:`RunFolderError` naming it."""
    data = read_bytes(Path(path))
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise RunFolderError(f"{path}: damaged, not JSON ({err})") from None
    except RecursionError:  # nested past the interpreter's limit: written to crash its reader
        raise RunFolderError(f"{path}: damaged, JSON nested too deeply to read") from None
    if not isinstance(value, expect):
        names = " or ".join(t.__name__ for t in (expect if isinstance(expect, tuple) else (expect,)))
        raise RunFolderError(f"{path}: damaged, holds a JSON {type(value).__name__} where a {names} belongs")
    return value


def read_json_or(path: Path, default: Any = None, expect: type | tuple[type, ...] = dict) -> Any:
    """:func:`read_json`, or ``default`` when the file is missing or damaged: for files whose loss costs nothing
    (live status, heartbeats) and that their writer replaces soon."""
    try:
        return read_json(path, expect)
    except (FileNotFoundError, RunFolderError):
        return default


def launch_folders(paths: RunPaths) -> list[Path]:
    """Where the run's workers looked for user code: each policy's working directory and ``PYTHONPATH`` as its
    launch plan recorded them (``launch/plan.json``), in order, once each; empty without a readable plan."""
    plan = read_json_or(paths.plan, {})
    policies = plan.get("policies") if isinstance(plan, dict) else None
    folders: list[Path] = []
    for entry in policies if isinstance(policies, list) else []:
        launch = entry.get("launch") if isinstance(entry, dict) else None
        if not isinstance(launch, dict):
            continue
        env = launch.get("env") if isinstance(launch.get("env"), dict) else {}
        for text in [launch.get("cwd"), *str(env.get("PYTHONPATH") or "").split(os.pathsep)]:
            if isinstance(text, str) and text and Path(text) not in folders:
                folders.append(Path(text))
    return folders


def read_status(path: Path) -> dict[str, Any]:
    """A policy's live status (``status/<policy>.json``) for the launcher's progress line: ``{}`` when missing or
    damaged (its worker rewrites it at the next step), ``step`` and ``max_steps`` kept only as whole numbers,
    ``phase`` only as text, figures only as numbers (whatever a hand or a bug wrote there)."""
    status = read_json_or(path, {})
    clean: dict[str, Any] = {}
    for key, value in status.items():
        if key in ("step", "max_steps"):
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
                clean[key] = value
        elif key == "phase":
            if isinstance(value, str):
                clean[key] = value[:200]
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            clean[key] = value
    return clean


def parse_metric_row(line: str) -> dict[str, Any] | None:
    """One metrics line as its row; None when the line is damaged: not one whole JSON object, or a ``step`` that is
    not a whole number, a ``kind`` or ``policy`` that is not text (a hand edit: every reader would trip on it)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(row, dict):
        return None
    step = row.get("step", 0)
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return row if all(isinstance(row.get(key, ""), str) for key in ("kind", "policy")) else None


def read_metric_rows(path: Path) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """(line, row) of every whole row of a metrics file (none when it does not exist), and how many damaged
    lines were skipped; blank lines are neither. A file over :data:`METRICS_MAX_BYTES`, or sparse, is a
    :class:`RunFolderError` naming it."""
    try:
        text = read_bytes(path, max_bytes=METRICS_MAX_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return [], 0
    rows, damaged = [], 0
    for line in text.splitlines():
        row = parse_metric_row(line)
        if row is not None:
            rows.append((line, row))
        else:
            damaged += int(bool(line.strip()))
    return rows, damaged
