"""What a finished run's own record says that a reader of its numbers must be told: a sharing method that used
few or none of its peers' samples (a run that used none still ran its method and exchanged samples: it is not a
standalone GRPO run, and the line says by how much it differs from its baseline's run of the same seed), a policy
restarted mid-run (from its start, or from a checkpoint while its peers went on), a policy that left the pool, held-out
prompts its model was warm-started on, and a run that ``--resume`` trained again from step 0.

Read from ``RUN/summary.json`` (``peer_samples_used``, ``warnings``, ``restarted``, ``lost``, ``seen_prompts``;
written by :mod:`mutualrl.launch.rundir.summary`) and ``RUN/run.json`` (``resumes``; written by
:mod:`mutualrl.launch.rundir.record`), and shown as a mark beside the row and a line under every table and in the
figure caption. A record without these fields (an older run) has none of these caveats. Each line has a cause
(:func:`cause_of`), and every format marks a row with a footnote letter per cause (``report.notes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def cell_caveats(label: str, policy: str, runs: Sequence[tuple[Any, RunCaveats]],
                 differences: Mapping[Any, float] | None = None, baseline: str | None = None) -> list[str]:
    """The lines for one group and policy over its runs (``(seed, caveats)``): the mean peer-sample share when it
    is below :data:`FEW_PEER_SAMPLES` (:func:`peer_share_line`; ``differences``: each seed's Δ against
    ``baseline``'s run of the same seed), and every restart, departure and warm-start overlap of the policy and
    every resume from step 0 of its runs, each line once with the seeds whose runs say it."""
    lines = [line for line in [peer_share_line(label, policy, runs, differences or {}, baseline)] if line]
    seeds: dict[tuple[str, str], list[Any]] = {}  # (who, line) -> the seeds whose run says it
    for seed, caveats in runs:
        for who, events in ((f"{label}, {policy}", caveats.events.get(policy, [])), (label, caveats.run_events)):
            for event in events:
                seeds.setdefault((who, event), []).append(seed)
    return lines + [f"{who}, {seeds_text(found)}: {event}" for (who, event), found in seeds.items()]


def peer_share_line(label: str, policy: str, runs: Sequence[tuple[Any, RunCaveats]],
                    differences: Mapping[Any, float], baseline: str | None) -> str | None:
    """The line of a policy whose mean peer-sample share is below :data:`FEW_PEER_SAMPLES` (None: not below, or
    not logged): the share with the digits that keep it below the mark, how many runs used none, and what those
    runs were -- not standalone GRPO runs (the method still ran and exchanged samples), with their measured Δ."""
    shares = {seed: caveats.peer_share[policy] for seed, caveats in runs if policy in caveats.peer_share}
    if not shares:
        return None
    mean = sum(shares.values()) / len(shares)
    if mean >= FEW_PEER_SAMPLES:
        return None
    none = [seed for seed, share in shares.items() if share == 0]
    line = (f"{label}, {policy}: used {share_text(mean)} of its peers' samples (mean over {len(shares)} runs; "
            f"marked below {FEW_PEER_SAMPLES:.0%})")
    if not none:
        return line
    which = (f"none of its {len(shares)} runs used any" if len(none) == len(shares)
             else f"{len(none)} of {len(shares)} runs ({seeds_text(none)}) used none")
    line += (f"; {which}: in those no peer sample moved the gradient, but {label} still ran and exchanged samples "
             f"with its peers, so they are not standalone GRPO runs")
    measured = [differences[seed] for seed in none if seed in differences]
    if baseline is not None and measured:
        if all(d == 0 for d in measured):
            return line + f" (their reward@1 equals {baseline}'s run of the same seed)"
        return line + (f" (their reward@1 differs from {baseline}'s run of the same seed by "
                       f"{', '.join(f'{d:+.3f}' for d in measured)})")
    return line


def share_text(share: float, below: float = FEW_PEER_SAMPLES) -> str:
    """A share as a percentage with the digits it needs: 2 decimals under 1 %, 1 above, more while a share
    under ``below`` would print as ``below`` or above (9.996 % is "9.996%", never "10.0%") or a nonzero one as 0."""
    if share == 0:
        return "0%"
    digits = 1 if share >= 0.01 else 2
    for digits in range(digits, 9):
        text = f"{share * 100:.{digits}f}"
        if float(text) > 0 and (share >= below or float(text) < below * 100):
            return f"{text}%"
    return f"{share * 100:.3g}%"


#: The causes of a caveat line, each with the words that say it and a phrase only its lines hold, in the order
#: their footnote letters are given (a line that matches none is of the cause ``other``).
CAUSES = (
    ("few peer samples", "of its peers' samples", "a sharing method used few or none of its peers' samples"),
    ("restarted", "restarted from", "a policy was restarted mid-run"),
    ("left", "left the pool", "a policy left the pool mid-run"),
    ("warm start", "warm-started on", "scored on held-out prompts its model was warm-started on"),
    ("resumed from 0", "resumed from step 0", "a run was trained again from step 0 by --resume"),
    ("other prompts", "scored other held-out prompts", "a run scored other held-out prompts than its baseline's"),
    ("few prompts", "carry any variation in", "few held-out prompts carry any variation: the task-level interval "
                                              "may cover less than it says"),
    ("outlying seed", "lies far from the other seeds'", "a seed lies far from the others (a collapsed run?): the "
                                                         "task-level interval assumes one normal spread of seeds"),
    ("failed run", "where the other seeds' runs did not", "a run scored one value, or its step-0 scores, on every "
                                                          "held-out prompt: a failed run?"),
)


#: The causes the report's statistics find (the task-level interval's assumptions), lettered after the records'.
STATISTICAL = ("few prompts", "outlying seed", "failed run")


def cause_of(line: str) -> tuple[str, str]:
    """``(cause, words)`` of a caveat line (:data:`CAUSES`; ``("other", "other caveats")`` when none matches)."""
    return next(((cause, words) for cause, phrase, words in CAUSES if phrase in line), ("other", "other caveats"))


def seeds_text(seeds: list[Any]) -> str:
    """``seed 2`` or ``seeds 1, 2, 3``: the runs an identical line comes from, said once."""
    unique = list(dict.fromkeys(seeds))
    return f"seed {unique[0]}" if len(unique) == 1 else f"seeds {', '.join(map(str, unique))}"
