"""``mutualrl report``: the final held-out reward@1 of finished runs, grouped (by regime, or any setting), per policy
and task group, with the seed-level statistics of :mod:`.stats`, the crossed seeds × prompts ones of
:mod:`~mutualrl.evaluation.crossed`, the plans of :mod:`~mutualrl.evaluation.power` and the caveats of
:mod:`.caveats`.

A run's final value is its last validation: ``RUN/eval/<policy>/step-N.json`` with the largest N (reward@1 over
every held-out prompt), and its task groups from the validation row of the same step in ``metrics.jsonl``. Runs
are pooled in a group only when they differ in nothing but the seed (their place aside); anything else is refused,
naming the setting, unless ``--by`` names it too. Each group is compared with its natural baseline: the
``standalone`` group (or ``--baseline``'s regime) with the same values of the other ``--by`` settings.

Each row makes one claim, with one test behind its interval, p and power: about the *task* (new seeds and new
prompts: :mod:`~mutualrl.evaluation.crossed`, seeds and prompts crossed) where the runs' per-prompt scores allow it
-- the task group ``all`` -- and about *these prompts* (new seeds only: the paired t over seeds of :mod:`.stats`)
elsewhere, since a prompt record carries no task group. Holm's adjustment runs over two families apart: the headline
comparisons (``all``) and the task-group ones.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, UsageError
from mutualrl.evaluation.crossed import Crossed, crossed_stats, logit_interval, score_matrix
from mutualrl.evaluation.crossed_caveats import FEW_INFORMATIVE, failed_runs, outlying_seeds
from mutualrl.evaluation.power import ALPHA, seeds_for_crossed, seeds_for_t, upper_components, upper_sd
from mutualrl.evaluation.prompt_paired import difference_matrix
from mutualrl.evaluation.report.caveats import RunCaveats, cell_caveats, read_caveats
from mutualrl.evaluation.run_versions import version_notes
from mutualrl.evaluation.report.stats import CellStats, PairedStats, cell_stats, holm, paired_stats
from mutualrl.evaluation.results import ModelEvalResult, group_rewards, step_files
from mutualrl.evaluation.run_settings import (
    KEY_ALIASES,
    RunSettings,
    describe_difference,
    differing_keys,
    label_for,
    read_settings,
    resolve_key,
)
from mutualrl.run_folder import RunPaths, read_json_or, read_metric_rows

#: The task-group name of the value over every held-out prompt.
ALL = "all"
#: What a row's intervals and p are about.
TASK, PROMPTS = "task", "prompts"
#: Holm's two families: the headline comparisons (task group ``all``) and the task-group ones.
HEADLINE, TASK_GROUPS = "headline", "task groups"


@dataclass
class FinalValues:
    """A finished run's settings, its final held-out reward@1 (``policy -> task group -> value``), the same
