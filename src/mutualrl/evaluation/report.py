"""``mutualrl report``: the final held-out reward@1 of finished runs, grouped (by regime, or any setting), per
policy and task group, with the seed-level statistics of :mod:`.report_stats`, the prompt-paired Δ of
:mod:`.prompt_paired` and the caveats of :mod:`.report_caveats`.

A run's final value is its last validation: ``RUN/eval/<policy>/step-N.json`` with the largest N (reward@1 over
every held-out prompt), and its task groups from the validation row of the same step in ``metrics.jsonl``. Runs
are pooled in a group only when they differ in nothing but the seed (their place aside); anything else is refused,
naming the setting, unless ``--by`` names it too. Each group is compared with its natural baseline: the
``standalone`` group (or ``--baseline``'s regime) with the same values of the other ``--by`` settings.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, UsageError
from mutualrl.evaluation.prompt_paired import PromptPaired, prompt_paired
from mutualrl.evaluation.report_caveats import RunCaveats, cell_caveats, read_caveats
from mutualrl.evaluation.run_versions import version_notes
from mutualrl.evaluation.report_stats import CellStats, PairedStats, cell_stats, holm, paired_stats
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


@dataclass
class FinalValues:
    """A finished run's settings, its final held-out reward@1 (``policy -> task group -> value``), the same
validation's per-prompt scores (``policy -> prompt id -> score``) and its summary's caveats."""

    settings: RunSettings
    step: dict[str, int]
    values: dict[str, dict[str, float]]
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    caveats: RunCaveats = field(default_factory=lambda: RunCaveats({}, {}))


@dataclass
class ReportRow:
    group: str
    policy: str
    task_group: str
    seeds: list[Any]
    values: list[float]
    stats: CellStats
    baseline: str | None = None  # the group it is compared with (None: it is a baseline, or has none)
    vs_baseline: PairedStats | None = None
    prompt_paired: PromptPaired | None = None  # only for the task group "all": records carry no task group
    caveats: list[str] = field(default_factory=list)


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

    @property
    def compared(self) -> bool:
        return any(self.baselines.values())

    @property
    def comparisons(self) -> list[ReportRow]:
        """The rows with a sign-flip p: the family Holm's adjustment is over."""
        return [row for row in self.rows if row.vs_baseline and row.vs_baseline.p_sign_flip is not None]

    @property
    def caveats(self) -> list[str]:
        return list(dict.fromkeys(line for row in self.rows for line in row.caveats))


def run_folders(paths: Sequence[Path]) -> list[Path]:
    """Run folders among ``paths``: a run folder itself, or a folder of runs (a sweep), in order."""
    found: list[Path] = []
    for path in paths:
        if RunPaths(path).config.is_file():
            found.append(path)
        elif path.is_dir():
            inner = sorted(child for child in path.iterdir() if RunPaths(child).config.is_file())
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
    if not values:
        raise DataError(f"{run}: no validation results (eval/<policy>/step-N.json)")
    return FinalValues(settings, steps, values, scores, read_caveats(run))


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
                 option: str = "--by") -> Report:
    """Read, group and compute. ``baseline``: a group's label (every group against it) or a regime (each group
    against that regime's group with the same other ``by`` settings); default ``standalone`` where there is one."""
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
    adjust_holm(report)
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
            caveats = cell_caveats(label, policy, [(m.settings.seed, m.caveats) for m in members])
            if base is not None:
                caveats += [line for line in [pairing_caveat(label, base, policy, seed_scores(members, policy),
                                                             seed_scores(groups[base], policy))] if line]
            for task_group in dict.fromkeys(g for m in members for g in m.values.get(policy, {})):
                by_seed = seed_values(members, policy, task_group)
                row = ReportRow(label, policy, task_group, list(by_seed), list(by_seed.values()),
                                cell_stats(list(by_seed.values())), baseline=base, caveats=caveats)
                if base is not None:
                    row.vs_baseline = paired_stats(by_seed, seed_values(groups[base], policy, task_group))
                    if task_group == ALL:
                        row.prompt_paired = prompt_paired(seed_scores(members, policy),
                                                          seed_scores(groups[base], policy))
                rows.append(row)
    return rows


def pairing_caveat(label: str, base: str, policy: str, ours: dict[Any, dict[str, float]],
                   theirs: dict[Any, dict[str, float]]) -> str | None:
    """A line when a run and the baseline's run of the same seed scored different held-out prompts (other
    ``validation.limit``, other data): their per-seed Δ then compares different prompts, and the prompt-paired
    interval rests on the prompts both scored only (none: no such interval). None when every pair scored the same."""
    from mutualrl.evaluation.report_caveats import seeds_text

    seeds = sorted(set(ours) & set(theirs), key=str)
    differ = [seed for seed in seeds if ours[seed].keys() != theirs[seed].keys()]
    if not differ:
        return None
    sizes = [(len(ours[s]), len(theirs[s]), len(ours[s].keys() & theirs[s].keys())) for s in differ]
    mine, baseline, common = (f"{min(v)}" if min(v) == max(v) else f"{min(v)}-{max(v)}" for v in zip(*sizes))
    tail = ("no prompt in common, so no interval over prompts" if all(c == 0 for *_, c in sizes)
            else "the interval over seeds × prompts uses the common ones only")
    return (f"{label} vs {base}, {policy}, {seeds_text(differ)}: scored other held-out prompts than {base}'s run of "
            f"the same seed ({mine} against {baseline}, {common} in common): its Δ compares different prompts; "
            f"{tail}")


def adjust_holm(report: Report) -> None:
    """Holm's adjusted sign-flip p of every comparison in the table (one family: the table's)."""
    compared = report.comparisons
    for row, adjusted in zip(compared, holm([row.vs_baseline.p_sign_flip for row in compared]), strict=True):
        row.vs_baseline.p_holm = adjusted


def seed_values(members: list[FinalValues], policy: str, task_group: str) -> dict[Any, float]:
    return {m.settings.seed: m.values[policy][task_group] for m in members
            if task_group in m.values.get(policy, {})}


def seed_scores(members: list[FinalValues], policy: str) -> dict[Any, dict[str, float]]:
    """``seed -> prompt id -> score`` of one policy's last validation in each run."""
    return {m.settings.seed: m.scores[policy] for m in members if policy in m.scores}


def shared_context(runs: list[FinalValues]) -> dict[str, Any]:
    """Pool, task and final validation step, each when every run has the same (else "mixed")."""
    def common(values: list[Any]) -> Any:
        return values[0] if len(set(map(repr, values))) == 1 else "mixed"

    return {"pool": common([r.settings.get("pool.name") for r in runs]),
            "task": common([task_label(r.settings) for r in runs]),
            "source": common([r.settings.get("task.source") for r in runs]),
            "steps": common([max(r.step.values()) for r in runs])}


def task_label(settings: RunSettings) -> str:
    """The task's name; a user's dataset by its folder (``dataset`` alone names no task)."""
    name, source = settings.get("task.name"), settings.get("task.source")
    if name == "dataset" and source:
        return f"{Path(str(source)).name} (dataset)"
    return str(name)
