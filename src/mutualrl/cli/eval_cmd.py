"""``mutualrl eval``: greedy reward@1 of models or a pool on a task suite (the evaluation itself:
:mod:`mutualrl.launch.evaluate`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from mutualrl.atomic_io import write_text_atomic
from mutualrl.cli.common import ALLOW_CODE_HELP, check_output_path, console, err_console, report_errors, split_names
from mutualrl.errors import UsageError
from mutualrl.launch.evaluate import REWARD_FUNCS_OPTION

SUITE_HELP = (
    "math (MATH), qa (ARC, OpenBookQA, BoolQ, PIQA, HellaSwag, Social IQa), qa-line (the same with an answer line "
    "instead of \\boxed{}, for small models), all (MATH, GSM8K and the QA suite), "
    "or comma-separated task names (math, gsm8k, arc, arc-easy, openbookqa, boolq, piqa, hellaswag, siqa, qa-mix, "
    "synthetic-arith). Default: the recipe's task for a pool, else math."
)


def group_lines(meta: dict[str, Any]) -> list[str]:
    """reward@1 per group of ``task.group_column``, one line per model (nothing without groups)."""
    groups = meta.get("groups")
    if not groups:
        return []
    return [f"\nreward@1 by {groups['column']}:"] + [
        f"  {model}: " + ", ".join(f"{value} {reward:.3f}" for value, reward in by_group.items())
        for model, by_group in groups["reward@1"].items()]


DEFAULT_FOLDER = "eval-results"
"""Where results go without ``--output``: this folder of the working directory."""


def check_default_folder() -> None:
    """Before any model loads: the working directory's ``eval-results`` is no link (nor a file) where the results
    would go; it is made only when they are written."""
    from mutualrl.output_guards import refuse_links_below

    folder = Path.cwd() / DEFAULT_FOLDER
    refuse_links_below(Path.cwd(), folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: exists and is not a folder, where eval writes its results without "
                         "--output; name the results with --output")


def default_output(label: str, suite: str) -> Path:
    """``eval-results/<label>-<suite>-<time>.json``, the name bounded (a long run folder name still fits, with
    its ``.md`` and a temporary name) and never an existing file's (a second eval in the same second)."""
    safe_suite = suite.replace(",", "+").replace("/", "_")
    stem = f"{label}-{safe_suite}".encode()[:DEFAULT_STEM_BYTES].decode(errors="ignore")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    from mutualrl.output_guards import folder_inside

    folder_inside(Path.cwd(), DEFAULT_FOLDER)  # the one write rule: made here, never written through a link
    for attempt in range(1000):
        path = Path(DEFAULT_FOLDER) / f"{stem}-{stamp}{f'-{attempt}' if attempt else ''}.json"
        if not (path.exists() or path.with_suffix(".md").exists()):
            return path
    raise UsageError(f"{path.parent}: 1000 results named {stem}-{stamp}-*; name the output with --output")


DEFAULT_STEM_BYTES = 160
"""Bytes of a default result name's label and suite: with the time, ``.json`` and a temporary name's suffix it
stays within a file name's 255 bytes."""


def save_results(path: Path, results: list[Any], meta: dict[str, Any]) -> tuple[str, Path]:
    """The results JSON at ``path`` and the markdown table beside it (``.md``); the table and its file."""
    from mutualrl.evaluation.results import markdown_table, save_eval_file

    save_eval_file(path, results, meta)
    table = markdown_table(results, meta["tasks"])
    md_path = path.with_suffix(".md")
    write_text_atomic(
        md_path,
        f"# mutualrl eval: {meta['target']} on {meta['suite']}\n\n"
        f"Greedy decoding, one completion per prompt, reward@1; verifier {meta['verifier']}; "
        f"max {meta['max_new_tokens']} new tokens; {meta['seconds']:.1f}s.\n\n{table}"
    )
    return table, md_path


def check_outputs(output: Path, overwrite: bool) -> None:
    """The results file and the table beside it (``.md``): neither replaces an existing file without
    ``--overwrite`` (``-o README.json`` would replace ``README.md``), checked before any model loads."""
    check_output_path(output, "--output", overwrite=overwrite)
    table = output.with_suffix(".md")
    if table == output:
        raise UsageError(f"--output {output}: the markdown table is written beside the results as {table.name}; "
                         "name the results file with another suffix (.json)")
    check_output_path(table, "--output (its markdown table)", overwrite=overwrite)