validation's per-prompt scores (``policy -> prompt id -> score``) and its summary's caveats."""

    settings: RunSettings
    step: dict[str, int]
    values: dict[str, dict[str, float]]
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    caveats: RunCaveats = field(default_factory=lambda: RunCaveats({}, {}))
    start_scores: dict[str, dict[str, float]] = field(default_factory=dict)  # the step-0 validation's, where kept


@dataclass
class ReportRow:
    group: str
    policy: str
    task_group: str
    seeds: list[Any]
    values: list[float]
    stats: CellStats
    baseline: str | None = None  # the group it is compared with (None: it is a baseline, or has none)
    vs_baseline: PairedStats | None = None  # seed by seed: the claim about these prompts
    task_mean: Crossed | None = None  # the cell over seeds × prompts (task group "all": records carry no group)
    task_delta: Crossed | None = None  # Δ over seeds × prompts, against the baseline's runs of the same seeds
    task_note: str | None = None  # why an ``all`` row's task-level figures are missing
    caveats: list[str] = field(default_factory=list)
    p_holm: float | None = None  # Holm's adjusted p of the row's test, over the row's family
    seeds_needed: int | None = None  # for the report's --min-effect, with the row's test (None: not asked or n/a)
    seeds_needed_upper: int | None = None  # the same at the variance's 90 % upper confidence limits
    failed: set[Any] = field(default_factory=set)  # seeds named as failed runs (its own or its baseline's)

    @property
    def claim(self) -> str:
        """``task`` when the row's figures are over seeds × prompts (its interval and, against a baseline, its Δ),
        else ``prompts`` (over seeds, these prompts fixed)."""
        if self.task_mean is None:
            return PROMPTS
        return TASK if self.vs_baseline is None or self.task_delta is not None else PROMPTS

    @property
    def family(self) -> str:
        return HEADLINE if self.task_group == ALL else TASK_GROUPS

    @property
    def mean_ci(self) -> tuple[float, float] | None:
        """The 95 % interval of the row's claim for the cell's mean."""
        return self.task_mean.ci95 if self.claim == TASK and self.task_mean else self.stats.ci95

    @property
    def delta(self) -> tuple[float | None, tuple[float, float] | None, float | None]:
        """Δ, its 95 % interval and its p, from the row's one test (crossed for the task, paired t for these
        prompts); ``(None, None, None)`` without a baseline."""
        if self.vs_baseline is None:
            return None, None, None
        if self.claim == TASK and self.task_delta is not None:
            return self.task_delta.mean, self.task_delta.ci95, self.task_delta.p
        return self.vs_baseline.mean_difference, self.vs_baseline.ci95, self.vs_baseline.p


@dataclass
class Report:
    by: list[str]
    baseline: str | None  # the one baseline label every comparison shares; None when there are several or none
    groups: dict[str, list[FinalValues]]
    baselines: dict[str, str | None] = field(default_factory=dict)  # group -> the group it is compared with
    rows: list[ReportRow] = field(default_factory=list)
    between_groups: list[str] = field(default_factory=list)  # settings that differ between groups besides --by
    left_out: list[str] = field(default_factory=list)  # runs not finished, with why
    versions: list[str] = field(default_factory=list)  # runs on other library versions than the rest (run.json)
    context: dict[str, Any] = field(default_factory=dict)  # pool, task, steps: what every run shares

    min_effect: float | None = None  # the Δ the power column plans for (--min-effect)

    @property
    def compared(self) -> bool:
        return any(self.baselines.values())

    @property
    def comparisons(self) -> list[ReportRow]:
        """Every comparison the table reports (a row against its baseline on a seed or more): both of Holm's
        families, the untested ones included (no spread: no p), which keeps each family what the table shows."""
        return [row for row in self.rows if row.vs_baseline is not None
                and (row.vs_baseline.differences or (row.claim == TASK and row.task_delta is not None))]

    def family(self, name: str) -> list[ReportRow]:
        """The comparisons of one of Holm's families (:data:`HEADLINE` or :data:`TASK_GROUPS`)."""
        return [row for row in self.comparisons if row.family == name]

    @property
    def caveats(self) -> list[str]:
        return list(dict.fromkeys(line for row in self.rows for line in row.caveats))


def run_folders(paths: Sequence[Path]) -> list[Path]:
    """Run folders among ``paths``: a run folder itself, or a folder of runs (a sweep), in order. A hidden folder of
    a sweep (``.NAME.preflight-*``, a preflight's, which a SIGKILL may leave behind) is no run of it."""
    found: list[Path] = []
    for path in paths:
        if RunPaths(path).config.is_file():
            found.append(path)
        elif path.is_dir():
            inner = sorted(child for child in path.iterdir()
                           if not child.name.startswith(".") and RunPaths(child).config.is_file())
            if not inner:
                raise DataError(f"{path}: neither a run folder nor a folder of runs (no config.yaml in it or its "
                                "subfolders)")
            found.extend(inner)
        else:
            raise DataError(f"{path}: no such folder")
    return list(dict.fromkeys(found))


def unfinished_reason(paths: RunPaths) -> str | None:
    """Why a run is not reported (None: it finished)."""
    status = read_json_or(paths.run_json, {}).get("status")
    if status != "done":
        return f"{paths.root}: not finished (run.json status {status or 'missing'}); resume it, then report"
    return None


def apart_from_all(groups: dict[str, float]) -> dict[str, float]:
    """Task groups keyed apart from the overall value: a group the data names ``all`` becomes ``all (task group)``
    (suffixed again while the name is taken), so it never writes over the overall reward@1."""
    if ALL not in groups:
        return groups
    name = f"{ALL} (task group)"
    while name in groups:
        name = f"{name} (task group)"
    return {(name if group == ALL else group): value for group, value in groups.items()}


