"""Entry point of the ``mutualrl`` command."""

from __future__ import annotations

import os
from collections.abc import Sequence

import typer

from mutualrl.release import VERSION
from mutualrl.cli import (
    assets_cmd,
    complementarity_cmd,
    distill_cmd,
    doctor_cmd,
    eval_cmd,
    plot_cmd,
    pools_cmd,
    report_cmd,
    see_cmd,
    sweep_cmd,
    thl_cmd,
    train_cmd,
)
from mutualrl.cli.common import err_console, one_line
from mutualrl.host.terminal import best_effort_console
from mutualrl.write_failures import TRAIN_ADVICE, command_advice, storage_error

app = typer.Typer(
    name="mutualrl",
    help=(
        "Mutual reinforcement learning on TRL: train several heterogeneous LLM policies with GRPO at once, "
        "exchanging typed experience (rollouts, rewards, verified successes) while they train.\n\n"
        "Start with `mutualrl train` (the embedded tiny pool, SGT, CPU-friendly) or "
        "`mutualrl train --pool 2qwen --regime sgt --dry-run` to see a GPU plan."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

app.command("train")(train_cmd.train)
app.command("eval")(eval_cmd.eval_command)
app.command("thl-check")(thl_cmd.thl_check)
app.command("complementarity")(complementarity_cmd.complementarity)
app.command("distill")(distill_cmd.distill)
app.command("doctor")(doctor_cmd.doctor)
app.add_typer(see_cmd.app, name="see")
app.add_typer(pools_cmd.app, name="pools")
app.command("plot")(plot_cmd.plot)
app.command("report")(report_cmd.report)
app.command("sweep")(sweep_cmd.sweep)
app.add_typer(assets_cmd.app, name="assets")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mutualrl {VERSION}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Mutual RL command line."""


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code; every user error is one line on stderr.

    Bad options and arguments (click's usage errors, exit 2) and environment errors (a path
    that is a file, permission denied, disk full: exit 1) are printed as ``error: ...`` without
    a traceback; ``MUTUALRL_DEBUG=1`` shows the traceback instead. Any other exception is a bug
    and keeps its traceback.
    """
    debug = os.environ.get("MUTUALRL_DEBUG", "") not in ("", "0")
    if not working_dir_exists():  # libraries imported later (TRL) fail on it with a traceback
        err_console.print("error: the current folder no longer exists (deleted or moved away): cd into an existing "
                          "folder and run the command again", highlight=False, markup=False)
        return 1
    # a full or closed stdout/stderr never stops a command (a run's logs are its record); a full disk's advice is
    # this command's own
    with best_effort_console(), command_advice(ADVICE.get(command_name(argv), TRAIN_ADVICE)):
        return run_command(argv, debug)


#: How each command continues after a failed write, where it is not training's ``--resume`` (None: run it again).
ADVICE: dict[str, str | None] = {
    "report": None, "plot": None, "eval": None, "thl-check": None, "complementarity": None, "doctor": None,
    "pools": None, "see": None, "assets": None,
    "sweep": "the same `mutualrl sweep` command continues it: finished runs are reused, stopped ones resumed",
}


def command_name(argv: Sequence[str] | None) -> str | None:
    """The subcommand named on the command line (``sys.argv`` when ``argv`` is None)."""
    import sys

    words = list(sys.argv[1:] if argv is None else argv)
    return next((word for word in words if not word.startswith("-")), None)


def run_command(argv: Sequence[str] | None, debug: bool) -> int:
    """:func:`run`'s command, its errors said in one line."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="mutualrl", standalone_mode=False)
    except typer.TyperException as err:
        ctx = getattr(err, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        err_console.print(f"error: {where}{one_line(err.format_message())}", highlight=False, markup=False)
        return getattr(err, "exit_code", 2)
    except typer.Abort:
        err_console.print("aborted", highlight=False)
        return 130
    except OSError as err:
        if debug:
            raise
        disk = storage_error(err, err.filename or os.sep)  # a full disk: the path and the free space
        where = f": {err.filename}" if getattr(err, "filename", None) else ""
        err_console.print(f"error: {disk or f'{err.strerror or err}{where}'}", highlight=False, markup=False)
        return 1
    return result if isinstance(result, int) else 0


def working_dir_exists() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def main() -> None:
    """The ``mutualrl`` command: :func:`run`, then exit without the teardown of the libraries a command imported
    (~1 s of CPU per command for nothing once its output is written; :mod:`mutualrl.host.process_exit`)."""
    from mutualrl.host.process_exit import exit_without_teardown

    exit_without_teardown(run())


if __name__ == "__main__":
    main()
