"""``mutualrl report``: the final held-out reward@1 of finished runs, grouped (by regime, or any setting), per
policy and task group, with the statistics of :mod:`.report_stats`.

A run's final value is its last validation: ``RUN/eval/<policy>/step-N.json`` with the largest N (reward@1 over
every held-out prompt), and its task groups from the validation row of the same step in ``metrics.jsonl``. Runs
are pooled in a group only when they differ in nothing but the seed (their place aside); anything else is refused,
naming the setting, unless ``--by`` names it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, UsageError
from mutualrl.evaluation.report_stats import CellStats, PairedStats, cell_stats, paired_stats
from mutualrl.evaluation.results import ModelEvalResult, group_rewards, step_files
from mutualrl.evaluation.run_settings import (
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
    """A finished run's settings and its final held-out reward@1: ``policy -> task group -> value``."""

    settings: RunSettings
    step: dict[str, int]
    values: dict[str, dict[str, float]]


@dataclass
class ReportRow:
    group: str
    policy: str
    task_group: str
    seeds: list[Any]
    values: list[float]
    stats: CellStats
    vs_baseline: PairedStats | None = None


@dataclass
class Report:
    by: list[str]
    baseline: str | None
    groups: dict[str, list[FinalValues]]
    rows: list[ReportRow] = field(default_factory=list)
    between_groups: list[str] = field(default_factory=list)  # settings that differ between groups besides --by
    left_out: list[str] = field(default_factory=list)  # runs not finished, with why
    context: dict[str, Any] = field(default_factory=dict)  # pool, task, steps: what every run shares


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


def final_values(run: Path) -> FinalValues:
    """Every policy's last validation: overall from its eval JSON, task groups from the same step's metrics row."""
    paths = RunPaths(run)
    settings = read_settings(run)
    rows = [row for _, row in read_metric_rows(paths.metrics)[0] if row.get("kind") == "eval"]
    values: dict[str, dict[str, float]] = {}
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
        values[policy_dir.name] = {ALL: result.reward_at_1, **group_rewards(row)}
        steps[policy_dir.name] = step
    if not values:
        raise DataError(f"{run}: no validation results (eval/<policy>/step-N.json)")
    return FinalValues(settings, steps, values)


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


def build_report(paths: Sequence[Path], by: Sequence[str] = ("regime",), baseline: str | None = None) -> Report:
    """Read, group and compute; ``baseline`` (a group's label) defaults to ``standalone`` when there is one."""
    finished, left_out = [], []
    for run in run_folders(paths):
        reason = unfinished_reason(RunPaths(run))
        if reason:
            left_out.append(reason)
        else:
            finished.append(final_values(run))
    if not finished:
        raise DataError("no finished run to report" + (f": {left_out[0]}" if left_out else ""))
    groups = group_runs(finished, by)
    if baseline is not None and baseline not in groups:
        raise UsageError(f"--baseline {baseline}: no such group; the groups are: {', '.join(groups)}")
    if baseline is None and "standalone" in groups and len(groups) > 1:
        baseline = "standalone"
    if baseline is not None:  # the baseline's rows first, as a paper's table has them
        groups = {baseline: groups[baseline], **{k: v for k, v in groups.items() if k != baseline}}
    everyone = [run.settings for run in finished]
    report = Report(by=list(by), baseline=baseline, groups=groups, left_out=left_out,
                    between_groups=[describe_difference(key, everyone) for key in
                                    differing_keys(everyone, ignore=[resolve_key(k) for k in by])],
                    context=shared_context(finished))
    report.rows = report_rows(groups, baseline)
    return report


def report_rows(groups: dict[str, list[FinalValues]], baseline: str | None) -> list[ReportRow]:
    """One row per group, policy and task group (``all`` first), in the groups' order."""
    rows = []
    for label, members in groups.items():
        policies = list(dict.fromkeys(p for m in members for p in m.values))
        for policy in policies:
            task_groups = list(dict.fromkeys(g for m in members for g in m.values.get(policy, {})))
            for task_group in task_groups:
                by_seed = seed_values(members, policy, task_group)
                row = ReportRow(label, policy, task_group, list(by_seed), list(by_seed.values()),
                                cell_stats(list(by_seed.values())))
                if baseline is not None and label != baseline:
                    row.vs_baseline = paired_stats(by_seed, seed_values(groups[baseline], policy, task_group))
                rows.append(row)
    return rows


def seed_values(members: list[FinalValues], policy: str, task_group: str) -> dict[Any, float]:
    return {m.settings.seed: m.values[policy][task_group] for m in members
            if task_group in m.values.get(policy, {})}


def shared_context(runs: list[FinalValues]) -> dict[str, Any]:
    """Pool, task and final validation step, each when every run has the same (else "mixed")."""
    def common(values: list[Any]) -> Any:
        return values[0] if len(set(map(repr, values))) == 1 else "mixed"

    return {"pool": common([r.settings.get("pool.name") for r in runs]),
            "task": common([r.settings.get("task.name") for r in runs]),
            "source": common([r.settings.get("task.source") for r in runs]),
            "steps": common([max(r.step.values()) for r in runs])}
