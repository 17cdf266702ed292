"""What the chaos scripts of one fault class per trial share: the class schedule, the summary and ``main``."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def trial_class(classes: Sequence[str], index: int, rng: random.Random) -> str:
    """Trial ``index``'s fault class: each class once in order, then drawn at random."""
    return classes[index % len(classes)] if index < len(classes) else rng.choice(classes)


def summary(results: list[dict[str, Any]], seed: int, started: float, failed_trials: list[int],
            counts: dict[str, int] | None = None) -> dict[str, Any]:
    """The one JSON object a chaos script prints: trials by class, how many held, which failed, and each trial."""
    return {"trials": len(results), "seed": seed, "by_class": dict(Counter(r["class"] for r in results)),
            **(counts or {}), "held": len(results) - len(failed_trials), "failed_trials": failed_trials,
            "seconds": round(time.time() - started, 1), "per_trial": results}


def chaos_main(doc: str, run_trials: Callable[[int, int, Path], dict[str, Any]], trials: int, out: str) -> None:
    """Parse ``--trials --seed --out``, run the trials, print the summary; exit 1 when a trial failed."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--trials", type=int, default=trials)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / out)
    args = parser.parse_args()
    result = run_trials(args.trials, args.seed, args.out)
    print(json.dumps(result))
    sys.exit(0 if not result["failed_trials"] else 1)
