"""A regime's running state saved with each checkpoint and given back on resume, so a resumed run equals an
uninterrupted one (without it, HACPO's capability window would restart from the steps the resumed process saw).

What a regime carries from one step to the next is its :meth:`~mutualrl.regimes.core.adapter.RegimeAdapter.state_dict`
(``{}`` for a regime with none); the trainer writes it into the checkpoint folder as :data:`REGIME_STATE_NAME`, a small
JSON file, on the rank that saves (the state is the same on every rank of a policy), atomically, before the checkpoint's
manifest (``ops/checkpoint_files.py``), which so lists it with its size: a checkpoint whose state file went missing or
was cut short is passed over like one missing its optimizer state. On resume every rank reads it back and hands it to
:meth:`~mutualrl.regimes.core.adapter.RegimeAdapter.load_state_dict` before the first resumed step. A checkpoint saved
before this file existed resumes as before, with the regime's state started afresh (said once in the log, for a regime
that keeps any).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.errors import UsageError
from mutualrl.regimes.core.state_file import (
    REGIME_STATE_FORMAT,
    REGIME_STATE_NAME,
    REGIME_STATE_VERSION,
    RegimeStateError,
    first_nonfinite,
    read_regime_state,
)

log = logging.getLogger(__name__)

__all__ = ["REGIME_STATE_FORMAT", "REGIME_STATE_NAME", "REGIME_STATE_VERSION", "keeps_state", "load_regime_state",
           "save_regime_state"]


def save_regime_state(folder: Path, regime: Any, step: int) -> Path:
    """Write ``regime``'s state at ``step`` into the checkpoint ``folder`` (atomically); its path. A state holding a
    value that is not a finite number is never written: one line names the file and the value (the checkpoint then
    has no manifest, and ``--resume`` passes it over)."""
    path = folder / REGIME_STATE_NAME
    state = regime.state_dict()
    nonfinite = first_nonfinite(state)
    if nonfinite is not None:
        raise UsageError(f"{path}: not saved: regime {regime.name}'s state holds a number that is not finite "
                         f"({nonfinite}); the run stops here, `mutualrl train --resume` continues from the checkpoint "
                         "before it")
    return write_json_atomic(path, {
        "format": REGIME_STATE_FORMAT, "version": REGIME_STATE_VERSION, "regime": regime.name,
        "policy": regime.policy, "step": int(step), "state": state}, allow_nan=False)


def keeps_state(regime: Any) -> bool:
    """Whether ``regime``'s class keeps a running state (overrides ``state_dict``)."""
    from mutualrl.regimes.core.adapter import RegimeAdapter

    return type(regime).state_dict is not RegimeAdapter.state_dict


def load_regime_state(folder: Path, regime: Any) -> bool:
    """Give ``regime`` the state saved in the checkpoint ``folder``; False where it holds none (an older checkpoint).
    The file is read by the launcher's one strict reader (:func:`~mutualrl.regimes.core.state_file.read_regime_state`);
    a file of another regime or policy, or one the regime cannot take, is refused in one line naming it and the
    checkpoint to set aside (``--resume`` alone would choose the same checkpoint again)."""
    path = folder / REGIME_STATE_NAME
    if not path.is_file():
        if keeps_state(regime):
            log.warning("policy %s: %s holds no %s (saved by an older mutualrl): regime %s starts its running state "
                        "afresh, so this run is not the one an uninterrupted run would be", regime.policy, folder,
                        REGIME_STATE_NAME, regime.name)
        return False
    try:
        regime.load_state_dict(read_regime_state(path, regime.name, regime.policy))
    except RegimeStateError as err:
        raise UsageError(f"{err}; {set_aside(folder)}") from None
    except UsageError as err:
        raise UsageError(f"{err if str(path) in str(err) else f'{path}: {err}'}; {set_aside(folder)}") from None
    except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError, IndexError,
            OverflowError) as err:
        raise UsageError(f"{path}: unreadable regime state ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
                         f"; {set_aside(folder)}") from None
    return True


def set_aside(checkpoint: Path) -> str:
    """What to do with a checkpoint whose regime state is refused: resume from the one before it."""
    return (f"not resumed from: move {checkpoint} out of {checkpoint.parent}, then `mutualrl train --resume` "
            "continues from the checkpoint before it")
