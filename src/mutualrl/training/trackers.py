"""Experiment trackers (``grpo.report_to``): installed before launch, and validation reaches them.

TRL logs training metrics to the trackers a recipe names in ``grpo.report_to``
(transformers' integration callbacks). What it does not do for us:

- check, before any process starts, that each named tracker's package is installed (a
  missing ``tensorboard`` otherwise crashes every worker at start): :func:`missing_trackers`;
- name each policy's run ``<run>/<policy>`` and group a run's policies (:func:`policy_run_name`,
  :func:`tracker_group_env`); keep a user's ``TENSORBOARD_LOGGING_DIR`` one folder per policy
  (:func:`tensorboard_dir_env`), so two policies never write one TensorBoard run;
- send our held-out validation (paper: "validation runs every 5 steps", reward@1 overall and
  per task) to them, since it is computed in a callback, outside TRL's ``log``:
  :func:`tracker_logs` and :func:`report_validation`;
- say where a tracker's write failed: a full disk under TensorBoard's event files (written
  from a background thread, the error surfacing at the next call) is the one-line "no space
  left on <logging dir>" error, as for metrics, not a traceback (:func:`guard_tracker_writes`).
  An error, not a warning: the event files are a record the user reads, and a gap in them
  would be silent.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

# Tracker name (transformers' report_to) -> the modules its callback imports (any one is enough).
TRACKER_MODULES: dict[str, tuple[str, ...]] = {
    "tensorboard": ("tensorboard", "tensorboardX"),
    "wandb": ("wandb",),
    "trackio": ("trackio",),
    "mlflow": ("mlflow",),
    "comet_ml": ("comet_ml",),
    "neptune": ("neptune",),
    "clearml": ("clearml",),
    "dvclive": ("dvclive",),
    "swanlab": ("swanlab",),
    "codecarbon": ("codecarbon",),
    "azure_ml": ("azureml",),
    "dagshub": ("dagshub",),
    "flyte": ("flytekit",),
    "kubeflow": ("kubeflow",),
}


#: Environment variable that groups a tracker's runs: every policy of a mutualrl run lands in one group / experiment.
TRACKER_GROUP_ENV: dict[str, str] = {"wandb": "WANDB_RUN_GROUP", "mlflow": "MLFLOW_EXPERIMENT_NAME"}


def policy_run_name(run: str, policy: str, shared: Mapping[str, Any], own: Mapping[str, Any]) -> str:
    """The tracker run name (GRPOConfig ``run_name``) of ``policy``: ``<run>/<policy>``.

    ``run`` is the run folder's name; a recipe's shared ``grpo.run_name`` replaces it as the prefix,
    and a policy's own ``grpo.run_name`` is used as it is.
    """
    if own.get("run_name"):
        return str(own["run_name"])
    return f"{shared.get('run_name') or run}/{policy}"


def tracker_group_env(report_to: Any, group: str, environ: Mapping[str, str]) -> dict[str, str]:
    """``WANDB_RUN_GROUP`` / ``MLFLOW_EXPERIMENT_NAME`` = ``group`` for the trackers ``report_to`` names,
    unless ``environ`` (the user's environment) already sets them."""
    names = tracker_names(report_to)
    return {var: group for tracker, var in TRACKER_GROUP_ENV.items()
            if (tracker in names or "all" in names) and not environ.get(var)}


TENSORBOARD_DIR_ENV = "TENSORBOARD_LOGGING_DIR"
"""transformers' TensorBoard callback writes here instead of ``<output_dir>/runs/<time>_<host>`` when it is set."""


def tensorboard_dir_env(environ: Mapping[str, str], run_name: str) -> dict[str, str]:
    """``TENSORBOARD_LOGGING_DIR`` for one policy process: the user's folder + ``run_name`` (``<run>/<policy>``).

    Set for the whole pool, the variable would put every policy's scalars into one TensorBoard run on one
    step axis (each policy's ``train/reward`` at step 1, 2, ... interleaved); empty when it is not set."""
    base = environ.get(TENSORBOARD_DIR_ENV)
    if not base:
        return {}
    return {TENSORBOARD_DIR_ENV: os.path.join(os.path.expanduser(base), *run_name.split("/"))}


def tracker_names(report_to: Any) -> list[str]:
    """``report_to`` as a list of tracker names (``"none"``, ``None`` and ``[]`` name none)."""
    if report_to is None or report_to == "none":
        return []
    if isinstance(report_to, str):
        return [report_to]
    return [str(name) for name in report_to if name != "none"]


def missing_trackers(report_to: Any) -> list[str]:
    """One message per named tracker that is unknown or whose package does not import."""
    problems = []
    for name in tracker_names(report_to):
        if name == "all":
            continue  # transformers picks the installed ones
        modules = TRACKER_MODULES.get(name)
        if modules is None:
            problems.append(f"grpo.report_to: unknown tracker {name!r} (known: {', '.join(TRACKER_MODULES)})")
            continue
        errors = []
        for module in modules:
            try:
                importlib.import_module(module)
                break
            except Exception as err:  # noqa: BLE001 - a broken install is as bad as a missing one
                errors.append(f"{module}: {type(err).__name__}: {err}")
        else:
            problems.append(f"grpo.report_to names {name!r}, which does not import ({'; '.join(errors)}); install "
                            f"it (`pip install {modules[0]}`) or drop it from report_to")
    return problems


def check_trackers(report_tos: Iterable[Any], fail: bool) -> list[str]:
    """:func:`missing_trackers` of several ``report_to`` values: raised (``fail``, before a launch) or returned."""
    problems = sorted({problem for report_to in report_tos for problem in missing_trackers(report_to)})
    if problems and fail:
        from mutualrl.errors import UsageError

        raise UsageError("; ".join(problems))
    return problems


def tracker_logs(metrics: dict[str, Any]) -> dict[str, float]:
    """Validation metrics as tracker logs: ``eval/reward@1`` -> ``eval_reward@1`` (trackers show ``eval/...``).

    transformers' trackers file ``eval_*`` keys under ``eval/`` and everything else under
    ``train/``; numbers only (``eval/n`` included).
    """
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = "eval_" + key[len("eval/"):] if key.startswith("eval/") else f"eval_{key}"
        out[name] = float(value)
    return out


def tracker_callbacks(callbacks: Iterable[Any], tracker_types: tuple[type, ...] | None = None) -> list[Any]:
    """The tracker (report_to) callbacks among a trainer's callbacks."""
    if tracker_types is None:
        from transformers.integrations import INTEGRATION_TO_CALLBACK

        tracker_types = tuple(INTEGRATION_TO_CALLBACK.values())
    return [cb for cb in callbacks if isinstance(cb, tracker_types)]


def report_validation(trainer: Any, state: Any, metrics: dict[str, Any],
                      tracker_types: tuple[type, ...] | None = None) -> int:
    """Send one validation's metrics to every tracker of ``trainer`` at ``state.global_step``; returns how many."""
    logs = tracker_logs(metrics)
    targets = tracker_callbacks(trainer.callback_handler.callbacks, tracker_types)
    for callback in targets:
        callback.on_log(trainer.args, state, trainer.control, logs=dict(logs))
    return len(targets)


def tracker_folder(callback: Any, args: Any) -> Path:
    """Where ``callback`` writes: its own logging dir (TensorBoard's), else the trainer's output folder."""
    return Path(getattr(callback, "logging_dir", None) or getattr(args, "logging_dir", None) or args.output_dir)


def guarded_event(method: Callable[..., Any], callback: Any) -> Callable[..., Any]:
    """``method`` (a tracker callback's ``on_*``) with a failed write raised as a one-line ``StorageError``."""
    from mutualrl import fault_injection
    from mutualrl.write_failures import storage_errors

    @functools.wraps(method)
    def call(args: Any, *rest: Any, **kwargs: Any) -> Any:
        folder = tracker_folder(callback, args)
        with storage_errors(folder):
            fault_injection.disk_full(folder)  # a full disk here: the hook naming the folder (e.g. "/runs/")
            return method(args, *rest, **kwargs)

    return call


def guard_tracker_writes(callbacks: Iterable[Any], tracker_types: tuple[type, ...] | None = None) -> int:
    """Wrap each event the tracker callbacks among ``callbacks`` handle (:func:`guarded_event`); returns how many."""
    from transformers import TrainerCallback

    guarded = 0
    for callback in tracker_callbacks(callbacks, tracker_types):
        for name in dir(type(callback)):
            if name.startswith("on_") and getattr(type(callback), name) is not getattr(TrainerCallback, name, None):
                setattr(callback, name, guarded_event(getattr(callback, name), callback))
                guarded += 1
    return guarded