@report_errors
def eval_command(
    target: str = typer.Argument("tiny", help="A pool name, a recipe path, a run folder (every policy's final "
                                 "model, with the run's settings), or comma-separated models (builtin:NAME, local "
                                 "folders such as RUN/policies/NAME/checkpoint-N, hub ids)."),
    suite: str | None = typer.Option(None, "--suite", help=SUITE_HELP, show_default=False),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Evaluate at most this many prompts per task. A run folder on its own task: "
        "the held-out prompts its validation scored first; a limit beyond them scores the first N of the task's "
        "held-out split, read from the run's task.source (said in one line).", show_default=False),
    split: str | None = typer.Option(
        None, "--split", help="Split of every task (default: each task's evaluation split; MATH: test500).",
        show_default=False),
    source: str | None = typer.Option(
        None, "--source",
        help="Data source: auto (hub when reachable, else offline), offline, hub, a local file/folder, or a hub "
        "dataset id. Default: the recipe's, else auto.", show_default=False),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Results JSON (default: eval-results/<models>-<suite>-<time>.json); the "
        "markdown table is written next to it (.md).", show_default=False),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", min=1, help="Generation length (default: the recipe's validation length, else the "
        "task's own: synthetic-arith 4, *-line 8, dataset 64; else 1024).",
        show_default=False),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help="Prompts per generation batch (default 16).",
                                          show_default=False),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:1, ... (auto: cuda when available)."),
    backend: str = typer.Option("auto", "--backend", help="transformers, vllm, or auto (vllm when installed and on "
                                "a GPU)."),
    verifier: str | None = typer.Option(None, "--verifier", help="default (the task's own), exact (the paper's "
                                        "strict string match) or equiv (math-verify / choice matching).",
                                        show_default=False),
    chat_template: bool | None = typer.Option(
        None, "--chat-template/--no-chat-template", help="Wrap prompts in the tokenizer's chat template (default: "
        "the recipe's setting, for a run's policy folder the run's; else only for instruct/chat models).",
        show_default=False),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Tokenizer for every model (named, folder or "
                                         "hub id; default: each model's own).", show_default=False),
    max_prompt_tokens: int | None = typer.Option(
        None, "--max-prompt-tokens", min=1, help="Drop prompts longer than this for any model (default: the recipe's, "
        "else keep all).", show_default=False),
    reward_funcs: list[str] | None = typer.Option(
        None, REWARD_FUNCS_OPTION, help="Score with these reward functions instead of the recipe's (comma-separated "
        "or repeated; names as in task.reward_funcs: module.function or one of TRL's), e.g. --suite dataset --source "
        "DIR --reward-funcs my_rewards.exact.", show_default=False),
    group_column: str | None = typer.Option(
        None, "--group-column", help="Also report reward@1 per value of this column of the rows (default: the "
        "recipe's task.group_column).", show_default=False),
    allow_code: list[str] = typer.Option([], "--allow-code", help=ALLOW_CODE_HELP, show_default=False),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing results (the .json and the .md "
                                   "beside it)."),
) -> None:
    """Evaluate models with greedy decoding (one completion per prompt) and report reward@1 per task.

    Writes a JSON file with every prompt's completion and score, and a markdown table.
    """
    from mutualrl.config.recorded_code import accept_code
    from mutualrl.launch.evaluate import run_eval_command

    accept_code(split_names(allow_code))
    if output is not None:
        check_outputs(output, overwrite)
    else:
        check_default_folder()
    results, meta = run_eval_command(
        target, suite, limit=limit, split=split, source=source, max_new_tokens=max_new_tokens,
        batch_size=batch_size, device=device, backend=backend, verifier=verifier, chat_template=chat_template,
        tokenizer=tokenizer, max_prompt_tokens=max_prompt_tokens, log=console, bar_console=err_console,
        reward_funcs=split_names(reward_funcs),
        group_column=group_column,
    )
    path = output or default_output(meta["label"], meta["suite"])
    if output is not None:  # the files may have appeared while the models ran
        check_outputs(output, overwrite)
    table, md_path = save_results(path, results, meta)
    console.print(table, markup=False, highlight=False)
    for line in group_lines(meta):
        console.print(line, markup=False, highlight=False)
    console.print(f"results: {path}\ntable:   {md_path}", highlight=False)
