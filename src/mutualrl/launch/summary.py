"""The end-of-run summary: held-out accuracy before/after per policy, and what was exchanged."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from mutualrl.config.schema import RunConfig
from mutualrl.training.paths import RunPaths


def read_metric_lines(paths: RunPaths) -> list[dict[str, Any]]:
    if not paths.metrics.exists():
        return []
    lines = []
    for raw in paths.metrics.read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    return lines


def summarise(paths: RunPaths, config: RunConfig, outcome: Any) -> dict[str, Any]:
    lines = read_metric_lines(paths)
    policies = {}
    for policy in config.pool.policies:
        evals = sorted((l for l in lines if l.get("kind") == "eval" and l.get("policy") == policy.name),
                       key=lambda l: l["step"])
        train = [l for l in lines if l.get("kind") == "train" and l.get("policy") == policy.name
                 and "reward_mean" in l]
        entry: dict[str, Any] = {
            "model": policy.model,
            "steps": max((l["step"] for l in train), default=0),
            "eval_before": evals[0]["eval/reward@1"] if evals else None,
            "eval_before_step": evals[0]["step"] if evals else None,
            "eval_after": evals[-1]["eval/reward@1"] if evals else None,
            "eval_after_step": evals[-1]["step"] if evals else None,
            "train_reward_first": train[0].get("reward_mean") if train else None,
            "train_reward_last": train[-1].get("reward_mean") if train else None,
        }
        groups = group_accuracy(paths, policy.name, config.task.name,
                                [entry["eval_before_step"], entry["eval_after_step"]])
        if groups:
            entry["groups_before"], entry["groups_after"] = groups
        rescues = [l.get("sgt/rescues_total") for l in train if l.get("sgt/rescues_total") is not None]
        if rescues:
            entry["sgt_rescues"] = int(max(rescues))
        policies[policy.name] = entry
    return {"pool": config.pool.name, "regime": config.regime.name, "run_dir": str(paths.root),
            "seconds": round(outcome.seconds, 1), "policies": policies}


def group_accuracy(paths: RunPaths, policy: str, task_name: str, steps: list[int | None]):
    """Held-out accuracy per task group (e.g. problem family) at two validation steps, if the task has groups."""
    if None in steps:
        return None
    from mutualrl.evaluation.results import ModelEvalResult
    from mutualrl.tasks.base import TaskExample
    from mutualrl.tasks.registry import get_task

    task = get_task(task_name)
    out = []
    for step in steps:
        path = paths.eval_result(policy, step)
        if not path.exists():
            return None
        scores: dict[str, list[float]] = {}
        for record in ModelEvalResult.load(path).records:
            example = TaskExample(record.prompt_id, record.prompt, record.answer, record.task)
            group = task.group_of(example)
            if group is None:
                return None
            scores.setdefault(group, []).append(record.score)
        out.append({g: sum(v) / len(v) for g, v in sorted(scores.items())})
    return out


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_summary(summary: dict[str, Any], console: Console) -> None:
    table = Table(title=f"{summary['pool']} / {summary['regime']}: held-out reward@1 (greedy)")
    table.add_column("policy", style="bold cyan")
    table.add_column("steps", justify="right")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    table.add_column("train reward first→last", justify="right")
    if any("sgt_rescues" in p for p in summary["policies"].values()):
        table.add_column("SGT rescues", justify="right")
    for name, p in summary["policies"].items():
        change = None
        if p["eval_before"] is not None and p["eval_after"] is not None:
            change = p["eval_after"] - p["eval_before"]
        row = [name, str(p["steps"]), _fmt(p["eval_before"]), _fmt(p["eval_after"]),
               "-" if change is None else f"{change:+.3f}",
               f"{_fmt(p['train_reward_first'])} → {_fmt(p['train_reward_last'])}"]
        if "sgt_rescues" in p or len(table.columns) == 7:
            row.append(str(p.get("sgt_rescues", "-")))
        table.add_row(*row)
    console.print(table)
    for name, p in summary["policies"].items():
        if "groups_after" in p:
            parts = [f"{g} {p['groups_before'].get(g, 0):.2f}→{v:.2f}" for g, v in p["groups_after"].items()]
            console.print(f"  {name} by group: " + ", ".join(parts), highlight=False)
    console.print(f"finished in {summary['seconds']:.0f}s; run folder {summary['run_dir']} "
                  f"(metrics.jsonl, eval/, see/, policies/)", highlight=False)


def print_failure(outcome: Any, paths: RunPaths, console: Console) -> None:
    if outcome.failed_policy is None:
        console.print(f"[bold red]run stopped:[/] {outcome.reason}", highlight=False)
        return
    console.print(f"[bold red]policy {outcome.failed_policy} failed:[/] {outcome.reason}; the other policies were "
                  "stopped.", highlight=False)
    console.print(f"last lines of {paths.log(outcome.failed_policy)}:", highlight=False)
    console.print(outcome.log_tail, highlight=False, markup=False)
    for name, rc in outcome.returncodes.items():
        if name != outcome.failed_policy:
            console.print(f"  {name}: exit code {rc}", highlight=False)
