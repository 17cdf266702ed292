"""The lines under every one of ``mutualrl report``'s tables (and, shortened, in the figure's caption): what each
number is and which quantity each interval covers (the task, or these prompts), the one test behind each row's
interval, p and power, Holm's two families, what a p can reach at the table's n, the plan for ``--min-effect``,
and every caveat a reader of a number must see, marked per cause with a footnote letter (small n, a method that
used few peer samples, a restarted policy, runs on other versions)."""

from __future__ import annotations

from mutualrl.evaluation.crossed import Components
from mutualrl.evaluation.power import (
    ALPHA,
    PILOT_CONFIDENCE,
    POWER,
    pilot_words,
    plan_options,
    plan_words,
    power_table,
)
from mutualrl.evaluation.report.build import ALL, HEADLINE, PROMPTS, TASK, TASK_GROUPS, Report, ReportRow
from mutualrl.evaluation.report.caveats import STATISTICAL, cause_of
from mutualrl.evaluation.report.stats import FEW_RUNS, INTERVAL_KIND, MIN_RUNS_FOR_IQM, t_quantile

CAVEAT_MARK = "†"
#: What every task-level interval assumes, said under every table.
CONDITION = ("what the task-level interval assumes: it covers the task for a method whose runs look like the runs "
             "seen (each seed's run a draw from one spread; a mean of 0-1 scores on the logit scale, which near 0 or 1 "
             "covered 0.90 at worst in simulation where seeds differ widely); a "
             "failure that no seed of the sweep showed is not covered and no caveat can name it (a run that "
             "collapses in 1 seed of 10 is missed by 3 seeds 73 % of the time, and such sweeps covered the task's Δ "
             "in 0.00-0.63 of cases in simulation); a failed run that shows is named (†)")
#: The cause of a line about runs on other library versions (``run_versions``), lettered like the others.
VERSIONS = ("versions", "ran on other library versions, or not on the tested set")


def shown(text: str) -> str:
    """``text`` on one line whatever it holds: a character that is not printable (a newline, a carriage return, a
    control or line-separator character in a folder name) is written as its escape (``\\n``, ``\\x1b``,
    ``\\u2028``), so no name forges a CSV row, a markdown line or a LaTeX caption's text."""
    return text if text.isprintable() else "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def notes(report: Report) -> list[str]:
    """The lines under every format's table, in reading order, each on one line (:func:`shown`)."""
    return [shown(line) for line in _notes(report)]


def _notes(report: Report) -> list[str]:
    context = report.context
    lines = [f"final held-out reward@1 (greedy) of each run's last validation; pool {context['pool']}, task "
             f"{context['task']}, step {context['steps']}; n: runs (seeds) per cell",
             claim_note(report),
             f"SD: sample standard deviation over runs (n − 1); 95% CI: on a task row over seeds × prompts, crossed "
             f"(the seed part and the prompt part of the variance each with its own t quantile: Owen 2007, Banerjee "
             f"1960; from 3 seeds, where the prompt part leads, the narrower of it and the two-way variance-analysis "
             f"form with Satterthwaite's df, a choice made from the data and validated by simulation; a mean of 0-1 "
             f"scores on the logit scale), covering the task; on a prompts row the {INTERVAL_KIND}, covering these "
             f"prompts; none at n = 1 or when every run scored the same (SD 0); intervals are not clipped to the "
             f"reward's range; IQM (interquartile mean, rliable) from n = {MIN_RUNS_FOR_IQM}",
             *unclipped_notes(report), CONDITION]
    if report.compared:
        lines += comparison_notes(report)
    lines += cell_notes(report)
    lines += caveat_notes(report)
    if report.between_groups:
        lines.append("the groups also differ in: " + "; ".join(report.between_groups))
    lines += [f"left out: {reason}" for reason in report.left_out]
    return lines


def unclipped_notes(report: Report) -> list[str]:
    """A line when a printed interval reaches beyond what the scores allow (a mean outside the range every run's
    per-prompt scores span, a Δ beyond ± that range's width): the interval is not clipped, and says so."""
    scores = [score for members in report.groups.values() for run in members for by_prompt in run.scores.values()
              for score in by_prompt.values()]
    if not scores:
        return []
    low, high = min(scores), max(scores)
    beyond = [f"{row.group}, {row.policy}, {row.task_group}: mean [{ci[0]:.3f}, {ci[1]:.3f}]"
              for row in report.rows for ci in [row.mean_ci] if ci and (ci[0] < low or ci[1] > high)]
    beyond += [f"{row.group}, {row.policy}, {row.task_group}: Δ [{ci[0]:.3f}, {ci[1]:.3f}]"
               for row in report.rows for ci in [row.delta[1]] if ci and max(-ci[0], ci[1]) > high - low]
    if not beyond:
        return []
    return [f"unclipped: these intervals reach beyond the scores' range [{low:g}, {high:g}] (Δ: ±{high - low:g}); "
            f"they are not clipped, so the part beyond it only says how wide the uncertainty is: "
            + "; ".join(beyond)]


