"""The lines under every one of ``mutualrl report``'s tables (and, shortened, in the figure's caption): what each
number is, how many comparisons the table makes, the power of each headline comparison, and every caveat a reader
of a number must see (small n, a method that used few peer samples, a restarted policy, runs on other versions)."""

from __future__ import annotations

from mutualrl.evaluation.prompt_paired import REPS as PROMPT_REPS
from mutualrl.evaluation.report import ALL, Report
from mutualrl.evaluation.report_stats import ALPHA, FEW_RUNS, INTERVAL_KIND, MAX_POWER_SEEDS, MIN_RUNS_FOR_IQM, POWER

CAVEAT_MARK = "†"


def notes(report: Report) -> list[str]:
    """The lines under every format's table, in reading order."""
    context = report.context
    lines = [f"final held-out reward@1 (greedy) of each run's last validation; pool {context['pool']}, task "
             f"{context['task']}, step {context['steps']}; n: runs (seeds) per cell",
             f"SD: sample standard deviation over runs (n − 1); 95% CI: {INTERVAL_KIND}, none at n = 1; IQM "
             f"(interquartile mean, rliable) from n = {MIN_RUNS_FOR_IQM}"]
    if report.compared:
        lines += comparison_notes(report)
    lines += cell_notes(report)
    lines += [f"{CAVEAT_MARK} {line}" for line in report.caveats]
    lines += [f"{CAVEAT_MARK} {line}" for line in report.versions]
    if report.between_groups:
        lines.append("the groups also differ in: " + "; ".join(report.between_groups))
    lines += [f"left out: {reason}" for reason in report.left_out]
    return lines


def comparison_notes(report: Report) -> list[str]:
    """What Δ, its interval, p, P(improve), the prompt-paired interval and the power column are."""
    base = report.baseline or "its baseline"
    lines = [f"Δ: mean over seeds of (run − {base}'s run of the same seed); 95% CI of Δ: paired t (df n − 1); "
             f"p: exact two-sided sign-flip (permutation) p of Δ over the 2ⁿ sign patterns of the per-seed "
             f"differences; P(improve): share of the same seed pairs where the run beats {base}'s (a tie half)",
             holm_note(report),
             f"95% CI of Δ, seeds × prompts: two-level bootstrap of the mean per-prompt difference (seeds "
             f"resampled, then the held-out prompts within each seed; {PROMPT_REPS} resamples), task group "
             f"{ALL} only: prompts carry no task group",
             f"seeds for {POWER:.0%} power: seeds a paired t test (two-sided α = {ALPHA}) needs to detect the "
             f"observed Δ if the SD of the per-seed differences is the observed one; n/a: no spread or Δ = 0"]
    if report.baseline is None:
        pairs = [f"{group} vs {base_label}" for group, base_label in report.baselines.items() if base_label]
        lines.append("each group against the baseline of its own settings: " + "; ".join(pairs))
    lines += power_lines(report)
    return lines


def holm_note(report: Report) -> str:
    count = len(report.comparisons)
    return (f"p (Holm): p adjusted by Holm's step-down method over the {count} comparison{'s' * (count != 1)} in "
            f"this table (every group, policy and task group against its baseline)")


def power_lines(report: Report) -> list[str]:
    """One line per headline comparison (task group ``all``): Δ, the spread it was measured with, the seeds."""
    lines = []
    for row in report.rows:
        paired = row.vs_baseline
        if paired is None or row.task_group != ALL or paired.mean_difference is None:
            continue
        n = len(paired.differences)
        seeds = paired.seeds_for_power
        if seeds is None:
            need = "n/a (no spread between the seeds' differences, or Δ = 0)" if n > 1 else "n/a (one seed)"
        else:
            need = f"more than {MAX_POWER_SEEDS} seeds" if seeds > MAX_POWER_SEEDS else f"{seeds} seeds"
        lines.append(f"power: {row.group} vs {row.baseline}, {row.policy}: Δ {paired.mean_difference:+.3f} over "
                     f"{n} seed{'s' * (n != 1)} → {need} for {POWER:.0%} power")
    return lines


def cell_notes(report: Report) -> list[str]:
    """Every distinct caveat line of the cells (small n, SD 0), once."""
    return list(dict.fromkeys(line for row in report.rows if row.stats.note for line in row.stats.note.splitlines()))


def caption_caveats(report: Report) -> list[str]:
    """The caveats a figure's caption carries: few runs behind a band, and every † line."""
    few = sorted({len(members) for members in report.groups.values() if len(members) < FEW_RUNS})
    small = ([f"n = {', '.join(map(str, few))}: a band rests on an SD from so few runs; it is wide for that "
              "reason, and a band of width 0 (every run the same) is no certainty"] if few else [])
    return [*small, *report.caveats, *report.versions]
