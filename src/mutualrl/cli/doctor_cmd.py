"""``mutualrl doctor``: is this machine ready for a run? One line per check, with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from mutualrl.cli.common import console, report_errors

STYLE = {"ok": "[green]OK[/]", "warn": "[yellow]missing[/]", "fail": "[bold red]FAIL[/]"}


@report_errors
def doctor(
    run_dir: Path = typer.Option(Path("runs"), "--run-dir", help="Where runs will be written (free-disk check)."),
    hub: bool = typer.Option(True, "--hub/--no-hub", help="Check that the model hub answers (one HEAD request)."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as one JSON object."),
) -> None:
    """Check torch/CUDA/NCCL, GPUs and memory, DeepSpeed, vLLM, flash-attention, trackers, cached assets, hub
    reachability and free disk. Exit 1 when the default tiny pool cannot run here; optional parts only warn."""
    from mutualrl.host.quiet_libraries import quiet_third_party
    from mutualrl.doctor import run_checks

    quiet_third_party()  # DeepSpeed's import-time log line is not a check result
    checks = run_checks(run_dir, hub=hub)
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        typer.echo(json.dumps({"ok": not failed, "checks": [c.to_dict() for c in checks]}))
    else:
        table = Table(title="mutualrl doctor", title_justify="left")
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col, overflow="fold")
        for c in checks:
            table.add_row(escape(c.name), STYLE[c.status], escape(c.detail), escape(c.fix))
        console.print(table)
    raise typer.Exit(1 if failed else 0)
