"""``mutualrl sweep``: a grid of ``mutualrl train`` runs (regimes x grid settings x seeds), one run folder each
under one sweep folder.

Every run is ``mutualrl train`` itself, started in the caller's working directory (so ``task.source=data`` and
``my_rewards.exact`` mean what they mean to ``train``), with ``-o SWEEP/<name>``. Before a run starts, its folder
decides what happens (the rule of ``--baseline``): a run that finished with the same resolved settings, code and
data is reused; a run with the same settings that did not finish is resumed; a run with other settings is refused,
naming the difference. Running the same command again after a stop therefore continues the sweep.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from mutualrl.atomic_io import write_json_atomic
from mutualrl.errors import UsageError
from mutualrl.output_guards import folder_inside, open_append_inside, refuse_links_below
from mutualrl.run_folder import RunPaths

SWEEP_RECORD = "sweep.json"
#: Where each run's output goes when several run at once (one at a time: the terminal).
LOGS_DIR = "logs"
#: What a refused run's message ends with.
SWEEP_REUSE_HINT = ("mutualrl sweep reuses a run only when it finished with the same settings, code and data: sweep "
                    "into another folder (-o), or delete that run folder to train it again")
NO_REWARD_STOP = "task.stop_after_no_reward_steps"
#: What every run of a sweep gets unless a --set or --grid names the key: the no-reward stop off. The stop counts a
#: peer's success as signal (SGT, PRP), so on a task where one policy never scores alone it would stop the standalone
#: baseline and spare the sharing regimes: the comparison would lose its baseline.
SWEEP_DEFAULTS = (f"{NO_REWARD_STOP}=0",)


@dataclass(frozen=True)
class SweepPoint:
    """One run of the grid: its folder name and what it adds to the common options."""

    name: str
    regime: str
    seed: int
    sets: tuple[str, ...] = ()  # KEY=VALUE of the grid's settings


@dataclass
class SweepSpec:
    folder: Path
    regimes: list[str]
    seeds: list[int]
    grid: list[tuple[str, list[str]]] = field(default_factory=list)  # (key, values): every combination
    pool: str = "tiny"  # train's own options, the same for every run (the pool always named: it names the code)
    max_steps: int | None = None
    sets: list[str] = field(default_factory=list)

    def points(self) -> list[SweepPoint]:
        """Regimes x grid combinations x seeds, seeds innermost (a stopped sweep has whole seeds of a setting)."""
        keys = [key for key, _ in self.grid]
        combos = list(itertools.product(*[values for _, values in self.grid])) if self.grid else [()]
        out = []
        for regime in self.regimes:
            for combo in combos:
                sets = tuple(f"{key}={value}" for key, value in zip(keys, combo, strict=True))
                tag = "".join(f"-{key.rsplit('.', 1)[-1]}{value}" for key, value in zip(keys, combo, strict=True))
                for seed in self.seeds:
                    out.append(SweepPoint(folder_name(f"{regime}{tag}-seed{seed}"), regime, seed, sets))
        return out

    def argv(self, point: SweepPoint, resume: bool = False) -> list[str]:
        """``mutualrl train``'s arguments for ``point`` (after ``train``)."""
        sets = [arg for item in self.run_sets(point) for arg in ("--set", item)]
        common = ["--pool", self.pool, *(["--max-steps", str(self.max_steps)] if self.max_steps is not None else [])]
        return ["--regime", point.regime, "--seed", str(point.seed), *common, *sets,
                "-o", str(self.folder / point.name), *(["--resume"] if resume else [])]

    def run_sets(self, point: SweepPoint) -> list[str]:
        """``point``'s ``--set`` items: :data:`SWEEP_DEFAULTS` whose key no set or grid value names, then the
        sweep's, then the grid's."""
        given = [*self.sets, *point.sets]
        return [*[item for item in SWEEP_DEFAULTS if set_key(item) not in map(set_key, given)], *given]

    def defaults_taken(self) -> list[str]:
        """The :data:`SWEEP_DEFAULTS` every run gets (no set nor grid names their key)."""
        named = {set_key(item) for item in self.sets} | {key for key, _ in self.grid}
        return [item for item in SWEEP_DEFAULTS if set_key(item) not in named]


def set_key(item: str) -> str:
    """The setting a ``--set KEY=VALUE`` item names."""
    return item.partition("=")[0].strip()


