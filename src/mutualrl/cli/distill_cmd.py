"""``mutualrl distill``: sequential peer distillation, the paper's offline control for SGT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from mutualrl.cli.common import ALLOW_CODE_HELP, check_output_path, console, err_console, report_errors, split_names
from mutualrl.evaluation.results import fmt_change, fmt_number


def print_summary(summary: dict[str, Any]) -> None:
    harvest, sft = summary["harvest"], summary["sft"]
    console.print(
        f"harvested {harvest['distinct_successes']} distinct successes of {summary['peer']} on "
        f"{harvest['prompts_solved']} prompts ({harvest['successful_rollouts']} of {harvest['rollouts']} rollouts, "
        f"{harvest['steps']} steps); SFT {sft['steps']} step(s) on {summary['examples']} examples, "
        f"loss {fmt_number(sft['loss_first'], 3)} → {fmt_number(sft['loss_last'], 3)}",
        highlight=False,
    )
    evaluation = summary.get("eval") or {}
    if evaluation:
        before, after = evaluation["before"], evaluation["after"]
        console.print(f"[bold]{summary['learner']} ← {summary['peer']}[/]: held-out reward@1, before → after SFT",
                      highlight=False)
        table = Table()
        for column in ("group", "before", "after", "change"):
            table.add_column(column, justify="left" if column == "group" else "right")
        rows = [("all", before["reward@1"], after["reward@1"])]
        if len(before["tasks"]) > 1:
            rows += [(task, value, after["tasks"].get(task)) for task, value in before["tasks"].items()]
        rows += [(group, value, after["groups"].get(group)) for group, value in before["groups"].items()]
        for name, b, a in rows:
            table.add_row(name, fmt_number(b, 3), fmt_number(a, 3), fmt_change(b, a))
        console.print(table)
    console.print(f"greedy, {evaluation['n']} held-out prompts" if evaluation else "not evaluated (--no-eval)",
                  style="dim", highlight=False)
    for warning in summary.get("warnings", []):
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    console.print(f"model:   {summary['model']}\nsummary: {Path(summary['model']).parent / 'summary.json'}",
                  highlight=False)


@report_errors
def distill(
    run_dir: Path = typer.Argument(..., help="Run folder of a standalone run recorded with "
                                   "--set see.record_standalone=true --set see.retention_steps=null."),
    learner: str = typer.Option(..., "--learner", "-l", help="Policy to fine-tune (its final model)."),
    peer: str | None = typer.Option(None, "--peer", help="Policy whose successes are the SFT data (default: the "
                                    "pool's other policy).", show_default=False),
    peer_run: Path | None = typer.Option(None, "--peer-run", help="The peer's run folder, when it is not RUN_DIR "
                                         "(two separately trained standalone runs).", show_default=False),
    output_dir: Path | None = typer.Option(None, "--output-dir", "-o", help="Output folder (default: "
                                           "RUN_DIR/distill/<learner>-from-<peer>).", show_default=False),
    lora: bool = typer.Option(True, "--lora/--full", help="LoRA SFT (the paper's: r 16, alpha 32, dropout 0.05; "
                              "merged into the saved model) or full-weight SFT."),
    max_steps: int | None = typer.Option(None, "--max-steps", min=1, help="Stop after this many optimizer steps "
                                         "(default: one epoch).", show_default=False),
    overrides: list[str] = typer.Option(
        [], "--set", "-s", help="Override a trl.SFTConfig field (--set per_device_train_batch_size=4) or a LoRA "
        "setting (--set lora.r=8); repeatable. Defaults: lr 2e-5, cosine, warm-up 0.03, 1 epoch, TRL's batch size."),
    loss_reduction: str = typer.Option("sequence", "--loss-reduction", help="sequence: mean over examples of each "
                                       "one's token-averaged NLL (SGT's auxiliary loss); token: TRL's token mean."),
    success_threshold: float | None = typer.Option(
        None, "--success-threshold", help="A peer rollout is a success when its reward is above this (default: the "
        "run's regime.sgt.success_threshold, 0.8).", show_default=False),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="Held-out greedy reward@1 before and after, on "
                                  "the run's RUN_DIR/data/eval.jsonl."),
    eval_limit: int | None = typer.Option(None, "--eval-limit", min=1, help="Evaluate only the first N held-out "
                                          "prompts.", show_default=False),
    device: str = typer.Option("auto", "--device", help="Evaluation device: cpu, cuda, cuda:1, ... (auto: cuda when "
                               "available). The SFT runs on the CPU with cpu, else on the first visible GPU."),
    backend: str = typer.Option("auto", "--backend", help="Evaluation backend: transformers, vllm or auto."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an output folder written by an earlier "
                                   "`mutualrl distill`."),
    allow_code: list[str] = typer.Option([], "--allow-code", help=ALLOW_CODE_HELP, show_default=False),
) -> None:
    """Sequential peer distillation: SFT of a learner on its peer's recorded successes (the paper's control for SGT).

    Harvests every distinct rollout with a reward above --success-threshold that the peer generated in its standalone GRPO run.
    Fine-tunes the learner's final model on them: its own prompt template, the peer's text retokenized with its tokenizer, SGT's auxiliary NLL offline (no gate, no GRPO).
    Saves the model and prints the learner's held-out reward@1 before and after, per task group.
    """
    from mutualrl.host.quiet_libraries import quiet_third_party
    from mutualrl.write_failures import storage_errors
    from mutualrl.evaluation.runner import pick_backend, pick_device
    from mutualrl.training.distill import DistillOptions, finish_distill, plan_distill, train_distill

    quiet_third_party()
    from mutualrl.config.recorded_code import accept_code

    accept_code(split_names(allow_code))
    if output_dir is not None:
        check_output_path(output_dir, "--output-dir", kind="folder")
    pick_backend(backend, pick_device(device))  # checked before anything is loaded
    options = DistillOptions(run_dir=run_dir, learner=learner, peer=peer, peer_run=peer_run, output_dir=output_dir,
                             lora=lora, loss_reduction=loss_reduction, max_steps=max_steps,
                             success_threshold=success_threshold, overrides=list(overrides), evaluate=evaluate,
                             eval_limit=eval_limit, device=device, backend=backend, overwrite=overwrite)
    plan = plan_distill(options)
    console.print(f"[bold]distill[/] {plan.learner.name} ← {plan.peer}: {len(plan.successes)} distinct successes "
                  f"from {plan.harvest.root}; output {plan.output}", highlight=False)
    from mutualrl.launch.evaluate import quiet_transformers, shown_progress

    quiet_transformers()
    with storage_errors(plan.output):  # a full disk (data, SFT checkpoints, model, summary): one line naming it
        summary = train_distill(plan, on_status=lambda msg: err_console.print(f"[dim]{msg}[/]", highlight=False))
        if evaluate:
            with shown_progress(True, err_console) as (on_status, factory):
                summary = finish_distill(plan, summary, on_status=on_status, progress_factory=factory)
    print_summary(summary)
