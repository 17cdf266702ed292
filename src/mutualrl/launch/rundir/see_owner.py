"""The launcher's side of an exchange bound to one run (:mod:`mutualrl.trust.exchange_binding`): refuse an exchange a live
run uses, else bind it to this run before any worker opens it."""

from __future__ import annotations

from pathlib import Path

from mutualrl.errors import UsageError
from mutualrl.host.file_lock import lock_held
from mutualrl.run_folder import LOCK_NAME, RunPaths, run_id
from mutualrl.trust.exchange_binding import bind_exchange, exchange_owner


def run_lock_held(folder: Path) -> bool:
    """Whether a process holds the run lock of ``folder`` (``RUN/.lock``, an OS lock: a dead run holds none; where
    nothing can tell, nothing is refused)."""
    return lock_held(Path(folder) / LOCK_NAME) is True


def refuse_live_owner(see_root: Path, paths: RunPaths) -> None:
    """Refuse an exchange folder bound to another run whose launcher or workers are alive."""
    owner = exchange_owner(see_root)
    if owner is None or owner["run_id"] == run_id(paths) or not owner["run"]:
        return
    other = Path(owner["run"])
    if other.resolve() != paths.root.resolve() and run_lock_held(other):
        raise UsageError(f"see.dir {see_root} is in use by the live run {other} (id {owner['run_id']}): two runs "
                         "cannot share one exchange; give this run its own see.dir (or leave it unset: RUN/see)")


def claim_exchange(see_root: Path, paths: RunPaths) -> bool:
    """Bind ``see_root`` to the run at ``paths`` unless a live run holds it; True when it was bound to another
    (stopped) run before."""
    refuse_live_owner(see_root, paths)
    owner = exchange_owner(see_root)
    if owner is not None and owner["run_id"] == run_id(paths):
        return False
    bind_exchange(see_root, run_id(paths), paths.root)
    return owner is not None