def claim_note(report: Report) -> str:
    prompts = sorted({row.task_mean.prompts for row in report.rows if row.claim == TASK and row.task_mean})
    over = (f", over the {' or '.join(map(str, prompts))} held-out prompts every run of the cell scored"
            if prompts else "")
    limit = report.context.get("limit")
    first = (f"; the held-out prompts are the split's first {limit} (validation.limit), not a random draw: the {TASK} "
             f"claim holds as far as they are like one" if limit not in (None, "mixed") else
             "; some runs validated on the split's first N prompts only (validation.limit), not a random draw"
             if limit == "mixed" else "")
    return (f"claim: what a row's intervals, p and power are about -- {TASK}: the expected reward@1 over new seeds "
            f"and new prompts of the task (task group {ALL}{over}); {PROMPTS}: the expected reward@1 of these "
            f"held-out prompts over new seeds (the task groups: a prompt's record carries no task group){first}")


def comparison_notes(report: Report) -> list[str]:
    """What Δ, its interval, p, Holm's families, P(improve) and the power column are."""
    base = report.baseline or "its baseline"
    lines = [f"Δ: mean of (run − {base}'s run of the same seed), over the prompts too on a task row; one test per "
             f"row gives its 95% CI of Δ, p and power -- on a task row the crossed seeds × prompts test (p: the "
             f"smallest level whose crossed interval excludes 0), on a prompts row the paired t test over seeds "
             f"(df n − 1) -- so p < 0.05 exactly when the 95% CI of Δ excludes 0",
             *holm_notes(report), *reach_notes(report),
             f"P(improve): share of the same seed pairs where the run beats {base}'s (a tie half); descriptive, "
             f"no test"]
    if report.baseline is None:
        pairs = [f"{group} vs {base_label}" for group, base_label in report.baselines.items() if base_label]
        lines.append("each group against the baseline of its own settings: " + "; ".join(pairs))
    return lines + power_notes(report)


def holm_notes(report: Report) -> list[str]:
    """Each of Holm's families, named: the headline comparisons and the task-group ones, adjusted apart."""
    lines = []
    for name, what in ((HEADLINE, f"task group {ALL}"), (TASK_GROUPS, "the other task groups")):
        rows = report.family(name)
        if rows:
            members = "; ".join(f"{row.group} vs {row.baseline}, {row.policy}"
                                + (f", {row.task_group}" if name == TASK_GROUPS else "") for row in rows)
            untested = sum(row.delta[2] is None for row in rows)
            without = f"; untested, counted as p = 1: {untested} (no spread)" if untested else ""
            lines.append(f"p (Holm), {name} family ({what}): Holm's step-down adjustment over its {len(rows)} "
                         f"comparison{'s' * (len(rows) != 1)} ({members}{without}), apart from the other family")
    return lines


def reach_notes(report: Report) -> list[str]:
    """What a p (Holm) below 0.05 takes at the table's numbers of seeds, per family: a t-based p has no floor, but
    Holm's first step over m comparisons asks for a raw p below 0.05/m."""
    needs = []
    for name in (HEADLINE, TASK_GROUPS):
        rows, m = report.family(name), len(report.family(name))
        for n in sorted({len(row.vs_baseline.differences) for row in rows if row.vs_baseline} - {0, 1}):
            needs.append(f"{t_quantile(1 - ALPHA / (2 * m), n - 1):.2f} with {n} seeds in the {name} family "
                         f"(m = {m})")
    if not needs:
        return []
    return [f"smallest reachable p: none, a t-based p has no floor (a sign-flip p over n seeds could not go below "
            f"2/2ⁿ); but a p (Holm) below {ALPHA} needs a raw p below {ALPHA}/m, so |Δ| above at least "
            f"t(1 − {ALPHA}/(2m), n − 1) times its seed-level standard error: {'; '.join(needs)}"]