def final_values(run: Path) -> FinalValues:
    """Every policy's last validation: overall from its eval JSON, task groups from the same step's metrics row."""
    paths = RunPaths(run)
    settings = read_settings(run)
    rows = [row for _, row in read_metric_rows(paths.metrics)[0] if row.get("kind") == "eval"]
    values: dict[str, dict[str, float]] = {}
    scores: dict[str, dict[str, float]] = {}
    steps: dict[str, int] = {}
    start: dict[str, dict[str, float]] = {}
    for policy_dir in sorted(d for d in paths.eval_dir.iterdir() if d.is_dir()) if paths.eval_dir.is_dir() else []:
        files = step_files(policy_dir)
        if not files:
            continue
        step = max(files)
        result = ModelEvalResult.load(files[step])
        if result.reward_at_1 is None:
            continue
        row = next((r for r in rows if r.get("policy") == policy_dir.name and r.get("step") == step), {})
        values[policy_dir.name] = {ALL: result.reward_at_1, **apart_from_all(group_rewards(row, paths.metrics))}
        scores[policy_dir.name] = result.scores()
        steps[policy_dir.name] = step
        if 0 in files and step > 0:
            start.update({policy_dir.name: found for found in [step_zero_scores(files[0])] if found is not None})
    if not values:
        raise DataError(f"{run}: no validation results (eval/<policy>/step-N.json)")
    return FinalValues(settings, steps, values, scores, read_caveats(run), start)


def step_zero_scores(path: Path) -> dict[str, float] | None:
    """A policy's step-0 validation scores (``prompt id -> score``); None when the file cannot be read (only the
    check for a run that never moved from its step-0 scores is lost, and the report goes on)."""
    try:
        return ModelEvalResult.load(path).scores()
    except DataError:
        return None


def group_runs(runs: list[FinalValues], by: Sequence[str]) -> dict[str, list[FinalValues]]:
    """Runs by the label of their ``by`` settings; a group whose runs differ in more than the seed is refused."""
    keys = [resolve_key(key) for key in by]
    grouped: dict[tuple[str, ...], list[FinalValues]] = {}
    for run in runs:
        grouped.setdefault(tuple(repr(run.settings.get(key)) for key in keys), []).append(run)
    out: dict[str, list[FinalValues]] = {}
    for members in grouped.values():
        label = label_for(members[0].settings, keys)
        differ = differing_keys([m.settings for m in members], ignore=keys)
        if differ:
            shown = "; ".join(describe_difference(key, [m.settings for m in members]) for key in differ[:3])
            more = f"; ... {len(differ) - 3} more" if len(differ) > 3 else ""
            raise UsageError(f"group {label!r}: its runs differ in more than the seed ({shown}{more}); pooling them "
                             f"would average different experiments: add the setting to --by (--by "
                             f"{','.join([*by, differ[0]])}) or report them apart")
        check_seeds(label, members)
        out[label] = members
    return out


def check_seeds(label: str, members: list[FinalValues]) -> None:
    seen: dict[Any, Path] = {}
    for member in members:
        seed = member.settings.seed
        if seed in seen:
            raise UsageError(f"group {label!r}: two runs with seed {seed} and the same settings ({seen[seed]}, "
                             f"{member.settings.path}); report one of them")
        seen[seed] = member.settings.path


def check_keys(by: Sequence[str], runs: list[FinalValues], option: str = "--by") -> None:
    """Refuse a ``by`` setting that no run has, in one line naming the near matches (a misspelt key would
    otherwise group every run as "unset")."""
    known = {key for run in runs for key in run.settings.values}
    names = sorted(known | {alias for alias, key in KEY_ALIASES.items() if key in known})
    for key in by:
        if resolve_key(key) in known:
            continue
        near = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
        hint = (f"did you mean {' or '.join(near)}?" if near
                else "settings are dotted as in a run's config.yaml (grpo.learning_rate, regime.prp.denominator)")
        raise UsageError(f"{option} {key}: no run has this setting; {hint}")


