"""The end-of-run summary: held-out accuracy before/after per policy, and what was exchanged."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mutualrl.config.schema import RunConfig
from mutualrl.evaluation.results import NO_VALUE, fmt_change, fmt_number, group_rewards
from mutualrl.regimes.sgt.spec import RESCUE_LOGP_KEY, RESCUES_TOTAL_KEY
from mutualrl.run_folder import METRICS_FILE, RunPaths, read_json_or, read_metric_rows


def trained_steps(paths: RunPaths, policy: str, logged: int) -> int:
    """Optimizer steps from the trainer's final state (logged rows miss steps when logging_steps > 1)."""
    steps = read_json_or(paths.final_model(policy) / "trainer_state.json", {}).get("global_step")
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else logged


#: Rescue log-probs are averaged over at most this many logged steps at each end of the run.
RESCUE_WINDOW = 10


def summarise(paths: RunPaths, config: RunConfig, outcome: Any) -> dict[str, Any]:
    lines = [row for _, row in read_metric_rows(paths.metrics)[0]]
    policies = {}
    for policy in config.pool.policies:
        evals = sorted((l for l in lines if l.get("kind") == "eval" and l.get("policy") == policy.name),
                       key=lambda l: l["step"])
        train = [l for l in lines if l.get("kind") == "train" and l.get("policy") == policy.name
                 and "reward_mean" in l]
        entry: dict[str, Any] = {
            "model": policy.model,
            "steps": trained_steps(paths, policy.name, max((l["step"] for l in train), default=0)),
            "eval_before": evals[0]["eval/reward@1"] if evals else None,
            "eval_before_step": evals[0]["step"] if evals else None,
            "eval_after": evals[-1]["eval/reward@1"] if evals else None,
            "eval_after_step": evals[-1]["step"] if evals else None,
            "train_reward_first": train[0].get("reward_mean") if train else None,
            "train_reward_last": train[-1].get("reward_mean") if train else None,
        }
        groups = [group_rewards(evals[0]), group_rewards(evals[-1])] if evals else []
        if groups and all(groups):  # a run without validation rows has none
            entry["groups_before"], entry["groups_after"] = groups
        rescues = [l.get(RESCUES_TOTAL_KEY) for l in train if l.get(RESCUES_TOTAL_KEY) is not None]
        if rescues:
            entry["sgt_rescues"] = cumulative_total(rescues)
        entry.update(rescue_logprob_change([(l["step"], l[RESCUE_LOGP_KEY]) for l in train
                                            if l.get(RESCUE_LOGP_KEY) is not None]))
        entry.update(peer_sample_use(train))
        policies[policy.name] = entry
    summary = {"pool": config.pool.name, "regime": config.regime.name, "seed": config.grpo.get("seed"),
               "run_dir": str(paths.root), "seconds": round(outcome.seconds, 1), "policies": policies}
    if warnings := unused_sharing_warnings(config.regime.name, policies):
        summary["warnings"] = warnings
    if lost := outcome.extra.get("lost"):  # see.on_peer_failure=continue: who left the pool, when and why
        summary["lost"] = {name: {"step": v["step"], "reason": v["reason"]} for name, v in lost.items()}
    if restarted := outcome.extra.get("restarted"):  # see.max_restarts: who was started again, from where
        summary["restarted"] = restarted
    if seen := seen_prompts(paths, config):  # prompts a built-in model saw before training (its warm start)
        summary["seen_prompts"] = seen
    return summary


def seen_prompts(paths: RunPaths, config: RunConfig) -> list[dict[str, Any]]:
    """How many of the run's training and held-out prompts (its own copy, ``RUN/data``) the pool's built-in models
    saw before training, per set (:func:`mutualrl.pools.seen_prompts.seen_prompt_counts`); ``[]`` when no model
    of the pool was warm-started by mutualrl, or none of its prompts are among them."""
    from mutualrl.pools.seen_prompts import seen_prompt_counts, warm_started
    from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, read_examples

    models = {policy.name: policy.model for policy in config.pool.policies}
    if not warm_started(models.values()):
        return []
    train, held_out = ([] if not (paths.data / name).is_file() else read_examples(paths.data / name)
                       for name in (TRAIN_FILE, EVAL_FILE))
    return seen_prompt_counts(models, train, held_out)