def power_notes(report: Report) -> list[str]:
    """What the power column is (planning for ``--min-effect``), and per headline comparison its plan."""
    effect = report.min_effect
    if effect is None:
        return ["power: --min-effect D gives each comparison the seeds its own test needs for "
                f"{POWER:.0%} power to detect ±D (no power is computed from the observed Δ: that post-hoc power "
                "only restates the p)"]
    lines = [f"seeds for {POWER:.0%} power, ±{effect:g}: planning for the stated effect, not the observed Δ: the "
             f"fewest seeds with which the row's own test detects ±{effect:g} {POWER:.0%} of the time at Holm's "
             f"first threshold {ALPHA}/m of its family (enough for Holm whatever the other comparisons show), taking "
             f"the observed variance as the truth (task row: the seed, prompt and seed × prompt components at the "
             f"same prompts; prompts row: the SD of the per-seed differences); n/a: no variance observed; > 1000: "
             f"more than the search goes (on a task row perhaps never at these prompts); "
             f"{pilot_words(max(len(row.seeds) for row in report.rows))} (prompts row: the SD's "
             f"{PILOT_CONFIDENCE:.0%} upper limit)"]
    for row in report.family(HEADLINE):
        if row.claim == TASK and row.task_delta is not None:
            lines.append(plan_line(row, effect, ALPHA / len(report.family(HEADLINE))))
    return lines


def plan_line(row: ReportRow, effect: float, alpha: float) -> str:
    """"plan: sgt vs standalone, tiny-bpe: to detect ±0.05 ...: 12 seeds × 60 prompts, or 8 × 120 ..."."""
    assert row.task_delta is not None
    prompts = row.task_delta.prompts
    options = plan_options(effect, row.task_delta.components, [prompts, 2 * prompts, 5 * prompts], alpha,
                           pilot=(row.task_delta.seeds, prompts))
    table = power_table(effect, row.task_delta.components, (row.task_delta.seeds, prompts), prompts, alpha)
    return (f"plan: {row.group} vs {row.baseline}, {row.policy}: {plan_words(effect, options, alpha)} "
            f"({components_words(row.task_delta.components)}); {table}")


def components_words(comps: Components) -> str:
    return (f"variance components of Δ: seed {comps.seed:.3g}, prompt {comps.prompt:.3g}, seed × prompt "
            f"{comps.interaction:.3g}")


def cell_notes(report: Report) -> list[str]:
    """Every distinct caveat line of the cells and comparisons (small n, SD 0, no claim about the task), once."""
    found = [row.stats.note for row in report.rows] + [row.vs_baseline.note for row in report.rows if row.vs_baseline]
    found += [row.task_note for row in report.rows]
    return list(dict.fromkeys(line for note in found if note for line in note.splitlines()))


def caveat_causes(report: Report) -> dict[str, tuple[str, str]]:
    """``cause -> (letter, words)`` for every cause of a caveat in the table, lettered a, b, c... in the order of
    the rows: what the runs' records say first, then runs on other versions, then what the statistics found
    (:data:`~.caveats.STATISTICAL`)."""
    causes = [cause_of(line) for row in report.rows for line in row.caveats]
    causes += [VERSIONS] * bool(report.versions)
    ordered = sorted(dict.fromkeys(causes), key=lambda cause: cause[0] in STATISTICAL)
    return {cause: (chr(ord("a") + i), words) for i, (cause, words) in enumerate(ordered)}


def row_letters(row: ReportRow, report: Report) -> str:
    """The footnote letters of a row's causes, ``a,c`` (empty: none)."""
    causes = caveat_causes(report)
    mine = [cause_of(line)[0] for line in row.caveats]
    names = {member.settings.path.name for member in report.groups.get(row.group, [])}
    if any(line.split(":", 1)[0] in names for line in report.versions):
        mine.append(VERSIONS[0])
    return ",".join(sorted({causes[cause][0] for cause in mine}))


def caveat_notes(report: Report) -> list[str]:
    """Per cause its letter and words (with "every row" when it marks every row), then each of its lines."""
    causes, lines = caveat_causes(report), []
    marked = [row_letters(row, report) for row in report.rows]
    for cause, (letter, words) in causes.items():
        every = " (every row)" if all(letter in found.split(",") for found in marked) else ""
        lines.append(f"{CAVEAT_MARK}{letter}: {words}{every}")
        found = [line for row in report.rows for line in row.caveats if cause_of(line)[0] == cause]
        found += report.versions if cause == VERSIONS[0] else []
        lines += [f"{CAVEAT_MARK}{letter} {line}" for line in dict.fromkeys(found)]
    return lines


def caption_caveats(report: Report) -> list[str]:
    """The caveats a figure's caption carries: few runs behind a band, and every † line."""
    few = sorted({len(members) for members in report.groups.values() if len(members) < FEW_RUNS})
    small = ([f"n = {', '.join(map(str, few))}: a band rests on an SD from so few runs; it is wide for that "
              "reason, and a band of width 0 (every run the same) is no certainty"] if few else [])
    return [*small, *report.caveats, *report.versions]