def build_report(paths: Sequence[Path], by: Sequence[str] = ("regime",), baseline: str | None = None,
                 option: str = "--by", min_effect: float | None = None) -> Report:
    """Read, group and compute. ``baseline``: a group's label (every group against it) or a regime (each group
    against that regime's group with the same other ``by`` settings); default ``standalone`` where there is one.
    ``min_effect``: the Δ each comparison's seeds-for-power plan is for (None: no plan)."""
    finished, finished_paths, left_out = [], [], []
    for run in run_folders(paths):
        reason = unfinished_reason(RunPaths(run))
        if reason:
            left_out.append(reason)
        else:
            finished.append(final_values(run))
            finished_paths.append(run)
    if not finished:
        raise DataError("no finished run to report" + (f": {left_out[0]}" if left_out else ""))
    check_keys(by, finished, option)
    groups = group_runs(finished, by)
    baselines = natural_baselines(groups, by, baseline)
    firsts = [label for label in groups if label in baselines.values()]  # a baseline's rows first, as in a paper
    groups = {label: groups[label] for label in [*firsts, *(k for k in groups if k not in firsts)]}
    shared = set(baselines.values()) - {None}
    everyone = [run.settings for run in finished]
    report = Report(by=list(by), baseline=next(iter(shared)) if len(shared) == 1 else None, groups=groups,
                    baselines=baselines, left_out=left_out,
                    between_groups=[describe_difference(key, everyone) for key in
                                    differing_keys(everyone, ignore=[resolve_key(k) for k in by])],
                    context=shared_context(finished), versions=version_notes(finished_paths))
    report.rows = report_rows(groups, baselines)
    add_task_level(report)
    adjust_holm(report)
    report.min_effect = min_effect
    if min_effect is not None:
        plan_seeds(report, min_effect)
    return report


def natural_baselines(groups: dict[str, list[FinalValues]], by: Sequence[str],
                      baseline: str | None) -> dict[str, str | None]:
    """Each group's baseline: ``baseline`` itself when it is a group's label; else the group of regime
    ``baseline`` (default ``standalone``) whose other ``by`` settings are the group's own (None: none)."""
    if baseline is not None and baseline in groups:
        return {label: (baseline if label != baseline else None) for label in groups}
    regime = baseline or "standalone"
    if not any(members[0].settings.regime == regime for members in groups.values()):
        if baseline is not None:
            raise UsageError(f"--baseline {baseline}: neither a group nor a regime of one; the groups are: "
                             f"{', '.join(groups)}")
        return {label: None for label in groups}
    keys = [key for key in (resolve_key(k) for k in by) if key != "regime.name"]

    def same_setting(a: RunSettings, b: RunSettings) -> bool:
        return all(repr(a.values.get(key)) == repr(b.values.get(key)) for key in keys)

    return {label: next((other for other, theirs in groups.items() if theirs[0].settings.regime == regime
                         and members[0].settings.regime != regime
                         and same_setting(theirs[0].settings, members[0].settings)), None)
            for label, members in groups.items()}


def report_rows(groups: dict[str, list[FinalValues]], baselines: dict[str, str | None]) -> list[ReportRow]:
    """One row per group, policy and task group (``all`` first), in the groups' order."""
    rows = []
    for label, members in groups.items():
        base = baselines.get(label)
        for policy in dict.fromkeys(p for m in members for p in m.values):
            caveats = cell_caveats(label, policy, [(m.settings.seed, m.caveats) for m in members],
                                   all_differences(members, groups.get(base or "", []), policy), base)
            failed, lines = failed_lines(label, policy, members, groups.get(base or "", []), base)
            caveats += lines
            caveats += [line for line in [prompt_sets_caveat(label, policy, seed_scores(members, policy))] if line]
            same: set[Any] = set()  # the seeds whose run and baseline run scored the same prompts
            if base is not None:
                ours, theirs = seed_scores(members, policy), seed_scores(groups[base], policy)
                caveats += [line for line in [pairing_caveat(label, base, policy, ours, theirs)] if line]
                same = {seed for seed in ours if seed in theirs and ours[seed].keys() == theirs[seed].keys()}
            for task_group in dict.fromkeys(g for m in members for g in m.values.get(policy, {})):
                by_seed = seed_values(members, policy, task_group)
                row = ReportRow(label, policy, task_group, list(by_seed), list(by_seed.values()),
                                cell_stats(list(by_seed.values())), baseline=base, caveats=caveats, failed=failed)
                if base is not None:  # paired only where both runs scored the same prompts: never across sets
                    row.vs_baseline = paired_stats({seed: v for seed, v in by_seed.items() if seed in same},
                                                   seed_values(groups[base], policy, task_group))
                rows.append(row)
    return rows


