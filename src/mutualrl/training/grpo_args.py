"""Each policy's ``trl.GRPOConfig`` arguments: the fields mutualrl owns, and the worker's copy of the plan.

The launch plan is the one place where a policy's GRPO arguments are decided, in one merge
(:func:`mutualrl.launch.plan.launch_plan.make_launch_plan`: recipe ``grpo`` < the policy's ``grpo`` < the fields
device adaptation, batch derivation, cadence and the checkpoints resume keeps decide < :func:`owned_grpo_fields`).
It writes them, final, to
``RUN/launch/<policy>.grpo.json``, and the worker passes that mapping to ``GRPOConfig`` as it is
(:func:`planned_grpo_args`): no field is merged or recomputed twice. Only a worker started by hand on a run
folder that was never planned builds them here (:func:`unplanned_grpo_args`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, UsageError
from mutualrl.run_folder import RunPaths, read_bytes, read_json
from mutualrl.training.trackers import policy_run_name
from mutualrl.ops.watchdog import LAUNCHER_PID_ENV

PLANNED_BY_MUTUALRL = ("output_dir", "run_name", "report_to", "disable_tqdm")
"""The fields :func:`owned_grpo_fields` adds: a planned file without them predates this module's rule."""
PLANNED_GRPO_ENV = "MUTUALRL_PLANNED_GRPO_SHA256"
"""The sha256 of the ``<policy>.grpo.json`` the launcher wrote, in its worker's environment: the worker takes that
file only with those bytes (a run folder is data; the launcher's own plan decides the worker's GRPOConfig)."""


def planned_grpo_text(grpo: dict[str, Any]) -> str:
    """The bytes of ``RUN/launch/<policy>.grpo.json`` as the launcher writes them."""
    return json.dumps(grpo, indent=2, sort_keys=True) + "\n"


def planned_grpo_env(text: str) -> dict[str, str]:
    """The worker environment naming the digest of ``text``, the bytes of :func:`planned_grpo_text`."""
    return {PLANNED_GRPO_ENV: hashlib.sha256(text.encode("utf-8")).hexdigest()}


def owned_grpo_fields(run_dir: Path, policy: str, shared: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The GRPOConfig fields mutualrl owns for ``policy``, only those: ``run_name``, ``output_dir``, defaults.

    ``run_name``: the tracker run ``<run>/<policy>`` (:func:`~mutualrl.training.trackers.policy_run_name`, from
    the recipe's ``shared`` and the policy's ``own`` fields); ``output_dir``: the policy's folder under the run
    folder (a recipe may not set it: ``config.validate.RESERVED_GRPO_FIELDS``); ``report_to`` none and
    ``disable_tqdm`` (the launcher shows one progress line per policy) unless the recipe sets them.
    """
    owned: dict[str, Any] = {"run_name": policy_run_name(run_dir.name, policy, shared, own),
                             "output_dir": str(RunPaths(run_dir).policy_dir(policy))}
    for key, default in (("report_to", []), ("disable_tqdm", True)):
        if key not in shared and key not in own:
            owned[key] = default
    return owned


def planned_grpo_args(paths: RunPaths, policy: str, unplanned: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The GRPOConfig arguments the launch plan decided for ``policy`` (``RUN/launch/<policy>.grpo.json``).

    Without a plan (a worker started by hand) ``unplanned()`` gives them; one the launcher wrote and that is gone,
    or that an older mutualrl wrote (without :data:`PLANNED_BY_MUTUALRL`), is an error saying how to plan again.
    A worker its launcher started takes the file only with the digest the launcher gave it (:data:`PLANNED_GRPO_ENV`).
    """
    path = paths.planned_grpo(policy)
    if not path.exists():
        if os.environ.get(LAUNCHER_PID_ENV):  # the launcher wrote it: gone means deleted, not "no plan"
            raise UsageError(f"{path}: the launch plan of policy {policy!r} was deleted after the launch (the run "
                             "folder's launch/ folder?); `mutualrl train --resume` plans the run again")
        return unplanned()
    digest = os.environ.get(PLANNED_GRPO_ENV)
    planned = verified_plan(path, policy, digest) if digest else read_json(path)  # no digest: started by hand
    missing = [key for key in PLANNED_BY_MUTUALRL if key not in planned]
    if missing:
        raise UsageError(f"{path}: planned by an older mutualrl (no {', '.join(missing)}); "
                         "`mutualrl train --resume` plans the run again")
    return planned


def verified_plan(path: Path, policy: str, digest: str) -> dict[str, Any]:
    """The planned GRPOConfig arguments in ``path``, once its bytes hash to the launcher's ``digest``: read once,
    so the bytes checked are the bytes parsed."""
    data = read_bytes(path)
    if hashlib.sha256(data).hexdigest() != digest:
        raise DataError(f"{path}: not the GRPO settings the launcher planned for policy {policy!r} (its sha256 "
                        "differs from the one the launcher gave this worker): refused; `mutualrl train --resume` "
                        "plans the run again")
    return json.loads(data)


def unplanned_grpo_args(config: Any, policy: Any, paths: RunPaths, device: dict[str, Any]) -> dict[str, Any]:
    """A worker started by hand on a folder with no plan: the recipe's fields (shared < the policy's), the
    ``device`` safety settings over them, and :func:`owned_grpo_fields`; no batch derivation or cadence."""
    return {**config.grpo, **policy.grpo, **device, **owned_grpo_fields(paths.root, policy.name, config.grpo,
                                                                         policy.grpo)}


def build_grpo_config(grpo: dict[str, Any]) -> Any:
    """``trl.GRPOConfig(**grpo)`` (trl imported here: it is slow, and a worker blocks vLLM before it)."""
    from trl import GRPOConfig

    return GRPOConfig(**grpo)
