"""``mutualrl sweep --plan-seeds``: how many seeds × prompts a sweep needs, before it runs.

From a pilot sweep (the variance components of each headline comparison's Δ, :mod:`.crossed`) or from stated
components (``seed=0.0004,prompt=0.002,interaction=0.05``), the fewest seeds with which ``mutualrl report``'s own
test of the task claim (crossed seeds × prompts, at Holm's first threshold α/m of the headline family) detects a
stated minimal effect with 80 % power, for several numbers of held-out prompts (:mod:`.power`):
"to detect ±0.05 with 80% power (two-sided α = 0.025): 12 seeds × 200 prompts, or 8 × 500"; from a pilot, a range
whose upper end plans with the pilot components' upper confidence limits ("12-70 seeds × 200 prompts"), and the
expected power at a few seed counts averaged over the pilot's uncertainty, with the pilot's caveats under it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mutualrl.errors import UsageError
from mutualrl.evaluation.crossed import Components
from mutualrl.evaluation.power import ALPHA, pilot_words, plan_options, plan_words, power_table

#: Prompt counts planned for when none are given and no pilot says how many it scored.
DEFAULT_PROMPTS = (100, 200, 500)
#: The names a stated component may go by.
NAMES = {"seed": "seed", "prompt": "prompt", "interaction": "interaction", "seed_x_prompt": "interaction",
         "seed×prompt": "interaction"}


def stated_components(text: str) -> Components:
    """``seed=V,prompt=V,interaction=V`` (variances of Δ's seed, prompt and seed × prompt parts; an omitted one
    is 0) as :class:`Components`; anything else refused in one line."""
    values = {"seed": 0.0, "prompt": 0.0, "interaction": 0.0}
    for part in (piece.strip() for piece in text.split(",") if piece.strip()):
        name, sep, value = part.partition("=")
        key = NAMES.get(name.strip())
        try:
            number = float(value) if sep and key else -1.0
        except ValueError:
            number = -1.0
        if number < 0 or not math.isfinite(number):
            raise UsageError(f"--plan-seeds {text!r}: expected a pilot sweep's folder or variances "
                             "seed=V,prompt=V,interaction=V (each ≥ 0), e.g. "
                             "seed=0.0004,prompt=0.002,interaction=0.05")
        values[key] = number  # type: ignore[index]
    if not any(values.values()):
        raise UsageError(f"--plan-seeds {text!r}: every variance is 0; nothing to plan from")
    return Components(**values)


def check_effect(effect: float) -> None:
    """Refuse a minimal effect that is not a finite number above 0, in one line."""
    if not math.isfinite(effect) or effect <= 0:
        raise UsageError(f"--min-effect {effect}: give the smallest Δ that would matter, a finite number above 0 "
                         "(e.g. 0.05)")


def plan_lines(source: str, effect: float, prompts: Sequence[int] | None = None,
               comparisons: int | None = None) -> list[str]:
    """The plan from a pilot (a folder of runs, as ``mutualrl report`` reads it) or stated components: one line per
    headline comparison of the pilot (or one for the stated components), then what the plan assumes."""
    check_effect(effect)
    if "=" in source and not Path(source).exists():
        m = comparisons or 1
        counts = list(prompts or DEFAULT_PROMPTS)
        options = plan_options(effect, stated_components(source), counts, ALPHA / m)
        return [f"stated variance components ({source}), {m} headline comparison{'s' * (m != 1)}: "
                f"{plan_words(effect, options, ALPHA / m)}", assumptions(None)]
    return pilot_lines(Path(source), effect, prompts, comparisons)


def pilot_lines(pilot: Path, effect: float, prompts: Sequence[int] | None, comparisons: int | None) -> list[str]:
    """One line per comparison of the pilot's ``all`` rows over seeds × prompts, then the assumptions."""
    from mutualrl.evaluation.report.build import ALL, HEADLINE, build_report
    from mutualrl.evaluation.report.notes import components_words

    report = build_report([pilot])
    rows = [row for row in report.rows if row.task_group == ALL and row.task_delta is not None]
    if not rows:
        raise UsageError(f"--plan-seeds {pilot}: no comparison over seeds × prompts in it (a pilot needs the "
                         "baseline and a method, 2 seeds or more each, on the same held-out prompts); or state "
                         "the variances: --plan-seeds seed=V,prompt=V,interaction=V")
    m = comparisons or len(report.family(HEADLINE)) or 1
    lines = []
    for row in rows:
        delta = row.task_delta
        counts = list(prompts or dict.fromkeys([delta.prompts, 2 * delta.prompts, 5 * delta.prompts]))
        options = plan_options(effect, delta.components, counts, ALPHA / m, pilot=(delta.seeds, delta.prompts))
        lines.append(f"{row.group} vs {row.baseline}, {row.policy} (pilot: {delta.seeds} seeds × {delta.prompts} "
                     f"prompts; {components_words(delta.components)}; {m} headline comparison{'s' * (m != 1)}): "
                     f"{plan_words(effect, options, ALPHA / m)}")
        lines.append(f"  {power_table(effect, delta.components, (delta.seeds, delta.prompts), counts[0], ALPHA / m)}")
    return [*lines, assumptions(max(row.task_delta.seeds for row in rows)), *pilot_caveats(report, rows)]


def pilot_caveats(report: Any, rows: list[Any]) -> list[str]:
    """The pilot's own caveats, under its plan: every caveat of its rows (a failed run, an outlying seed, few
    prompts carrying variation, ...; the variance a plan starts from is theirs), and a line per comparison whose
    seeds all scored alike (its seed component is unmeasured, and the plan takes it as 0)."""
    lines = [f"pilot caveat: {line}" for line in report.caveats]
    for row in rows:
        comps = row.task_delta.components
        if comps.seed + comps.interaction <= 1e-12 * max(1.0, comps.prompt):  # float dust of equal rows
            lines.append(f"pilot caveat: {row.group} vs {row.baseline}, {row.policy}: every seed of the pilot scored "
                         f"the same Δ on every prompt, so its seed component is unmeasured (taken as 0, the plan has "
                         f"no range); state one: --plan-seeds seed=V,prompt=V,interaction=V")
    return lines


def assumptions(pilot_seeds: int | None) -> str:
    """What every plan assumes, said under it."""
    tail = (f"; {pilot_words(pilot_seeds)}" if pilot_seeds is not None
            else ", taking the stated variance components as true")
    return (f"the plan is for the report's test of the task claim (seeds and prompts crossed, two-sided, at Holm's "
            f"first threshold {ALPHA}/m of the headline family){tail}; the prompts must exist: a task's held-out "
            "split bounds them")