def failed_lines(label: str, policy: str, members: list[FinalValues], base: list[FinalValues],
                 base_label: str | None) -> tuple[set[Any], list[str]]:
    """The seeds named and a line per run of the cell that failed by what it is (one value, or its step-0 scores, on
    every prompt: :func:`~mutualrl.evaluation.crossed_caveats.failed_runs`), and per baseline run of the same seed
    that did: whatever the distance of its mean from the others', at any number of prompts."""
    from mutualrl.evaluation.report.caveats import seeds_text

    lines, named = [], set()
    for runs, whose in ((members, ""), (base, f"against {base_label}: {base_label}'s run of ")):
        ours = seed_scores(runs, policy)
        start = {m.settings.seed: m.start_scores[policy] for m in runs if policy in m.start_scores}
        shown = {seed: what for seed, what in failed_runs(ours, start).items()
                 if not whose or seed in seed_scores(members, policy)}
        named |= set(shown)
        for what in dict.fromkeys(shown.values()):
            seeds = [seed for seed, found in shown.items() if found == what]
            lines.append(f"{label}, {policy}: {whose}{seeds_text(seeds)} {what}, where the other seeds' runs did "
                         f"not (a collapsed or failed run?): the task-level interval takes it as one draw of the "
                         f"seeds' spread; look at the run, and report it apart if it failed")
    return named, lines


def prompt_sets_caveat(label: str, policy: str, ours: dict[Any, dict[str, float]]) -> str | None:
    """A line when the cell's runs scored different held-out prompts (a seed that scored 45 of 50): the row's mean
    is over each run's own prompts, its task-level interval over the prompts every run scored."""
    sizes = {seed: len(scores) for seed, scores in ours.items()}
    if len({frozenset(scores) for scores in ours.values()}) <= 1:
        return None
    common = len(set.intersection(*(set(scores) for scores in ours.values())))
    return (f"{label}, {policy}: its seeds' runs scored other held-out prompts than each other ({min(sizes.values())}"
            f"-{max(sizes.values())} prompts, {common} in common): the mean is over each run's own prompts, the "
            f"task-level interval over the {common} every run scored")


def pairing_caveat(label: str, base: str, policy: str, ours: dict[Any, dict[str, float]],
                   theirs: dict[Any, dict[str, float]]) -> str | None:
    """A line when a run and the baseline's run of the same seed scored different held-out prompts (other
    ``validation.limit``, other data): their per-seed Δ then compares different prompts, and the prompt-paired
    interval rests on the prompts both scored only (none: no such interval). None when every pair scored the same."""
    from mutualrl.evaluation.report.caveats import seeds_text

    seeds = sorted(set(ours) & set(theirs), key=str)
    differ = [seed for seed in seeds if ours[seed].keys() != theirs[seed].keys()]
    if not differ:
        return None
    sizes = [(len(ours[s]), len(theirs[s]), len(ours[s].keys() & theirs[s].keys())) for s in differ]
    mine, baseline, common = (f"{min(v)}" if min(v) == max(v) else f"{min(v)}-{max(v)}" for v in zip(*sizes))
    tail = ("no prompt in common, so no interval over prompts" if all(c == 0 for *_, c in sizes)
            else "the interval over seeds × prompts uses the common ones only")
    return (f"{label} vs {base}, {policy}, {seeds_text(differ)}: scored other held-out prompts than {base}'s run of "
            f"the same seed ({mine} against {baseline}, {common} in common): left out of Δ over seeds (a paired test "
            f"over different prompts compares nothing); {tail}")