def folder_name(text: str) -> str:
    """A run folder's name from its settings: letters, digits, ``.``, ``-``, ``_``, ``=`` kept."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text)[:200]


def parse_grid(items: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``--grid grpo.learning_rate=1e-5,2e-5`` -> ``[("grpo.learning_rate", ["1e-5", "2e-5"])]``."""
    grid = []
    for item in items:
        key, sep, values = item.partition("=")
        parts = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not parts:
            raise UsageError(f"--grid {item!r}: expected KEY=VALUE1,VALUE2 (e.g. grpo.learning_rate=1e-5,2e-5)")
        grid.append((key.strip(), parts))
    return grid


def read_grid_file(path: Path) -> dict[str, Any]:
    """A small YAML: ``regimes: [...]``, ``seeds: [...]``, ``grid: {key: [values]}``, ``set: [KEY=VALUE]``."""
    from mutualrl.config.yaml_strict import load_yaml

    if not path.is_file():
        raise UsageError(f"--grid-file {path}: no such file")
    data = load_yaml(path.read_text(encoding="utf-8"), str(path)) or {}
    allowed = {"regimes", "seeds", "grid", "set"}
    if not isinstance(data, dict) or set(data) - allowed:
        raise UsageError(f"--grid-file {path}: expected a mapping with keys {', '.join(sorted(allowed))}; got "
                         f"{', '.join(sorted(map(str, set(data) - allowed))) if isinstance(data, dict) else data!r}")
    grid = data.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise UsageError(f"--grid-file {path}: grid: expected a mapping of setting -> list of values")
    for key, values in grid.items():
        grid_list(path, f"grid.{key}", values, (str, int, float, bool), "text, a number or true/false")
    return {"regimes": grid_list(path, "regimes", data.get("regimes"), (str,), "a regime's name"),
            "seeds": grid_list(path, "seeds", data.get("seeds"), (int,), "a whole number"),
            "grid": [(str(k), [str(v) for v in vs]) for k, vs in grid.items()],
            "set": grid_list(path, "set", data.get("set"), (str,), "KEY=VALUE")}


def grid_list(path: Path, field_name: str, value: Any, types: tuple[type, ...], what: str) -> list[Any]:
    """``value`` as a list of ``types`` (missing: empty), else one line naming the file, the field and the item.

    Typed strictly because a loose conversion ran something else than written: ``int(1.7)`` made seed 1, and
    ``seeds: [abc]`` was a traceback; true is not a seed (a bool is an int to Python)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise UsageError(f"--grid-file {path}: {field_name}: expected a list, got {type(value).__name__} "
                         f"{str(value)[:80]!r}")
    for item in value:
        if not isinstance(item, types) or (bool not in types and isinstance(item, bool)):
            raise UsageError(f"--grid-file {path}: {field_name}: {str(item)[:80]!r} ({type(item).__name__}) is not "
                             f"{what}")
    return list(value)


def point_state(spec: SweepSpec, point: SweepPoint, console: Console) -> str:
    """``new``, ``resume`` or ``reused`` for ``point``'s folder; a run there with other settings is refused."""
    from mutualrl.launch.run import reuse_finished

    paths = RunPaths(spec.folder / point.name)
    if not paths.config.is_file():
        refuse_without_config(paths, point)
        return "new"  # no folder, or a start that failed before training began: train starts it again
    config = resolved_config(spec, point)
    if reuse_finished(paths, config, console, SWEEP_REUSE_HINT, again="delete its folder to train it again"):
        return "reused"
    return "resume"


def refuse_without_config(paths: RunPaths, point: SweepPoint) -> None:
    """A run folder ``train`` can neither start nor resume (files but no ``config.yaml``) is said before any run
    starts, with what to do, instead of a failed run whose message would send the user back to the same command."""
    from mutualrl.launch.rundir.prepare import without_config

    problem = without_config(paths)
    if problem is not None:
        raise UsageError(f"sweep run {point.name}: {problem} (then run the sweep again)")


def resolved_config(spec: SweepSpec, point: SweepPoint) -> Any:
    """The config ``mutualrl train`` resolves for ``point`` (nothing started)."""
    from mutualrl.launch.run import TrainOptions, resolve_config

    options = TrainOptions(pool=spec.pool, regime=point.regime, seed=point.seed, max_steps=spec.max_steps,
                           overrides=spec.run_sets(point), output_dir=spec.folder / point.name)
    return resolve_config(options)[0]


