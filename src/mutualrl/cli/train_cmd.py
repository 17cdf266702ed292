"""``mutualrl train``: train a pool of policies with a sharing regime."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from mutualrl.cli.common import ALLOW_CODE_HELP, check_output_path, console, report_errors, split_names
from mutualrl.config.field_table import flag_fields, option_help
from mutualrl.regimes.core.regime_spec import RegimeFlag, RegimeSpec
from mutualrl.regimes.core.registry import flag_setting, get_regime, regime_flags, regimes_help

REGIME_HELP = "Sharing regime: " + regimes_help() + ". Default: the recipe's."


def field_option(flag: str, **shown: Any) -> Any:
    """The option ``flag``, which sets one settings field: its help and lower bound are the field's declaration
    (``flag`` in its metadata, :func:`mutualrl.config.field_table.flag_fields`), written nowhere else; the recipe's
    value stands when it is not given."""
    declared = flag_fields()[flag]
    return typer.Option(flag, help=option_help(declared.help, declared.key), min=declared.bounds.get("ge"),
                        show_default=False, **shown)


def regime_option_help(spec: RegimeSpec, option: RegimeFlag) -> str:
    """A regime's own option's help: its spec's text, or else its settings field's help, for that regime only."""
    if option.help:
        return option.help
    declared = next(f for f in dataclasses.fields(spec.settings) if f.name == option.setting)
    return f"{spec.name.upper()} only: " + option_help(declared.metadata["help"],
                                                      f"regime.{spec.settings_key}.{option.setting}")


# The options of ``mutualrl train`` (Typer's ``Annotated`` style), so that its signature stays short.
POOL_HELP = "Pool name (see `mutualrl pools`) or a recipe YAML path. Default: tiny"
PoolOption = Annotated[str | None, typer.Option(
    "--pool", "-p", help=f"{POOL_HELP}; with --resume, the run's own settings.", show_default=False)]
SweepPoolOption = Annotated[str | None, typer.Option(
    "--pool", "-p", help=f"{POOL_HELP}, for every run of the sweep.", show_default=False)]
RegimeOption = Annotated[str | None, typer.Option("--regime", "-r", help=REGIME_HELP, show_default=False)]
OutputDirOption = Annotated[Path | None, typer.Option("--output-dir", "-o", help="Run folder (default: recipe's).")]
MaxStepsOption = Annotated[int | None, typer.Option(
    "--max-steps", min=1, help="Run length per policy in the recipe's unit: schedule.max_steps (paper steps in the "
    "paper recipes) when the recipe has a schedule, else grpo.max_steps (optimizer steps). The dry run shows both.")]
SeedOption = Annotated[int | None, typer.Option(
    "--seed", min=0, help="Seed shared by every policy (same prompts each step).")]
SetOption = Annotated[list[str], typer.Option(
    "--set", "-s", help="Override any recipe field: --set grpo.learning_rate=1e-6, --set "
    "'task.reward_funcs=\\[my_rewards.exact]' (repeatable).")]
# The options that set one settings field (launch.*): help and bounds from the field's declaration.
GpusOption = Annotated[int | None, field_option("--gpus")]
GpuMemoryOption = Annotated[float | None, field_option("--gpu-memory", metavar="GIB")]
RamOption = Annotated[float | None, field_option("--ram", metavar="GIB")]
DeviceMapOption = Annotated[str | None, typer.Option(
    "--device-map", help="Explicit placement, e.g. 'qwen-a=0,1;qwen-b=2,3' (overrides the even split). With "
    "--nodes, ids are global: machine k has k*gpus .. k*gpus+gpus-1.")]
NodesOption = Annotated[int | None, field_option("--nodes")]
MachineRankOption = Annotated[int | None, field_option("--machine-rank")]
MainAddressOption = Annotated[str | None, field_option("--main-address")]
DryRunOption = Annotated[bool, typer.Option(
    "--dry-run", help="Print placement, launch commands and resolved config; start and write nothing.")]
CheckRowsOption = Annotated[int | None, typer.Option(
    "--check-rows", min=0, metavar="N", help="With --dry-run: the go/no-go: every policy scores N training rows "
    "greedily first, and the dry run says each one's reward@1, how many of its failures a peer solves and what that "
    "means (nothing to learn, too easy, little to share, worth a sweep). Default: 32 where task.source is your own "
    "local rows, else none; 0 skips it.", show_default=False)]
CheckSaveOption = Annotated[Path | None, typer.Option(
    "--check-save", metavar="FILE", help="With --dry-run: also write the go/no-go's scores as an eval file, for "
    "`mutualrl complementarity FILE`'s full tables.", show_default=False)]
PreflightOption = Annotated[bool, typer.Option(
    "--preflight", help="Before a long run: plan it, write its folder and start every worker as the run would (its "
    "command, accelerate launch, environment) up to its first GPU touch: settings and digest, GRPOConfig, the "
    "DeepSpeed config, tokenizer, prompts, one batch scored, vLLM's argument checks; report per policy and delete "
    "it all. On any machine with --gpus N --gpu-memory GIB (a login node).")]
ForceOption = Annotated[bool, field_option("--force")]
SavePlanOption = Annotated[Path | None, typer.Option(
    "--save-plan", help="With --dry-run: also write the plan (placement, commands, per-policy GRPO "
    "fields) as JSON to this file.", show_default=False)]
ResumeOption = Annotated[bool, typer.Option(
    "--resume", help="Continue a stopped run from the last checkpoint every policy has (from step 0 when "
    "there is none), with the run's own settings; only max_steps, logging, saving, validation, launch and "
    "SEE timeouts may change.")]
OverwriteOption = Annotated[bool, typer.Option(
    "--overwrite", help="Delete an existing run folder (only a mutualrl run that is not live) and start again.")]
AllowCodeOption = Annotated[list[str], typer.Option("--allow-code", help="With --resume: " + ALLOW_CODE_HELP,
                                                   show_default=False)]
BaselineOption = Annotated[str | None, typer.Option(
    "--baseline", help="Then train this regime (e.g. standalone) with the same pool, seed and settings into "
    "<run>-<regime> and print both runs' held-out accuracy per policy and task group side by side, with the "
    "difference.", show_default=False)]


@report_errors
def train(
    pool: PoolOption = None,
    regime: RegimeOption = None,
    output_dir: OutputDirOption = None,
    max_steps: MaxStepsOption = None,
    seed: SeedOption = None,
    overrides: SetOption = [],  # noqa: B006 - Typer's default, never mutated
    gpus: GpusOption = None,
    gpu_memory: GpuMemoryOption = None,
    ram: RamOption = None,
    device_map: DeviceMapOption = None,
    nodes: NodesOption = None,
    machine_rank: MachineRankOption = None,
    main_address: MainAddressOption = None,
    dry_run: DryRunOption = False,
    preflight: PreflightOption = False,
    force: ForceOption = False,
    save_plan: SavePlanOption = None,
    resume: ResumeOption = False,
    overwrite: OverwriteOption = False,
    baseline: BaselineOption = None,
    allow_code: AllowCodeOption = [],  # noqa: B006 - Typer's default, never mutated
    check_rows: CheckRowsOption = None,
    check_save: CheckSaveOption = None,
    **regime_options: str | None,  # each regime's own options (RegimeSpec.flags), added by with_regime_flags
) -> None:
    """Train every policy of a pool concurrently with GRPO, exchanging experience through the SEE.

    With no options: the embedded `tiny` pool (two small models with different tokenizers) with SGT on CPU.
    `--baseline standalone` also trains standalone GRPO on the same seed and prints the comparison.
    Your own data: --set task.name=dataset --set task.source=DIR --set 'task.reward_funcs=\\[module.fn]'
    (docs/tasks.md); first with --dry-run: it scores the pool on 32 of your rows (the go/no-go).

    The progress line per policy: step done/total; reward: mean combined reward of the step's completions;
    val@1: held-out greedy reward@1; the regime's figures (SGT: rescues, prompts whose failed group got a
    peer's success this step, and gate, the share of prompts gated); H: mean token entropy.
    """
    if regime is not None:
        get_regime(regime, where="--regime")
    if baseline is not None:
        get_regime(baseline, where="--baseline")
    flags = {f.flag: regime_options[option_name(f.flag)] for _, f in regime_flags()}
    regime_overrides = [(flag, *flag_setting(flag, value)) for flag, value in flags.items() if value is not None]
    if output_dir is not None:
        check_output_path(output_dir, "--output-dir", kind="folder")
    if preflight and (dry_run or resume or baseline):
        from mutualrl.errors import UsageError

        raise UsageError("--preflight: checks a new run's workers; not with --dry-run, --resume or --baseline")
    if save_plan is not None:
        if not dry_run:
            from mutualrl.errors import UsageError

            raise UsageError("--save-plan: only with --dry-run (a real launch writes RUN/launch/plan.json itself)")
        check_output_path(save_plan, "--save-plan", kind="file", overwrite=overwrite)
    check_go_no_go_options(dry_run, check_rows, check_save, overwrite)
    from mutualrl.launch.run import TrainOptions, run_train

    options = TrainOptions(pool=pool, regime=regime, regime_overrides=regime_overrides, output_dir=output_dir,
                           max_steps=max_steps, seed=seed,
                           overrides=list(overrides), force=force, gpus=gpus, gpu_memory=gpu_memory, ram=ram,
                           device_map=device_map, nodes=nodes, machine_rank=machine_rank, main_address=main_address,
                           dry_run=dry_run, preflight=preflight, resume=resume, overwrite=overwrite,
                           baseline=baseline,
                           save_plan=save_plan, allow_code=split_names(allow_code), check_rows=check_rows,
                           check_save=check_save)
    raise typer.Exit(run_train(options, console))


def check_go_no_go_options(dry_run: bool, rows: int | None, save: Path | None, overwrite: bool | None) -> None:
    """``--check-rows`` and ``--check-save`` shape the dry run's go/no-go: only with ``--dry-run``; a file to save to
    that can be written (an existing one only with ``overwrite``; None: replaced, as ``sweep`` has no
    ``--overwrite``)."""
    from mutualrl.errors import UsageError
    from mutualrl.launch.pool_check import check_save_path

    for flag, value in (("--check-rows", rows), ("--check-save", save)):
        if value is not None and not dry_run:
            raise UsageError(f"{flag}: the go/no-go runs with --dry-run (a real launch starts training at once)")
    if save is not None:
        check_output_path(save, "--check-save", kind="file", overwrite=overwrite)
    check_save_path(save, rows)


def option_name(flag: str) -> str:
    """``--prp-denominator`` -> ``prp_denominator``, the parameter Typer passes it as."""
    return flag.removeprefix("--").replace("-", "_")


def with_regime_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with each regime's own options (:attr:`RegimeSpec.flags`) right after ``--regime``."""
    signature = inspect.signature(command, eval_str=True)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    after = [p.name for p in params].index("regime") + 1
    added = [inspect.Parameter(option_name(f.flag), inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str | None,
                               default=typer.Option(None, f.flag, help=regime_option_help(spec, f),
                                                    show_default=False))
             for spec, f in regime_flags()]
    command.__signature__ = signature.replace(parameters=[*params[:after], *added, *params[after:]])  # type: ignore[attr-defined]
    return command


with_regime_flags(train)