def peer_sample_use(train: list[dict[str, Any]]) -> dict[str, Any]:
    """What share of its peers' samples moved a policy's gradient (the per-source ``<regime>/from/<peer>/used_share``:
    the samples whose weighted advantage was nonzero, HACPO's over every update of a generation; averaged over its
    peers and the logged rows that carry it) and in how many of those rows none did; empty where the regime logs no
    such figure (standalone, XGRPO, ...)."""
    per_step = []
    for row in train:
        shares = [value for key, value in row.items() if key.endswith("/used_share") and "/from/" in key
                  and isinstance(value, (int, float)) and value == value]
        if shares:
            per_step.append(sum(shares) / len(shares))
    if not per_step:
        return {}
    return {"peer_samples_used": sum(per_step) / len(per_step), "steps_with_peer_figures": len(per_step),
            "steps_without_peer_samples": sum(share == 0 for share in per_step)}


def unused_sharing_warnings(regime: str, policies: dict[str, dict[str, Any]]) -> list[str]:
    """One line per policy for which no peer sample moved the gradient (``peer_samples_used``) in most of its steps,
    which a comparison of sharing methods must be told; at 0 % it says so, and that the run is still not standalone
    GRPO (its regime ran and exchanged samples; its results differ from a standalone run of the same seed)."""
    lines = []
    for name, entry in policies.items():
        steps, without = entry.get("steps_with_peer_figures", 0), entry.get("steps_without_peer_samples", 0)
        if steps and without * 2 > steps:
            used = entry["peer_samples_used"]
            tail = (f": no peer sample moved its gradient, though {regime} still ran (not standalone GRPO)"
                    if used == 0 else "")
            lines.append(f"{regime} used {used:.0%} of peer samples for {name} (none in {without} of {steps} steps)"
                         f"{tail}")
    return lines


def cumulative_total(counter: list[float]) -> int:
    """A cumulative counter's total over a run's rows in step order, also when it restarted at 0 on a resume
    (runs from before the counter carried over): the last value of every stretch between restarts, summed."""
    total, previous = 0.0, 0.0
    for value in counter:
        if value < previous:
            total += previous
        previous = value
    return int(round(total + previous))