def check_point(spec: SweepSpec, point: SweepPoint, gpus: int | None) -> Any:
    """``point``'s settings resolved and its launch planned as ``mutualrl train --dry-run`` does (``gpus``: on a
    simulated node of that many GPUs, as ``--gpus`` does: a cluster's task; None: this machine), so that a setting
    ``train`` refuses at once is refused before any run starts or is submitted, naming the run; the plan."""
    import dataclasses

    from mutualrl.config.typed import ConfigError
    from mutualrl.errors import MutualRLError
    from mutualrl.launch.run import plan_without_launch

    try:
        config = resolved_config(spec, point)
        if gpus is not None:
            config = dataclasses.replace(config, launch=dataclasses.replace(config.launch, gpus=gpus))
        return plan_without_launch(config, spec.folder / point.name)
    except (ConfigError, MutualRLError) as err:
        raise UsageError(f"sweep run {point.name} ({shlex.join(['mutualrl', 'train', *spec.argv(point)])}) would "
                         f"be refused by train: {err}") from None


@dataclass
class Started:
    point: SweepPoint
    process: subprocess.Popen
    started: float
    log: Any = None  # the open log file when several run at once


def train_command(spec: SweepSpec, point: SweepPoint, resume: bool) -> list[str]:
    # -P (safe path): the sweep's working directory is not put first on the run's sys.path; the user's modules a
    # recipe names are still found there (config/plugins.py imports them by name)
    return [sys.executable, "-P", "-m", "mutualrl", "train", *spec.argv(point, resume)]


def write_record(spec: SweepSpec, points: list[SweepPoint], states: dict[str, str],
                 extra: dict[str, Any] | None = None) -> None:
    """``SWEEP/sweep.json``: the grid, where it was run from, the asset cache, each run's train command (what a
    cluster job runs), and ``extra`` (a cluster sweep's resources and the assets its runs read)."""
    from mutualrl.assets.cache import cache_root

    write_json_atomic(spec.folder / SWEEP_RECORD, {
        "format": 1, "cwd": str(Path.cwd()), "regimes": spec.regimes, "seeds": spec.seeds,
        "cache": {"folder": str(cache_root())},
        "grid": {key: values for key, values in spec.grid}, "pool": spec.pool, "max_steps": spec.max_steps,
        "set": spec.sets, "runs": {p.name: {"regime": p.regime, "seed": p.seed, "set": list(p.sets),
                                            "state": states[p.name],
                                            "train": shlex.join(["mutualrl", "train", *spec.argv(p)])}
                                   for p in points}, **(extra or {})})


def plan_sweep(spec: SweepSpec, console: Console, extra: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
               *, dry_run: bool = False, gpus: int | None = None, plans: dict[str, Any] | None = None,
               ) -> tuple[list[SweepPoint], dict[str, str]]:
    """Every run's state and settings, checked before anything starts (a changed run, or a setting ``train`` would
    refuse, is refused here), and the record (with ``extra``, or what it returns once every run is planned);
    ``dry_run``: the same checks, nothing written. ``gpus``: each run's launch planned on a node of that many GPUs
    (a cluster's task), not on this machine. ``plans``: given, filled with the launch plan of each run to train."""
    points = spec.points()
    if len({p.name for p in points}) != len(points):
        raise UsageError("mutualrl sweep: two runs of the grid get the same folder name; give the grid's values "
                         "names that differ in letters or digits")
    if not dry_run:
        spec.folder.mkdir(parents=True, exist_ok=True)
    for point in points:  # a run folder or log planted as a link would take that run's writes out of the sweep
        refuse_links_below(spec.folder, spec.folder / point.name)
        refuse_links_below(spec.folder, spec.folder / LOGS_DIR / f"{point.name}.log")
    from mutualrl.launch.sweep.live import live_line, live_runs

    with console.status("checking the sweep folder's runs ..."):
        states = {p.name: point_state(spec, p, console) for p in points}
        # a run a launch has now (its lock, or its submitted job): left to it, never started a second time
        live, cannot_ask = live_runs(spec.folder, [p.name for p in points if states[p.name] != "reused"])
        states.update({name: "live" for name in live})
        for point in points:
            if states[point.name] not in ("reused", "live"):
                planned = check_point(spec, point, gpus)
                if plans is not None:
                    plans[point.name] = planned
    if not dry_run:
        write_record(spec, points, states, extra() if callable(extra) else extra)
    counts = {state: sum(s == state for s in states.values()) for state in ("reused", "resume", "new", "live")}
    live_count = f", {counts['live']} live" if counts["live"] else ""
    console.print(f"[bold]mutualrl sweep[/] {len(points)} runs ({len(spec.regimes)} regimes x "
                  f"{len(points) // max(1, len(spec.regimes) * len(spec.seeds))} settings x {len(spec.seeds)} seeds) "
                  f"in {spec.folder}: {counts['reused']} finished (reused), {counts['resume']} to resume, "
                  f"{counts['new']} to train{live_count}", highlight=False, soft_wrap=True)
    for line in [*([cannot_ask] if cannot_ask else []), *(live_line(name, why) for name, why in live.items()),
                 *stop_rule_lines(spec)]:
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    return points, states


