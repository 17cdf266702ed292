"""``mutualrl see``: inspect a run's Shared Experience Exchange."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from mutualrl.cli.common import console, report_errors
from mutualrl.evaluation.results import fmt_number

app = typer.Typer(help="Inspect the Shared Experience Exchange (SEE) of a run.", no_args_is_help=True)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@app.command("inspect")
@report_errors
def inspect(
    run_dir: Path = typer.Argument(..., help="A run folder (its SEE is RUN_DIR/see) or the see/ folder itself."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    no_checksum: bool = typer.Option(
        False, "--no-checksum", help="Skip hashing shard files (faster on huge exchanges; sizes are still checked)."
    ),
    show_files: bool = typer.Option(True, "--files/--no-files", help="List every file with its size."),
    records: int = typer.Option(0, "--records", min=0, metavar="N", help="Also show N records with their provenance, "
                                "newest first: where a learner failed every sample and a peer's answer succeeded "
                                "(a rescue), else the newest records."),
) -> None:
    """Steps, records per policy, reward means, files, sizes, schema, provenance, and any inconsistency found;
    for a run folder (or the exchange inside one), the per-source diagnostics its policies logged per (learner, peer),
    and the peers' judgements of each policy's rollouts where the regime has them (OPD).

    Exits 1 when an inconsistency is found (missing shards or ranks, checksum/size mismatch,
    unreadable file, stray temporary files, failure markers, row counts differing from the
    manifest, steps whose policies saw different prompt ids).
    """
    from mutualrl.ops.exchange_inspect import inspect_exchange

    report = inspect_exchange(run_dir, verify_checksums=not no_checksum)
    shown = shown_records(run_dir, report, records) if records else None
    if json_output:
        typer.echo(json.dumps({**report.to_dict(), **({"shown_records": shown} if shown else {})}, indent=1,
                              default=str))
    else:
        _print_report(report, show_files)
        for line in record_lines(shown) if shown else ():
            console.print(line, highlight=False, soft_wrap=True, markup=False)
    if not report.ok:
        raise typer.Exit(1)


def shown_records(run_dir: Path, report, limit: int) -> dict:  # type: ignore[no-untyped-def]
    """``--records N``: the rescues (else records) :mod:`mutualrl.ops.exchange_records` finds in the steps kept."""
    from mutualrl.ops.exchange_records import shown_records as find
    from mutualrl.ops.peer_offpolicy_stats import run_folder_of

    root = Path(report.root)
    return find(root, report.steps, limit, run_folder_of(run_dir, root))


def record_lines(shown: dict) -> list[str]:
    from mutualrl.ops.exchange_records import record_lines as lines

    return lines(shown)


SOURCE_HEADINGS = {"ess": "ESS", "log_ratio_mean": "log w mean", "log_ratio_max": "log w max",
                   "truncated_share": "truncated", "filtered_share": "filtered", "used_share": "used",
                   "rescue_logp": "rescue log-prob"}


def _sources_table(sources: list[dict]) -> Table:
    """Per (learner, peer): each per-source figure at the last step / its mean over the steps."""
    shown = [f for f in SOURCE_HEADINGS if any(f in entry["last"] for entry in sources)]
    table = Table(title="Per-source diagnostics from metrics.jsonl (last step / mean over steps)")
    for column in ("learner", "from peer", "regime", "steps"):
        table.add_column(column, justify="right" if column == "steps" else "left")
    for figure in shown:
        table.add_column(SOURCE_HEADINGS[figure], justify="right")
    for entry in sources:
        cells = [f"{fmt_number(entry['last'][f], 3)} / {fmt_number(entry['mean'][f], 3)}"
                 if f in entry["last"] else "-" for f in shown]
        table.add_row(entry["learner"], entry["peer"], entry["regime"], str(entry["steps"]), *cells)
    return table


def _judgements_table(judgements: list[dict]) -> Table:
    """Per (learner, judge): the peers' judgements of the learner's rollouts (OPD) in the exchange."""
    table = Table(title="Judgements: each peer's scoring of the learner's rollouts (OPD)")
    for column in ("learner", "judged by", "steps", "records", "tokens", "judge log-prob / token"):
        table.add_column(column, justify="left" if column in ("learner", "judged by") else "right")
    for entry in judgements:
        table.add_row(entry["learner"], entry["judge"], str(entry["steps"]), str(entry["records"]),
                      str(entry["tokens"]), fmt_number(entry["judge_logp_mean"], 3))
    return table


def _print_report(report, show_files: bool) -> None:  # type: ignore[no-untyped-def]
    console.print(f"[bold]SEE[/] {report.root}", highlight=False)
    console.print(
        f"steps: {len(report.steps)}"
        + (f" ({report.steps[0]}..{report.steps[-1]}{'; ' + report.retention if report.retention else ''})"
           if report.steps else "")
        + f"   policies: {', '.join(report.policies) or '-'}   records: {report.records}"
        + f"   files: {len(report.files)} ({_size(report.total_bytes)})"
        + f"   schema version(s): {report.schema_versions or '-'}   run id(s): {report.run_ids or '-'}",
        highlight=False,
    )
    if report.steps:
        console.print(_records_table(report))
    if report.provenance:
        console.print(_provenance_table(report.provenance))
    if report.sources:
        console.print(_sources_table(report.sources))
    if report.judgements:
        console.print(_judgements_table(report.judgements))
    if show_files and report.files:
        ftable = Table(title="Files")
        ftable.add_column("path")
        ftable.add_column("kind")
        ftable.add_column("size", justify="right")
        for f in report.files:
            ftable.add_row(f.path, f.kind, _size(f.bytes))
        console.print(ftable)
    if report.issues:
        itable = Table(title=f"[red]{len(report.issues)} inconsistenc{'y' if len(report.issues) == 1 else 'ies'}[/]")
        itable.add_column("kind", style="red")
        itable.add_column("detail")
        for issue in report.issues:
            itable.add_row(issue.kind, issue.message)
        console.print(itable)
    else:
        checked = "every shard verified" if report.checksums_verified else "sizes checked (checksums skipped)"
        console.print(f"[green]consistent:[/] {checked}, no stray files, no failure markers.")


def _records_table(report) -> Table:  # type: ignore[no-untyped-def]
    """Per step, each policy's records (reward mean), its ranks and corrupt ones; the means per policy under them."""
    table = Table(title="Records (reward mean) per policy and step")
    table.add_column("step", justify="right")
    for policy in report.policies:
        table.add_column(policy, justify="right")
    table.add_column("all", justify="right")
    for step in report.steps:
        row = [str(step)]
        for policy in report.policies:
            cell = report.cells[step].get(policy)
            row.append(
                "[red]missing[/]"
                if cell is None
                else f"{cell.records} ({fmt_number(cell.reward_mean)})"
                + ("" if cell.world_size == 1 else f" [dim]{len(cell.ranks)}/{cell.world_size} ranks[/]")
                + (f" [red]corrupt rank(s) {cell.corrupt_ranks}[/]" if cell.corrupt_ranks else "")
            )
        row.append(fmt_number(report.step_reward_mean.get(step)))
        table.add_row(*row)
    table.add_row(
        "mean",
        *[fmt_number(report.policy_reward_mean.get(p)) for p in report.policies],
        fmt_number(report.overall_reward_mean),
        style="bold",
    )
    return table


def _provenance_table(provenance: dict[str, dict]) -> Table:
    """Per policy: the models, tokenizers, hosts and library versions its shards name."""
    prov = Table(title="Provenance")
    for col in ("policy", "model", "tokenizer", "hosts", "versions"):
        prov.add_column(col)
    for policy, p in provenance.items():
        versions = "; ".join(", ".join(f"{k} {v}" for k, v in vs.items() if v) for vs in p["versions"])
        prov.add_row(
            policy, ", ".join(p["models"]) or "-", ", ".join(p["tokenizers"]) or "-", ", ".join(p["hostnames"]), versions
        )
    return prov
