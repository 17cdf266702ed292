"""``mutualrl eval``: greedy reward@1 of models or a pool on a task suite."""

from __future__ import annotations

import typer

from mutualrl.cli.common import not_implemented, report_errors


@report_errors
def eval_command(
    target: str = typer.Argument("tiny", help="A pool name, a recipe path, or comma-separated models."),
    suite: str = typer.Option("math", "--suite", help="math, qa, all, or comma-separated task names."),
    limit: int | None = typer.Option(None, "--limit", help="Evaluate at most this many prompts per task."),
) -> None:
    """Evaluate models with greedy decoding (one completion per prompt) and report reward@1 per task.

    Writes a JSON file with every prompt's completion and score, and prints a markdown table.
    """
    not_implemented("eval", 6)