def stop_rule_lines(spec: SweepSpec) -> list[str]:
    """What the plan says of the no-reward stop: off in every run (:data:`SWEEP_DEFAULTS`), or, turned on by a set,
    that it judges a regime that reads no peer apart from one that learns from peers' successes."""
    from mutualrl.regimes.core.registry import get_regime

    if spec.defaults_taken():
        return [f"every run: {NO_REWARD_STOP}=0 (a sweep trains each run to its end: the stop for no reward counts a "
                "peer's success as signal, so it would stop a baseline that reads no peer where the sharing regimes "
                f"go on; --set {NO_REWARD_STOP}=N turns it on for every run)"]
    values = [item.partition("=")[2].strip() for item in spec.sets if set_key(item) == NO_REWARD_STOP][-1:]
    values = values or [value for key, grid_values in spec.grid if key == NO_REWARD_STOP for value in grid_values]
    if all(value.lower() in ("0", "null", "none", "~") for value in values):
        return []
    alone = [name for name in spec.regimes if not get_regime(name).needs_peers]
    sharing = [name for name in spec.regimes if get_regime(name).needs_peers]
    if not alone or not sharing:
        return []
    return [f"warning: {NO_REWARD_STOP} is on: a run of {', '.join(alone)} is stopped after that many steps in which "
            f"its own completions score nothing, a run of {', '.join(sharing)} only when its peers' do not score "
            f"either; a policy that never scores alone leaves the report without its baseline ({NO_REWARD_STOP}=0 "
            "keeps every run to its end)"]


def run_sweep(spec: SweepSpec, console: Console, jobs: int = 1) -> int:
    """Train every run of the grid that is not finished, ``jobs`` at a time; 0 when every run finished."""
    points, states = plan_sweep(spec, console)
    todo = [p for p in points if states[p.name] not in ("reused", "live")]
    live = [p.name for p in points if states[p.name] == "live"]
    done = len(points) - len(todo) - len(live)
    failed: list[str] = []

    def finished(point: SweepPoint, code: int, seconds: float) -> None:
        nonlocal done
        if code == 0:
            done += 1
        else:
            failed.append(point.name)
        what = "finished" if code == 0 else f"stopped (exit {code})"
        console.print(f"[bold]sweep[/] {point.name}: {what} in {seconds:.0f}s; {done}/{len(points)} runs finished",
                      highlight=False)

    from mutualrl.launch.supervise.signals import stop_signals

    try:
        with stop_signals():  # Ctrl-C, SIGTERM (a scheduler), SIGHUP: the runs going are stopped, then we stop
            run_points(spec, todo, states, jobs, console, finished)
    except KeyboardInterrupt:
        console.print(f"[yellow]sweep interrupted[/]: {done}/{len(points)} runs finished; the same command "
                      "continues it (finished runs are reused, stopped ones resumed)", highlight=False, soft_wrap=True)
        return 130
    if failed:
        console.print(f"[red]sweep:[/] {len(failed)} run(s) did not finish: {', '.join(failed)} (their logs: "
                      f"{spec.folder}/<run>/logs/); {failed_advice(spec, failed)}", highlight=False, soft_wrap=True)
        return 1
    if live:
        console.print(f"sweep: {done}/{len(points)} runs finished; {len(live)} live, left to the launch that has "
                      f"{'them' if len(live) > 1 else 'it'} ({', '.join(live)}): the same command reuses "
                      f"{'them' if len(live) > 1 else 'it'} once finished", highlight=False, soft_wrap=True,
                      markup=False)
        return 1
    console.print(f"sweep finished: {len(points)} runs in {spec.folder}; the table: mutualrl report "
                  f"{shlex.quote(str(spec.folder))}; the figure: mutualrl plot --group-by regime "
                  f"{shlex.quote(str(spec.folder))}", highlight=False, soft_wrap=True, markup=False)
    return 0


