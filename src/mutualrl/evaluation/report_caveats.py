"""What a finished run's own summary says that a reader of its numbers must be told: a sharing method that used
few or none of its peers' samples (it trained as standalone GRPO, whatever its row is called), a policy restarted
mid-run (from its start, or from a checkpoint while its peers went on) and a policy that left the pool.

Read from ``RUN/summary.json`` (``peer_samples_used``, ``warnings``, ``restarted``, ``lost``; written by
:mod:`mutualrl.launch.rundir.summary`), and shown as a mark beside the row and a line under every table and in the
figure caption.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.run_folder import RunPaths, read_json_or

#: A sharing regime whose policy used less than this share of its peers' samples (mean over its runs) is marked.
FEW_PEER_SAMPLES = 0.10


@dataclass
class RunCaveats:
    """One run's peer-sample shares (``policy -> share``; absent where its regime logs none) and its lines."""

    peer_share: dict[str, float]
    events: dict[str, list[str]]  # policy -> restarts and departures, in words


def read_caveats(run: Path) -> RunCaveats:
    """The caveats of ``run`` from its summary.json (none when it has no readable one)."""
    summary = read_json_or(RunPaths(run).summary, {})
    policies = summary.get("policies") if isinstance(summary, dict) else None
    shares = {name: float(entry["peer_samples_used"]) for name, entry in (policies or {}).items()
              if isinstance(entry, dict) and isinstance(entry.get("peer_samples_used"), (int, float))}
    events: dict[str, list[str]] = {}
    for name, attempts in (summary.get("restarted") or {}).items() if isinstance(summary, dict) else []:
        for attempt in attempts if isinstance(attempts, list) else []:
            origin = attempt.get("resumed_from") if isinstance(attempt, dict) else None
            where = "its start (step 0)" if origin is None else f"checkpoint {origin}"
            events.setdefault(name, []).append(f"restarted from {where} after leaving at step "
                                               f"{attempt.get('step') if isinstance(attempt, dict) else '?'}")
    for name, left in (summary.get("lost") or {}).items() if isinstance(summary, dict) else []:
        step = left.get("step") if isinstance(left, dict) else "?"
        events.setdefault(name, []).append(f"left the pool at step {step}")
    return RunCaveats(shares, events)


def cell_caveats(label: str, policy: str, runs: Sequence[tuple[Any, RunCaveats]]) -> list[str]:
    """The lines for one group and policy over its runs (``(seed, caveats)``): the mean peer-sample share when it
    is below :data:`FEW_PEER_SAMPLES`, and every restart or departure, by seed."""
    lines = []
    shares = [caveats.peer_share[policy] for _, caveats in runs if policy in caveats.peer_share]
    if shares and sum(shares) / len(shares) < FEW_PEER_SAMPLES:
        mean = sum(shares) / len(shares)
        tail = ": it trained as standalone GRPO" if max(shares) == 0 else ""
        lines.append(f"{label}, {policy}: used {mean:.0%} of its peers' samples (mean over {len(shares)} runs)"
                     f"{tail}")
    for seed, caveats in runs:
        lines += [f"{label}, {policy}, seed {seed}: {event}" for event in caveats.events.get(policy, [])]
    return lines
