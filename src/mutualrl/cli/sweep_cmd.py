"""``mutualrl sweep``: regimes x grid settings x seeds of ``mutualrl train``, one run folder each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from mutualrl.cli.common import check_output_path, console, report_errors
from mutualrl.cli.train_cmd import (
    CheckRowsOption,
    CheckSaveOption,
    MaxStepsOption,
    SetOption,
    SweepPoolOption,
    check_go_no_go_options,
)


def int_list(text: str, option: str) -> list[int]:
    from mutualrl.errors import UsageError

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected whole numbers separated by commas, e.g. 1,2,3") from None
    if not values:
        raise UsageError(f"{option}: name at least one")
    return values


@report_errors
def sweep(
    output_dir: Path | None = typer.Option(None, "--output-dir", "-o", show_default=False,
                                           help="The sweep folder: one run folder per run in it "
                                           "(<regime>[-<setting><value>]-seed<seed>), and sweep.json. Required "
                                           "unless --plan-seeds."),
    regimes: str | None = typer.Option(None, "--regimes", help="Regimes, comma-separated (standalone,sgt,hacpo). "
                                       "Default: the --grid-file's, else standalone,sgt.", show_default=False),
    seeds: str | None = typer.Option(None, "--seeds", help="Seeds, comma-separated. Default: the --grid-file's, "
                                     "else 1,2,3.", show_default=False),
    grid: list[str] = typer.Option([], "--grid", help="A setting to vary: KEY=V1,V2 (repeatable; every combination "
                                   "is run), e.g. --grid grpo.learning_rate=1e-5,2e-5."),
    grid_file: Path | None = typer.Option(None, "--grid-file", help="A YAML with regimes, seeds, grid "
                                          "({key: [values]}) and set ([KEY=VALUE]).", show_default=False),
    pool: SweepPoolOption = None,
    max_steps: MaxStepsOption = None,
    overrides: SetOption = [],  # noqa: B006 - Typer's default, never mutated
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Runs at once on this machine (each run's policies "
                             "share its cores: jobs x policies <= cores)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what each run would do (reuse, resume, train) and "
                                 "its train command (with --slurm: the job array's resources too); start nothing."),
    slurm: bool = typer.Option(False, "--slurm", help="Submit the runs as one Slurm job array (submitit) instead "
                               "of running them here; the sweep folder must be on a filesystem the nodes share."),
    slurm_partition: str | None = typer.Option(None, "--slurm-partition", show_default=False,
                                               help="--slurm: the partition."),
    slurm_time: int | None = typer.Option(None, "--slurm-time", min=1, show_default=False,
                                          help="--slurm: minutes per run. Default: the high end of the runs' planned "
                                          "time (the dry run's Run time line) + 10 %, or 240 where none is "
                                          "estimated (a CPU pool)."),
    slurm_gpus: int | None = typer.Option(None, "--slurm-gpus", min=0, show_default=False,
                                          help="--slurm: GPUs per run. Default: what the runs ask for (launch.gpus, "
                                          "a device map; 0 for a CPU pool); a GPU pool that names no count "
                                          "(2qwen: DeepSpeed, vLLM) needs it given."),
    slurm_cpus: int | None = typer.Option(None, "--slurm-cpus", min=1, show_default=False,
                                          help="--slurm: CPU cores per run (sbatch --cpus-per-task). Default: 4 a "
                                          "GPU rank of the runs' plans, at least 4."),
    slurm_mem: int | None = typer.Option(None, "--slurm-mem", min=1, show_default=False,
                                         help="--slurm: memory per run in GB (sbatch --mem). Default: the "
                                         "partition's."),
    slurm_parallel: int = typer.Option(8, "--slurm-parallel", min=1, help="--slurm: array tasks at once."),
    check_rows: CheckRowsOption = None,
    check_save: CheckSaveOption = None,
    slurm_local: bool = typer.Option(False, "--slurm-local", help="--slurm: submitit's local executor (the same "
                                     "array as processes here; to try a submission without Slurm)."),
    plan_seeds: str | None = typer.Option(None, "--plan-seeds", show_default=False,
                                          help="Plan, run nothing: seeds x prompts for 80% power at --min-effect with "
                                          "the report's test of the task claim, from a pilot sweep's folder (a "
                                          "range: its variance components, then their 90% upper limits) or "
                                          "finite stated variances seed=V,prompt=V,interaction=V."),
    min_effect: float | None = typer.Option(None, "--min-effect", show_default=False,
                                            help="--plan-seeds: the smallest Δ that would matter (> 0)."),
    plan_prompts: str | None = typer.Option(None, "--plan-prompts", show_default=False,
                                            help="--plan-seeds: numbers of held-out prompts to plan for, "
                                            "comma-separated (default: the pilot's, 2x and 5x; else 100,200,500)."),
    plan_comparisons: int | None = typer.Option(None, "--plan-comparisons", min=1, show_default=False,
                                                help="--plan-seeds: the headline comparisons the sweep's table will "
                                                "make (Holm's family; default: the pilot's, else 1)."),
) -> None:
    """Train every combination of regimes, --grid settings and seeds with `mutualrl train`'s own options, each into
    its own run folder under -o. Paths (-o, task.source, a recipe) are read from the folder you run it in.

    Run it again after a stop: finished runs with the same settings, code and data are reused, stopped ones
    resumed, and a run whose settings changed is refused, naming the difference. Then: mutualrl report SWEEP;
    mutualrl plot --group-by regime SWEEP.
    """
    from mutualrl.errors import UsageError

    if any(value is not None for value in (plan_seeds, min_effect, plan_prompts, plan_comparisons)):
        raise typer.Exit(print_plan(plan_seeds, min_effect, plan_prompts, plan_comparisons))
    if output_dir is None:
        raise UsageError("--output-dir / -o: name the sweep's folder (or plan it first: --plan-seeds)")
    check_output_path(output_dir, "--output-dir", kind="folder")
    check_go_no_go_options(dry_run, check_rows, check_save, None)
    spec = sweep_spec(output_dir, regimes, seeds, grid, grid_file, pool, max_steps, overrides)
    check_regimes(spec.regimes)
    options = slurm_options(slurm, slurm_partition, slurm_time, slurm_gpus, slurm_cpus, slurm_mem, slurm_parallel,
                            slurm_local)
    raise typer.Exit(launch(spec, jobs, dry_run, options, (check_rows, check_save)))


def sweep_spec(output_dir: Path, regimes: str | None, seeds: str | None, grid: list[str], grid_file: Path | None,
               pool: str | None, max_steps: int | None, overrides: list[str]) -> Any:
    """The sweep the options and the ``--grid-file`` describe (the options first)."""
    from mutualrl.launch.run import DEFAULT_POOL
    from mutualrl.launch.sweep.grid import SweepSpec, parse_grid, read_grid_file

    from_file = read_grid_file(grid_file) if grid_file is not None else {"regimes": [], "seeds": [], "grid": [],
                                                                          "set": []}
    return SweepSpec(
        folder=output_dir.absolute(),
        regimes=[r.strip() for r in regimes.split(",") if r.strip()] if regimes else from_file["regimes"]
        or ["standalone", "sgt"],
        seeds=int_list(seeds, "--seeds") if seeds else from_file["seeds"] or [1, 2, 3],
        grid=[*from_file["grid"], *parse_grid(grid)], pool=pool or DEFAULT_POOL, max_steps=max_steps,
        sets=[*from_file["set"], *overrides])


def go_no_go(spec: object, point: object, rows: int | None, save: Path | None) -> None:
    """The dry run's go/no-go (launch/pool_check.py) on the first run's settings: every run of the sweep trains the
    same pool on the same rows."""
    from mutualrl.launch.pool_check import check_rows_for, run_pool_check
    from mutualrl.launch.run import check_local_rows
    from mutualrl.launch.sweep.grid import resolved_config

    config = resolved_config(spec, point)  # type: ignore[arg-type]
    _, train = check_local_rows(config, console)
    run_pool_check(config, check_rows_for(rows, train is not None), console, train, save, asked=rows is not None)


def print_plan(source: str | None, effect: float | None, prompts: str | None, comparisons: int | None) -> int:
    """``--plan-seeds``: print the plan (:mod:`mutualrl.evaluation.seed_plan`); both options or neither."""
    from mutualrl.errors import UsageError
    from mutualrl.evaluation.seed_plan import plan_lines

    if source is None or effect is None:
        raise UsageError("--plan-seeds and --min-effect go together (--plan-prompts and --plan-comparisons only with "
                         "them): --plan-seeds PILOT_OR_VARIANCES --min-effect 0.05")
    counts = int_list(prompts, "--plan-prompts") if prompts else None
    if counts and min(counts) < 2:
        raise UsageError("--plan-prompts: at least 2 prompts each")
    for line in plan_lines(source, effect, counts, comparisons):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    return 0


def check_regimes(regimes: list[str]) -> None:
    from mutualrl.regimes.core.registry import get_regime

    for regime in regimes:
        get_regime(regime, where="--regimes")


def slurm_options(slurm: bool, partition: str | None, time_min: int | None, gpus: int | None, cpus: int | None,
                  mem: int | None, parallel: int, local: bool) -> object | None:
    """The array's resources when --slurm is given (None: run here; the --slurm-* options that need --slurm are
    refused without it). GPUs None: what the runs ask for, decided when the sweep is planned."""
    from mutualrl.errors import UsageError

    if not slurm:
        given = [name for name, value in (("--slurm-local", local), ("--slurm-gpus", gpus is not None),
                                          ("--slurm-mem", mem is not None), ("--slurm-partition", partition))
                 if value]
        if given:
            raise UsageError(f"{given[0]}: only with --slurm")
        return None
    from mutualrl.launch.sweep.slurm import SlurmOptions

    return SlurmOptions(partition=partition, time_min=time_min, gpus_per_task=gpus, cpus_per_task=cpus, mem_gb=mem,
                        parallel=parallel, local=local)


def launch(spec: object, jobs: int, dry_run: bool, slurm: object | None,
           check: tuple[int | None, Path | None] = (None, None)) -> int:
    """Run, submit or (``dry_run``) plan the sweep; a dry run ends with the go/no-go (``check``: ``--check-rows``,
    ``--check-save``)."""
    import shlex

    from mutualrl.launch.sweep.grid import plan_sweep, run_sweep

    if dry_run:
        if slurm is not None:  # the array's resources and cache, checked and said as a submission would
            from mutualrl.launch.sweep.slurm import plan_array

            states = plan_array(spec, slurm, console, dry_run=True)[1]  # type: ignore[arg-type]
            points = spec.points()  # type: ignore[attr-defined]
        else:  # a dry run writes nothing: no sweep folder, no sweep.json
            points, states = plan_sweep(spec, console, dry_run=True)  # type: ignore[arg-type]
        for point in points:
            console.print(f"  {point.name}: {states[point.name]}: "
                          f"{shlex.join(['mutualrl', 'train', *spec.argv(point, states[point.name] == 'resume')])}",  # type: ignore[attr-defined]
                          highlight=False, soft_wrap=True, markup=False)
        go_no_go(spec, points[0], *check)
        return 0
    if slurm is not None:
        from mutualrl.launch.sweep.slurm import submit_sweep

        submit_sweep(spec, slurm, console)  # type: ignore[arg-type]
        return 0
    return run_sweep(spec, console, jobs)  # type: ignore[arg-type]