def add_task_level(report: Report) -> None:
    """The crossed seeds × prompts figures of every ``all`` row: the cell's mean and, against a baseline, Δ over
    the seeds both have and the prompts every one of those runs scored."""
    for row in report.rows:
        if row.task_group != ALL:
            continue
        ours = seed_scores(report.groups[row.group], row.policy)
        seeds, _, matrix = score_matrix(ours)
        row.task_mean = crossed_stats(matrix) if seeds and matrix.size else None
        if row.task_mean is not None and row.task_mean.ci95 and 0 <= matrix.min() and matrix.max() <= 1:
            low, high = row.task_mean.ci95  # a 0-1 reward's mean near a bound: the logit scale keeps it covered
            row.task_mean.ci95 = logit_interval(row.task_mean.mean, (high - low) / 2)
        found = [outlier_line(row, "reward@1", seeds, matrix)] if row.task_mean else []
        if row.task_mean is not None:
            found.append(few_prompts_line(row, row.task_mean, "reward@1"))
        if row.baseline is not None:
            seeds, _, matrix = difference_matrix(ours, seed_scores(report.groups[row.baseline], row.policy))
            row.task_delta = crossed_stats(matrix) if seeds and matrix.size else None
            found += [outlier_line(row, "Δ", seeds, matrix)] if row.task_delta else []
        if row.task_delta is not None:
            found.append(few_prompts_line(row, row.task_delta, f"Δ against {row.baseline}"))
        row.caveats = [*row.caveats, *(line for line in found if line)]  # this row's own: the list is shared
        row.task_note = task_note(row)


def few_prompts_line(row: ReportRow, claimed: Crossed, what: str) -> str | None:
    """The caveat of a task row whose mean (``what``: reward@1, near 0 or 1 where most prompts are never or always
    solved) or Δ rests on fewer than :data:`FEW_INFORMATIVE` prompts that carry variation."""
    if claimed.informative >= FEW_INFORMATIVE:
        return None
    return (f"{row.group}, {row.policy}: only {claimed.informative} of {claimed.prompts} held-out prompts carry any "
            f"variation in {what} (the others score alike in every seed); under {FEW_INFORMATIVE} such prompts the "
            f"task-level interval covered the task less often than it says in simulation (Δ: 0.88-0.89 at 10 seeds "
            f"× 50 prompts with about 4 such prompts, benchmarks/results/report-grid.md; a mean near 0 or 1 with "
            f"under 20 such prompts: 0.3-0.9, tests/test_report_boundary.py): read the row as a claim about these "
            f"prompts")


def outlier_line(row: ReportRow, what: str, seeds: list[Any], matrix: Any) -> str | None:
    """The caveat naming the seeds whose mean over the prompts lies far from the others' (a collapsed run)."""
    if len(seeds) < 3 or not matrix.size:
        return None
    flagged = outlying_seeds(matrix) & [seed not in row.failed for seed in seeds]  # a failed run is named already
    if not flagged.any():
        return None
    means = matrix.mean(axis=1)
    odd = ", ".join(f"{seed} ({mean:+.3f})" for seed, mean, flag in zip(seeds, means, flagged, strict=True) if flag)
    rest = ", ".join(f"{mean:+.3f}" for mean, flag in zip(means, flagged, strict=True) if not flag)
    return (f"{row.group}, {row.policy}: the {what} of seed{'s' * (int(flagged.sum()) > 1)} {odd} over the held-out "
            f"prompts lies far from the other seeds' ({rest}): a collapsed or failed run? The task-level interval "
            f"assumes seeds drawn from one normal spread; look at the run, and report it apart if it failed")


def task_note(row: ReportRow) -> str | None:
    """Why an ``all`` row makes no claim about the task, or has no interval for Δ (None: nothing to say)."""
    if row.task_mean is None or (row.vs_baseline is not None and row.task_delta is None):
        return (f"{row.group}, {row.policy}: one seed, or no held-out prompt every run scored: no claim about the "
                "task (these prompts only)")
    if row.task_delta is not None and row.task_delta.ci95 is None:
        return (f"{row.group}, {row.policy}: every paired seed and prompt scored the same as {row.baseline}'s: no "
                "interval or p for Δ (no spread to measure)")
    return None


def adjust_holm(report: Report) -> None:
    """Holm's adjusted p of each row's own test, over each of the two families apart: the headline comparisons
    (task group ``all``) and the task-group ones. A comparison without a p (no spread) counts as p = 1: it stays in
    its family's m, and gets no adjusted p."""
    for name in (HEADLINE, TASK_GROUPS):
        compared = report.family(name)
        raw = [row.delta[2] for row in compared]
        for row, p, adjusted in zip(compared, raw, holm([1.0 if p is None else p for p in raw]), strict=True):
            row.p_holm = None if p is None else adjusted


