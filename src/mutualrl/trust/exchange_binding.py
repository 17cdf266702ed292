"""An exchange folder belongs to one run: its unique id is written in the folder and checked on every open.

Two runs given one ``see.dir`` would read (or overwrite) each other's shards: shard files are named by policy,
step and rank, not by run. The launcher binds the folder to its run before any worker starts
(:func:`bind_exchange`) and every :class:`~mutualrl.see.exchange.ExperienceExchange` refuses a folder bound to
another run (:func:`check_exchange_owner`). A folder without the file (made by hand, or by a version before
this one) is bound by the next launch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_text_atomic
from mutualrl.errors import UsageError
from mutualrl.run_folder import read_json_or

OWNER_NAME = ".mutualrl-see-owner"


def owner_file(root: Path) -> Path:
    return Path(root) / OWNER_NAME


def exchange_owner(root: Path) -> dict[str, str] | None:
    """``{"run_id": ..., "run": <run folder>}`` of the run the exchange belongs to; None when unbound. A damaged
    file is an owner nobody matches (``run_id`` empty): the folder is not used until a launcher rebinds it."""
    if not owner_file(root).exists():
        return None
    owner: Any = read_json_or(owner_file(root), {})
    return {key: str(owner.get(key, ""))[:300] for key in ("run_id", "run")}


def check_exchange_owner(root: Path, run_id: str) -> None:
    """Refuse an exchange folder bound to another run than ``run_id`` (one line naming both)."""
    owner = exchange_owner(root)
    if owner is not None and owner["run_id"] != run_id:
        raise UsageError(f"SEE folder {root} belongs to run {owner['run'] or '?'} (id {owner['run_id'] or '?'}), "
                         f"not to this run (id {run_id}): two runs cannot share one see.dir; give each its own")


def bind_exchange(root: Path, run_id: str, run_folder: Path) -> None:
    """Bind the exchange folder ``root`` to the run ``run_id`` (kept in ``run_folder``)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    write_text_atomic(owner_file(root), json.dumps({"run_id": run_id, "run": str(run_folder)}) + "\n")
