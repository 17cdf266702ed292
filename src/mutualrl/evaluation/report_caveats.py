"""What a finished run's own record says that a reader of its numbers must be told: a sharing method that used
few or none of its peers' samples (it trained as standalone GRPO, whatever its row is called), a policy restarted
mid-run (from its start, or from a checkpoint while its peers went on), a policy that left the pool, held-out
prompts its model was warm-started on, and a run that ``--resume`` trained again from step 0.

Read from ``RUN/summary.json`` (``peer_samples_used``, ``warnings``, ``restarted``, ``lost``, ``seen_prompts``;
written by :mod:`mutualrl.launch.rundir.summary`) and ``RUN/run.json`` (``resumes``; written by
:mod:`mutualrl.launch.rundir.record`), and shown as a mark beside the row and a line under every table and in the
figure caption. A record without these fields (an older run) has none of these caveats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.run_folder import RunPaths, read_json_or

#: A sharing regime whose policy used less than this share of its peers' samples (mean over its runs) is marked.
FEW_PEER_SAMPLES = 0.10


@dataclass
class RunCaveats:
    """One run's peer-sample shares (``policy -> share``; absent where its regime logs none), its lines about one
    policy (``policy -> lines``) and its lines about every policy of the run (``run_events``)."""

    peer_share: dict[str, float]
    events: dict[str, list[str]]  # policy -> restarts, departures and warm-start prompts, in words
    run_events: list[str] = field(default_factory=list)  # resumed from step 0, in words


def read_caveats(run: Path) -> RunCaveats:
    """The caveats of ``run`` from its summary.json and run.json (none from a file it lacks or cannot read)."""
    summary = read_json_or(RunPaths(run).summary, {})
    summary = summary if isinstance(summary, dict) else {}
    policies = summary.get("policies")
    shares = {name: float(entry["peer_samples_used"]) for name, entry in (policies or {}).items()
              if isinstance(entry, dict) and isinstance(entry.get("peer_samples_used"), (int, float))}
    events: dict[str, list[str]] = {}
    for name, attempts in mapping(summary.get("restarted")).items():
        for attempt in attempts if isinstance(attempts, list) else []:
            origin = attempt.get("resumed_from") if isinstance(attempt, dict) else None
            where = "its start (step 0)" if origin is None else f"checkpoint {origin}"
            events.setdefault(name, []).append(f"restarted from {where} after leaving at step "
                                               f"{attempt.get('step') if isinstance(attempt, dict) else '?'}")
    for name, left in mapping(summary.get("lost")).items():
        step = left.get("step") if isinstance(left, dict) else "?"
        events.setdefault(name, []).append(f"left the pool at step {step}")
    for name, line in warm_start_lines(summary.get("seen_prompts")):
        events.setdefault(name, []).append(line)
    return RunCaveats(shares, events, restart_lines(read_json_or(RunPaths(run).run_json, {})))


def mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else ``{}`` (a damaged or older record)."""
    return value if isinstance(value, dict) else {}


def warm_start_lines(seen: Any) -> list[tuple[str, str]]:
    """``(policy, line)`` for each policy scored on held-out prompts its model was warm-started on (summary.json's
    ``seen_prompts`` entries whose ``seen_as`` is the warm start and whose ``held_out`` count is above 0)."""
    from mutualrl.pools.seen_prompts import WARM_START

    lines = []
    for entry in seen if isinstance(seen, list) else []:
        if not isinstance(entry, dict) or entry.get("seen_as") != WARM_START:
            continue
        count, total = entry.get("held_out"), entry.get("held_out_of")
        if not isinstance(count, int) or count <= 0:
            continue
        share = f"{count} of {total} held-out prompts" if isinstance(total, int) else f"{count} held-out prompts"
        lines += [(str(policy), f"scored on prompts its model was warm-started on ({share} are in "
                                f"{entry.get('prompts', 'its warm start')})")
                  for policy in entry.get("policies") or [] if isinstance(policy, str)]
    return lines


def restart_lines(record: Any) -> list[str]:
    """One line per ``--resume`` that trained the run again from step 0 (run.json's ``resumes`` entries with
    ``from_step`` 0): every result before it was discarded, so the run is a second attempt."""
    lines, resumes = [], mapping(record).get("resumes")
    for entry in resumes if isinstance(resumes, list) else []:
        if isinstance(entry, dict) and entry.get("from_step") == 0:
            after = f" after it was {entry['after']}" if entry.get("after") in ("interrupted", "failed") else ""
            lines.append(f"resumed from step 0 at {str(entry.get('at', '?')).replace('T', ' ')}{after}: no "
                         "checkpoint was common to every policy, so it was trained again from its start")
    return lines


def cell_caveats(label: str, policy: str, runs: Sequence[tuple[Any, RunCaveats]]) -> list[str]:
    """The lines for one group and policy over its runs (``(seed, caveats)``): the mean peer-sample share when it
    is below :data:`FEW_PEER_SAMPLES`, and every restart, departure and warm-start overlap of the policy and every
    resume from step 0 of its runs, each line once with the seeds whose runs say it."""
    lines = []
    shares = [caveats.peer_share[policy] for _, caveats in runs if policy in caveats.peer_share]
    if shares and sum(shares) / len(shares) < FEW_PEER_SAMPLES:
        mean = sum(shares) / len(shares)
        tail = ": it trained as standalone GRPO" if max(shares) == 0 else ""
        lines.append(f"{label}, {policy}: used {mean:.0%} of its peers' samples (mean over {len(shares)} runs)"
                     f"{tail}")
    seeds: dict[tuple[str, str], list[Any]] = {}  # (who, line) -> the seeds whose run says it
    for seed, caveats in runs:
        for who, events in ((f"{label}, {policy}", caveats.events.get(policy, [])), (label, caveats.run_events)):
            for event in events:
                seeds.setdefault((who, event), []).append(seed)
    return lines + [f"{who}, {seeds_text(found)}: {event}" for (who, event), found in seeds.items()]


def seeds_text(seeds: list[Any]) -> str:
    """``seed 2`` or ``seeds 1, 2, 3``: the runs an identical line comes from, said once."""
    unique = list(dict.fromkeys(seeds))
    return f"seed {unique[0]}" if len(unique) == 1 else f"seeds {', '.join(map(str, unique))}"