def plan_seeds(report: Report, effect: float) -> None:
    """Each comparison's seeds for 80 % power to detect ``±effect`` with its own test, at Holm's first threshold
    α/m of its family (:mod:`~mutualrl.evaluation.power`), from the observed variance -- the crossed components over
    the row's prompts for a task row, the SD of the per-seed differences for a prompts row -- and from its 80 %
    upper confidence limits (the runs are the plan's pilot, and a few seeds leave the variance uncertain)."""
    for row in report.rows:
        if row.vs_baseline is None:
            continue
        alpha = ALPHA / max(1, len(report.family(row.family)))
        if row.claim == TASK and row.task_delta is not None:
            delta = row.task_delta
            row.seeds_needed = seeds_for_crossed(effect, delta.components, delta.prompts, alpha)
            upper = upper_components(delta.components, delta.seeds, delta.prompts)
            row.seeds_needed_upper = seeds_for_crossed(effect, upper, delta.prompts, alpha)
        else:
            row.seeds_needed = seeds_for_t(effect, row.vs_baseline.sd, alpha)
            sd_upper = upper_sd(row.vs_baseline.sd, len(row.vs_baseline.differences))
            row.seeds_needed_upper = seeds_for_t(effect, sd_upper, alpha)


def all_differences(members: list[FinalValues], base: list[FinalValues], policy: str) -> dict[Any, float]:
    """Each seed's overall reward@1 minus its baseline run's (the seeds both have; none without a baseline)."""
    ours, theirs = seed_values(members, policy, ALL), seed_values(base, policy, ALL)
    return {seed: ours[seed] - theirs[seed] for seed in ours if seed in theirs}


def seed_values(members: list[FinalValues], policy: str, task_group: str) -> dict[Any, float]:
    return {m.settings.seed: m.values[policy][task_group] for m in members
            if task_group in m.values.get(policy, {})}


def seed_scores(members: list[FinalValues], policy: str) -> dict[Any, dict[str, float]]:
    """``seed -> prompt id -> score`` of one policy's last validation in each run."""
    return {m.settings.seed: m.scores[policy] for m in members if policy in m.scores}


def shared_context(runs: list[FinalValues]) -> dict[str, Any]:
    """Pool, task, final validation step and held-out prompt limit, each when every run has the same (else
    "mixed")."""
    def common(values: list[Any]) -> Any:
        return values[0] if len(set(map(repr, values))) == 1 else "mixed"

    return {"pool": common([r.settings.get("pool.name") for r in runs]),
            "task": common([task_label(r.settings) for r in runs]),
            "source": common([r.settings.get("task.source") for r in runs]),
            "steps": common([max(r.step.values()) for r in runs]),
            "limit": common([validation_limit(r.settings) for r in runs])}


def validation_limit(settings: RunSettings) -> Any:
    """The held-out prompts a run validated on at most: ``validation.limit``, else ``task.eval_limit`` (None: all)."""
    limit = settings.get("validation.limit")
    return limit if limit is not None else settings.get("task.eval_limit")


#: Folder names that say a folder holds data, not which: a user's task is then named by the folder above (when the
#: run recorded it) and its reward functions.
GENERIC_FOLDERS = ("data", "dataset", "datasets", "splits", "jsonl")


def task_label(settings: RunSettings) -> str:
    """The task's name; a user's dataset (``dataset`` alone names no task) by its folder, the folder above one with
    a generic name when known (``/home/me/sums/data``: ``sums``), and the functions that score it
    (``sums (reward exact)``)."""
    name, source = settings.get("task.name"), settings.get("task.source")
    if name != "dataset" or not source:
        return str(name)
    folder = Path(str(source))
    folder = folder.parent if folder.suffix else folder  # a file: its folder names the task
    if folder.name.lower() in GENERIC_FOLDERS and folder.parent.name:
        folder = folder.parent
    funcs = settings.get("task.reward_funcs")
    scored = [str(f).rsplit(".", 1)[-1] for f in funcs] if isinstance(funcs, (list, tuple)) else []
    title = folder.name or str(source)
    return f"{title} (reward {', '.join(scored)})" if scored else title