def rescue_logprob_change(logged: list[tuple[int, float]], window: int = RESCUE_WINDOW) -> dict[str, Any]:
    """Mean ``sgt/rescue_logp`` over the first and the last logged steps (empty if none logged), with the
    steps each mean covers. The two windows never overlap: on a short run each is half of the logged steps
    (so first and last differ whenever the values move), and a run with one logged step has one value."""
    if not logged:
        return {}
    size = max(1, min(window, len(logged) // 2))
    first, last = logged[:size], logged[-size:]
    return {"rescue_logp_first": sum(v for _, v in first) / len(first),
            "rescue_logp_last": sum(v for _, v in last) / len(last),
            "rescue_logp_first_steps": [first[0][0], first[-1][0]],
            "rescue_logp_last_steps": [last[0][0], last[-1][0]]}


def rescue_windows_text(entry: dict[str, Any]) -> str:
    """``steps 1-3 → 28-30``: the logged steps the first and the last rescue log-prob means are taken over."""
    first, last = entry.get("rescue_logp_first_steps"), entry.get("rescue_logp_last_steps")
    if not first or not last:
        return ""
    if first == last:  # one logged step: one value, shown twice so the column reads the same
        return f"step {first[0]} only"
    return f"steps {step_range(first)} → {step_range(last)}"


def rescue_windows_note(policies: dict[str, dict[str, Any]]) -> str:
    """The line under the table saying what "first → last" averages (per policy when their steps differ)."""
    windows = {name: rescue_windows_text(p) for name, p in policies.items() if rescue_windows_text(p)}
    if not windows:
        return ""
    shown = (next(iter(windows.values())) if len(set(windows.values())) == 1
             else "; ".join(f"{name} {text}" for name, text in windows.items()))
    return f"rescue log p, first → last: the learner's log-prob of the rescued peer answers, mean over logged {shown}"


def step_range(steps: list[int]) -> str:
    return str(steps[0]) if steps[0] == steps[1] else f"{steps[0]}-{steps[1]}"


def add_name_columns(table: Table, policies: Any, style: str | None = None) -> None:
    """The policy and group columns: as wide as the longest policy name (up to 32 columns), folded beyond, so
    that on 80 columns the numbers' columns narrow instead of names being cut to 'tiny-…'."""
    longest = min(max((len(name) for name in policies), default=6), 32)
    table.add_column("policy", justify="left", style=style, overflow="fold", min_width=longest)
    table.add_column("group", justify="left", overflow="fold")


def print_summary(summary: dict[str, Any], console: Console) -> None:
    """One row per policy (all held-out prompts) and one per task group: before → after, rescues, log-prob."""
    table = Table(title=f"{summary['pool']} / {summary['regime']}: held-out reward@1 (greedy), before → after")
    add_name_columns(table, summary["policies"], style="bold cyan")
    for col in ("steps", "before", "after", "change"):
        table.add_column(col, justify="right")
    sgt = any("sgt_rescues" in p for p in summary["policies"].values())
    if sgt:
        table.add_column("SGT rescues", justify="right")
        table.add_column("rescue log p", justify="right")  # "first → last" (the note says which); wraps at the arrow
    for name, p in summary["policies"].items():
        row = [name, "all", str(p["steps"]), fmt_number(p["eval_before"], 3), fmt_number(p["eval_after"], 3),
               fmt_change(p["eval_before"], p["eval_after"])]
        if sgt:
            logp = f"{p['rescue_logp_first']:.2f} → {p['rescue_logp_last']:.2f}" if "rescue_logp_first" in p else NO_VALUE
            row += [str(p.get("sgt_rescues", NO_VALUE)), logp]
        table.add_row(*row)
        for group, after in p.get("groups_after", {}).items():
            before = p["groups_before"].get(group)
            table.add_row("", group, "", fmt_number(before, 3), fmt_number(after, 3), fmt_change(before, after),
                          *([""] * (2 * sgt)))
    console.print(table)
    if note := rescue_windows_note(summary["policies"]):
        console.print(note, highlight=False)
    for line in summary.get("warnings", []):
        console.print(f"[yellow]note:[/] {escape(line)}", highlight=False)
    for name, left in summary.get("lost", {}).items():
        console.print(f"[yellow]lost:[/] {name} left the pool at step {left['step']} ({left['reason']}); "
                      "its row shows what it had reached", highlight=False)
    for name, attempts in summary.get("restarted", {}).items():
        for attempt in attempts:
            origin = f"checkpoint {attempt['resumed_from']}" if attempt["resumed_from"] is not None else "its start"
            console.print(f"[yellow]restarted:[/] {name} left at step {attempt['step']} ({attempt['reason']}) and "
                          f"rejoined from {origin}", highlight=False)
    console.print(f"finished in {summary['seconds']:.0f}s; run folder {summary['run_dir']} "
                  f"({METRICS_FILE}, eval/, see/, policies/)", highlight=False)


def compare_summaries(run: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Held-out accuracy after training, run vs baseline, per policy and task group, with the difference."""
    rows = []
    for name, p in run["policies"].items():
        b = baseline["policies"].get(name)
        if b is None:
            continue
        pairs = [("all", p["eval_after"], b["eval_after"])]
        pairs += [(g, v, b.get("groups_after", {}).get(g)) for g, v in p.get("groups_after", {}).items()]
        for group, ours, theirs in pairs:
            diff = None if ours is None or theirs is None else ours - theirs
            rows.append({"policy": name, "group": group, "run": ours, "baseline": theirs, "difference": diff})
    return {"regime": run["regime"], "baseline_regime": baseline["regime"], "seed": run.get("seed"),
            "run_dir": run["run_dir"], "baseline_dir": baseline["run_dir"], "rows": rows}


def print_comparison(comparison: dict[str, Any], console: Console) -> None:
    regime, base = comparison["regime"], comparison["baseline_regime"]
    table = Table(title=f"{regime} vs {base} (seed {comparison['seed']}, same settings): held-out reward@1 after training")
    add_name_columns(table, {row["policy"] for row in comparison["rows"]})
    for col in (regime, base, f"{regime} − {base}"):
        table.add_column(col, justify="right")
    last = None
    for row in comparison["rows"]:
        diff = row["difference"]
        shown = NO_VALUE if diff is None else f"[{'green' if diff > 0 else 'red' if diff < 0 else 'default'}]{diff:+.3f}[/]"
        table.add_row(row["policy"] if row["policy"] != last else "", row["group"], fmt_number(row["run"], 3),
                      fmt_number(row["baseline"], 3), shown)
        last = row["policy"]
    console.print(table)
    console.print(f"curves: mutualrl plot {comparison['run_dir']} {comparison['baseline_dir']}", highlight=False)


MAX_REASON_CHARS = 2000


SWEEP_RUN_ENV = "MUTUALRL_SWEEP_RUN"
"""Set by ``mutualrl sweep`` for the runs it starts: a run it stopped leaves the resume instruction to the sweep
(the same sweep command), so a stop says one way to go on."""


def resume_hint(paths: RunPaths) -> str:
    """The checkpoint an interrupted run goes on from, and the exact command that does it."""
    import shlex

    from mutualrl.launch.rundir.resume import common_checkpoint

    policies = sorted(p.name for p in paths.policies.iterdir() if p.is_dir()) if paths.policies.is_dir() else []
    step = common_checkpoint(paths, policies) if policies else None
    saved = (f"checkpoint-{step} of every policy ({paths.policies}/<policy>/checkpoint-{step})" if step is not None
             else "its start (no checkpoint was saved yet)")
    modules = recorded_modules(paths)
    allow = f" --allow-code {shlex.quote(','.join(modules))}" if modules else ""
    return f"to go on from {saved}: mutualrl train --resume -o {shlex.quote(str(paths.root))}{allow}"


def recorded_modules(paths: RunPaths) -> list[str]:
    """The user's modules the run's config names, as ``RUN/inputs.json`` recorded them: what ``--resume`` must be
    told it accepts (``--allow-code``; a run folder chooses no code by itself). Empty for a damaged or older record
    (the resume then names what it needs)."""
    from mutualrl.errors import MutualRLError
    from mutualrl.inputs_record_reader import recorded_inputs

    try:
        record = recorded_inputs(paths)
    except MutualRLError:
        return []
    return sorted(record["code"]) if record is not None else []


def print_failure(outcome: Any, paths: RunPaths, console: Console) -> None:
    """Why the run stopped: bounded, whatever a worker (or another machine) reported."""
    if len(outcome.reason) > MAX_REASON_CHARS:
        outcome.reason = f"{outcome.reason[:MAX_REASON_CHARS]} [... cut]"
    if outcome.extra.get("storage"):  # a full disk or an I/O error: the one line that says where is enough
        who = f" (policy {outcome.failed_policy}; the others were stopped)" if outcome.failed_policy else ""
        console.print(f"[bold red]error:[/] {escape(outcome.reason + who)}", highlight=False, soft_wrap=True)
        return
    if outcome.failed_policy is None:
        console.print(f"[bold red]run stopped:[/] {outcome.reason}", highlight=False)
        if outcome.reason == "interrupted" and not os.environ.get(SWEEP_RUN_ENV):  # a sweep says how to go on
            console.print(resume_hint(paths), highlight=False, soft_wrap=True)
        return
    console.print(f"[bold red]policy {outcome.failed_policy} failed:[/] {outcome.reason}; the other policies were "
                  "stopped.", highlight=False, soft_wrap=True)  # one line, whatever the terminal's width
    console.print(f"last lines of {paths.log(outcome.failed_policy)}:", highlight=False)
    console.print(outcome.log_tail, highlight=False, markup=False)
    for name, rc in outcome.returncodes.items():
        if name != outcome.failed_policy:
            console.print(f"  {name}: exit code {rc}", highlight=False)
