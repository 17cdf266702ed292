"""Entry point of the ``mutualrl`` command."""

from __future__ import annotations

import typer

from mutualrl import __version__
from mutualrl.cli import assets_cmd, complementarity_cmd, eval_cmd, plot_cmd, pools_cmd, see_cmd, thl_cmd, train_cmd

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
app.add_typer(see_cmd.app, name="see")
app.add_typer(pools_cmd.app, name="pools")
app.command("plot")(plot_cmd.plot)
app.add_typer(assets_cmd.app, name="assets")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mutualrl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Mutual RL command line."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
