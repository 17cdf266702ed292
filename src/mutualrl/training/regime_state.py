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

import json
import logging
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.errors import UsageError

log = logging.getLogger(__name__)

REGIME_STATE_NAME = "mutualrl-regime-state.json"
REGIME_STATE_FORMAT = "mutualrl-regime-state"
REGIME_STATE_VERSION = 1


def save_regime_state(folder: Path, regime: Any, step: int) -> Path:
    """Write ``regime``'s state at ``step`` into the checkpoint ``folder`` (atomically); its path."""
    return write_json_atomic(folder / REGIME_STATE_NAME, {
        "format": REGIME_STATE_FORMAT, "version": REGIME_STATE_VERSION, "regime": regime.name,
        "policy": regime.policy, "step": int(step), "state": regime.state_dict()}, allow_nan=False)


def keeps_state(regime: Any) -> bool:
    """Whether ``regime``'s class keeps a running state (overrides ``state_dict``)."""
    from mutualrl.regimes.core.adapter import RegimeAdapter

    return type(regime).state_dict is not RegimeAdapter.state_dict


def load_regime_state(folder: Path, regime: Any) -> bool:
    """Give ``regime`` the state saved in the checkpoint ``folder``; False where it holds none (an older checkpoint).
    A file of another regime or policy, or one the regime cannot read, is refused in one line naming it."""
    path = folder / REGIME_STATE_NAME
    if not path.is_file():
        if keeps_state(regime):
            log.warning("policy %s: %s holds no %s (saved by an older mutualrl): regime %s starts its running state "
                        "afresh, so this run is not the one an uninterrupted run would be", regime.policy, folder,
                        REGIME_STATE_NAME, regime.name)
        return False
    try:
        saved = json.loads(path.read_text())
        if not isinstance(saved, dict) or saved.get("format") != REGIME_STATE_FORMAT:
            raise ValueError(f"not a {REGIME_STATE_FORMAT} file")
        for key, mine in (("regime", regime.name), ("policy", regime.policy)):
            if saved.get(key) != mine:
                raise UsageError(f"{path}: the state of {key} {saved.get(key)!r}, not {mine!r}; not resumed from")
        state = saved["state"]
        if not isinstance(state, dict):
            raise TypeError("its state is not a mapping")
        regime.load_state_dict(state)
    except UsageError as err:
        raise UsageError(str(err) if str(path) in str(err) else f"{path}: {err}") from None
    except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise UsageError(f"{path}: unreadable regime state ({type(err).__name__}: {str(err)[:200]}); `mutualrl train "
                         "--resume` picks the newest complete checkpoint") from None
    return True