def failed_advice(spec: SweepSpec, failed: list[str]) -> str:
    """What to do about the runs that did not finish: the same command resumes them, except a run the no-reward stop
    ended, which the same command would stop again."""
    from mutualrl.launch.rundir.record import read_record
    from mutualrl.training.reward_signal_watch import NO_REWARD

    unscored = [name for name in failed if NO_REWARD in str(read_record(RunPaths(spec.folder / name)).get("reason"))]
    others = [name for name in failed if name not in unscored]
    advice = [f"the same command resumes {', '.join(others)}"] if others else []
    if unscored:
        advice.append(f"{', '.join(unscored)} stopped because nothing scored ({NO_REWARD_STOP}), and the same command "
                      f"would stop {'them' if len(unscored) > 1 else 'it'} again: add --set {NO_REWARD_STOP}=0 to it "
                      "to train every run to its end (a resume may change that setting)")
    return "; ".join(advice)


def run_points(spec: SweepSpec, todo: list[SweepPoint], states: dict[str, str], jobs: int, console: Console,
               finished: Callable[[SweepPoint, int, float], None]) -> None:
    """Start ``todo`` in order, at most ``jobs`` at once; one at a time the run's own progress shows in the
    terminal, several at once each writes to ``SWEEP/logs/<run>.log``. A stop (Ctrl-C) stops the runs going."""
    running: list[Started] = []
    queue = list(todo)
    try:
        while queue or running:
            while queue and len(running) < jobs:
                point = queue.pop(0)
                running.append(start_point(spec, point, states[point.name] == "resume", jobs, console))
            time.sleep(0.2 if jobs > 1 else 0)
            for item in [r for r in running if (r.process.wait() if jobs == 1 else r.process.poll()) is not None]:
                running.remove(item)
                if item.log is not None:
                    item.log.close()
                finished(item.point, item.process.returncode, time.perf_counter() - item.started)
    except KeyboardInterrupt:
        stop_all(running, console)
        raise


def start_point(spec: SweepSpec, point: SweepPoint, resume: bool, jobs: int, console: Console) -> Started:
    command = train_command(spec, point, resume)  # python -P -m mutualrl train ...: shown from "mutualrl"
    console.print(f"[bold]sweep[/] {escape(point.name)}: {'resuming' if resume else 'training'} "
                  f"({escape(shlex.join(command[3:]))})", highlight=False, soft_wrap=True)
    log = None
    if jobs > 1:
        logs = folder_inside(spec.folder, LOGS_DIR)
        log = os.fdopen(open_append_inside(logs / f"{point.name}.log"), "ab")  # closed when the run ends
    from mutualrl.host.parent_death import die_with_parent

    # a kill -9 of the sweep stops the run as a Ctrl-C of it does (SIGTERM: the run's own stop, resumable)
    from mutualrl.launch.rundir.summary import SWEEP_RUN_ENV

    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT if log else None,
                               env={**os.environ, SWEEP_RUN_ENV: "1"},  # its stop: the sweep's resume line only
                               preexec_fn=die_with_parent())  # noqa: PLW1509 - only prctl and getppid run there
    return Started(point, process, time.perf_counter(), log)


def stop_all(running: list[Started], console: Console | None = None) -> None:
    """A stop: each run still going gets SIGTERM (it stops its workers and records itself as interrupted; a SIGINT
    would be ignored by a run started from a background sweep) and is waited for as long as its own stop takes: the
    run bounds that itself (its grace and the wait for a save in progress: launch/supervise/stop_grace.py), and a save
    may take minutes. Another stop signal kills the runs at once."""
    import signal

    going = [item for item in running if item.process.poll() is None]
    for item in going:
        item.process.send_signal(signal.SIGTERM)
    if going and console is not None:
        names = escape(", ".join(item.point.name for item in going))
        console.print(f"[yellow]sweep: stopping {names}: each saves its step in flight; another Ctrl-C stops at "
                      f"once[/]", highlight=False, soft_wrap=True)
    try:
        for item in going:
            item.process.wait()
    except KeyboardInterrupt:
        for item in going:
            if item.process.poll() is None:
                item.process.kill()
        for item in going:
            item.process.wait()
