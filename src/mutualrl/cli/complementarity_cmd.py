"""``mutualrl complementarity``: where do the policies of a pool complement each other?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mutualrl.cli.common import check_output_path, console, err_console, report_errors
from mutualrl.errors import UsageError
from mutualrl.evaluation.results import NO_VALUE, fmt_number


def render_report(report: dict[str, Any]) -> None:
    """The paper's tables (App. "Cross-policy complementarity") as rich tables."""
    n = report["n_prompts"]
    console.print(
        f"[bold]{len(report['models'])} models on {n} common prompts[/] ({', '.join(report['tasks'])}); "
        f"success = score >= {report['threshold']}",
        highlight=False,
    )
    for note in report.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)

    pairs = Table(title="Prompt-level complementarity (Tab. complementarity-pairs)", title_justify="left")
    for col in ("Learner", "Peer", "Learner succ.", "Peer succ.", "Jaccard", "Peer rescues fail"):
        pairs.add_column(col, justify="right" if "succ" in col or col in ("Jaccard", "Peer rescues fail") else "left")
    for p in report["pairs"]:
        rescues = f"{fmt_number(p['peer_rescues_fail'])} ({p['rescued']}/{p['learner_failures']})"
        pairs.add_row(p["learner"], p["peer"], *map(fmt_number, (p["learner_success"], p["peer_success"], p["jaccard"])),
                      rescues)
    console.print(pairs)

    pool = report["pool"]
    table = Table(title="Pool-level success (Tab. complementarity-pool)", title_justify="left")
    for col in ("Mean single-model", "Any-model", "All-model", "Exactly-one-model", "No model"):
        table.add_column(col, justify="right")
    table.add_row(*(fmt_number(pool[k]) for k in ("mean_single", "any", "all", "exactly_one", "none")))
    console.print(table)

    diff = Table(title="Difficulty-conditioned diversity (Tab. complementarity-difficulty)", title_justify="left",
                 caption=f"buckets: {report['difficulty']['tie_rule']}", caption_justify="left")
    for col in ("Bucket", "n", "mean reward", "Jaccard", "One-model", "Any", "All"):
        diff.add_column(col, justify="left" if col == "Bucket" else "right")
    for b in report["difficulty"]["buckets"]:
        span = NO_VALUE if b["n"] == 0 else f"{b['mean_reward_min']:.2f}–{b['mean_reward_max']:.2f}"
        diff.add_row(b["bucket"], str(b["n"]), span, *(fmt_number(b[k]) for k in ("jaccard", "exactly_one", "any", "all")))
    console.print(diff)

    usability = report["usability"]
    use = Table(title="Regime usability over (prompt, learner) pairs (Tab. regime-overlap)", title_justify="left",
                caption=usability["note"] or "", caption_justify="left")
    use.add_column("Usable regimes on prompt")
    use.add_column("% of pairs", justify="right")
    use.add_column("count", justify="right")
    for row in usability["rows"]:
        use.add_row(row["label"], f"{100 * row['fraction']:.2f}", str(row["count"]))
    console.print(use)

    if "by_task" in report:
        per_task = Table(title="Per task", title_justify="left")
        for col in ("Task", "n", "Mean single", "Any", "All", "Exactly-one"):
            per_task.add_column(col, justify="left" if col == "Task" else "right")
        for task, data in report["by_task"].items():
            p = data["pool"]
            per_task.add_row(task, str(p["n"]), *(fmt_number(p[k]) for k in ("mean_single", "any", "all", "exactly_one")))
        console.print(per_task)


def same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` name one file: the same path once resolved, or one file under two names (a hard link)."""
    import os

    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_outputs(out: Path | None, save: Path | None, overwrite: bool, inputs: list[Path]) -> None:
    """Before anything runs: ``--out`` and ``--save`` writable (an existing file only with ``overwrite``), and two
    files that are none of ``inputs`` (:func:`check_distinct_outputs`)."""
    for path, option in ((path, option) for path, option in ((out, "--out"), (save, "--save")) if path is not None):
        check_output_path(path, option, overwrite=overwrite)
    check_distinct_outputs(out, save, inputs)


def check_distinct_outputs(out: Path | None, save: Path | None, inputs: list[Path]) -> None:
    """``--out`` and ``--save`` are two files, and neither is a file this command reads: the second write would
    replace the first one's results (``--overwrite`` is for a file of an earlier command, never for this one's own),
    and an input replaced by a report is lost. One line naming both."""
    if out is not None and save is not None and same_file(out, save):
        raise UsageError(f"--out {out}: the same file as --save {save}: the report would replace the eval results "
                         "just saved there; name two files")
    for path, option in ((out, "--out"), (save, "--save")):
        for source in inputs if path is not None else []:
            if same_file(path, source):
                raise UsageError(f"{option} {path}: is {source}, which this command reads; nothing was written: "
                                 "name another file")


OverwriteOption = Annotated[bool, typer.Option("--overwrite", help="Replace an existing --out or --save file.")]


@report_errors
def complementarity(
    results: list[Path] = typer.Argument(
        None, help="Eval result files (`mutualrl eval` output, or single-model files) and/or run folders "
        "(their eval/<policy>/step-NNNNNN.json at --step)."),
    step: str | None = typer.Option(None, "--step", help="For run folders: a step number, 'first' (No Train) or "
                                    "'last' (default: the last step every policy has).", show_default=False),
    run_target: str | None = typer.Option(
        None, "--run", help="Instead of reading results, evaluate this pool / recipe / model list first (greedy) "
        "and analyse that.", show_default=False),
    suite: str | None = typer.Option(None, "--suite", help="With --run: the suite (default: the recipe's task, "
                                     "else math).", show_default=False),
    limit: int | None = typer.Option(None, "--limit", min=1, help="With --run: prompts per task (the paper: 500 MATH)."),
    split: str | None = typer.Option(None, "--split", help="With --run: the split.", show_default=False),
    source: str | None = typer.Option(None, "--source", help="With --run: the data source.", show_default=False),
    max_new_tokens: int | None = typer.Option(None, "--max-new-tokens", min=1, help="With --run: generation length.",
                                              show_default=False),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help="With --run: generation batch size.",
                                          show_default=False),
    device: str = typer.Option("auto", "--device", help="With --run: device."),
    backend: str = typer.Option("auto", "--backend", help="With --run: transformers, vllm or auto."),
    save: Path | None = typer.Option(None, "--save", help="With --run: also write the eval results JSON here.",
                                     show_default=False),
    threshold: float = typer.Option(0.5, "--threshold", help="A prompt counts as solved when its score is >= this "
                                    "(in the scores' own units: 0.5 for 0/1 verifiers; a run's reward functions may "
                                    "use another range)."),
    buckets: int = typer.Option(3, "--buckets", min=1, help="Number of equal-size difficulty buckets."),
    difficulty: list[Path] = typer.Option(
        [], "--difficulty", help="Eval results whose mean score per prompt ranks difficulty (default: the analysed "
        "models' mean). Repeatable."),
    prp_ratios: Path | None = typer.Option(
        None, "--prp-ratios", help="JSON lines {prompt_id, learner, ratios:[...]} from a PRP run, to fill the PRP "
        "column of the usability table.", show_default=False),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Also write the report JSON here.", show_default=False),
    overwrite: OverwriteOption = False,
) -> None:
    """Per-model success, pairwise Jaccard, peer-rescue rates, any/all/exactly-one success, by difficulty, and the
    regime usability table (paper App. "Cross-policy complementarity and channel decomposition")."""
    from mutualrl.atomic_io import write_json_atomic
    from mutualrl.evaluation.complementarity import analyze, read_prp_ratios
    from mutualrl.evaluation.results import load_many

    if threshold != threshold or threshold in (float("inf"), float("-inf")):
        raise UsageError(f"--threshold: expected a finite number, got {threshold}")
    check_outputs(out, save, overwrite, [*(results or []), *difficulty, *([prp_ratios] if prp_ratios else [])])
    loaded = load_many(list(results or []), step) if results else []
    if run_target is not None:
        loaded.extend(evaluate_first(
            run_target, suite, save, limit=limit, split=split, source=source, max_new_tokens=max_new_tokens,
            batch_size=batch_size, device=device, backend=backend))
    if not loaded:
        raise UsageError("give eval result files or run folders, or --run a pool / model list")
    diff_scores = difficulty_scores(difficulty, step) if difficulty else None
    ratios = read_prp_ratios(prp_ratios) if prp_ratios is not None else None
    report = analyze(loaded, threshold=threshold, n_buckets=buckets, difficulty=diff_scores, prp_ratios=ratios)
    if out is not None:
        write_json_atomic(out, report, ensure_ascii=False)
    if json_output:
        print(json.dumps(report, indent=2))
    else:
        render_report(report)
        if out is not None:
            console.print(f"report: {out}", highlight=False)


def evaluate_first(target: str, suite: str | None, save: Path | None, **options: Any) -> list[Any]:
    """``--run``: the target's results, evaluated greedily now with ``mutualrl eval``'s ``options`` (status lines and
    bars on standard error), and written to ``save`` when given."""
    from mutualrl.evaluation.results import save_eval_file
    from mutualrl.launch.evaluate import run_eval_command

    ran, meta = run_eval_command(target, suite, verifier=None, chat_template=None, tokenizer=None,
                                 max_prompt_tokens=None, log=err_console, bar_console=err_console, **options)
    if save is not None:
        save_eval_file(save, ran, meta)
        err_console.print(f"eval results: {save}", highlight=False)
    return ran


def difficulty_scores(paths: list[Path], step: str | None) -> dict[str, float]:
    """``--difficulty``: each prompt's mean score over the results in ``paths`` (run folders at ``step``)."""
    from collections import defaultdict

    from mutualrl.evaluation.results import load_many

    sums: dict[str, list[float]] = defaultdict(list)
    for r in load_many(list(paths), step):
        for rec in r.records:
            sums[rec.prompt_id].append(rec.score)
    return {pid: sum(v) / len(v) for pid, v in sums.items()}
