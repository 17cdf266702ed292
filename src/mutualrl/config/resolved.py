"""A run's resolved config, ``RUN/config.yaml``: written once by the launcher, read by every worker and by
``--resume``; its first line names the recipe it was resolved from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mutualrl.atomic_io import write_text_atomic
from mutualrl.config.plugins import import_plugins, open_run_folder
from mutualrl.config.recorded_code import check_recorded_modules
from mutualrl.config.schema import RunConfig
from mutualrl.config.typed import build_dataclass, to_plain
from mutualrl.run_folder import RunPaths, launch_folders

SOURCE_HEADER = "# resolved from "


def write_resolved_config(paths: RunPaths, config: RunConfig, source: str) -> None:
    """The resolved config, headed by the recipe it came from."""
    write_text_atomic(paths.config, f"{SOURCE_HEADER}{source}\n" + yaml.safe_dump(to_plain(config), sort_keys=False))


def load_resolved_config(paths: RunPaths, grpo: bool = True) -> RunConfig:
    """The run's config; a damaged one (not YAML, a FIFO, not a mapping) is one error naming the file.

    ``grpo`` False: without its GRPO fields (the shared ``grpo`` and each policy's, left empty and never typed), as a
    planned worker reads it: its GRPOConfig comes from the plan alone (``RUN/launch/<policy>.grpo.json``).
    """
    from mutualrl.config.typed import ConfigError
    from mutualrl.config.yaml_strict import load_yaml
    from mutualrl.run_folder import read_bytes

    data = load_yaml(read_bytes(paths.config).decode("utf-8", errors="replace"), str(paths.config))
    if not isinstance(data, dict):
        raise ConfigError(str(paths.config), "", f"damaged: holds a {type(data).__name__}, not the run's settings")
    open_run_folder(paths.root, launch_folders(paths))  # a run folder is data: nothing is imported from inside it
    check_recorded_modules(paths.root, data)  # and it names only the code its start recorded
    import_plugins(data.get("plugins"))  # every policy process imports what the launcher imported (config/plugins.py)
    return build_dataclass(RunConfig, data if grpo else without_grpo(data), str(paths.config))


def without_grpo(data: dict[str, Any]) -> dict[str, Any]:
    """A resolved config's mapping without its ``grpo`` mappings, the shared one and each policy's."""
    out = {key: value for key, value in data.items() if key != "grpo"}
    pool = out.get("pool")
    if isinstance(pool, dict) and isinstance(pool.get("policies"), list):
        policies = [{k: v for k, v in p.items() if k != "grpo"} if isinstance(p, dict) else p for p in pool["policies"]]
        out["pool"] = {**pool, "policies": policies}
    return out


def open_if_run_folder(recipe: Path) -> bool:
    """A recipe file that is a run folder's ``config.yaml`` (``--resume``, ``mutualrl eval RUN``): that folder is
    data from now on (:func:`~mutualrl.config.plugins.open_run_folder`), and True. A run folder is known by the
    header its config was written with, or by what a launch left beside it."""
    paths = RunPaths(recipe.parent)
    if recipe.name != paths.config.name or not recipe.is_file():
        return False
    try:
        with recipe.open("rb") as handle:
            headed = handle.read(len(SOURCE_HEADER)) == SOURCE_HEADER.encode()
    except OSError:
        headed = False
    if headed or any(p.exists() for p in (paths.run_json, paths.launch, paths.policies, paths.marker)):
        open_run_folder(paths.root, launch_folders(paths))
        return True
    return False


def read_source(paths: RunPaths) -> str | None:
    """The recipe a run was resolved from (first line of its config.yaml)."""
    try:
        first = paths.config.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return first[len(SOURCE_HEADER):] if first.startswith(SOURCE_HEADER) else None


def policy_chat_template(model_folder: Path) -> bool | None:
    """Whether a run trained the policy whose model ``model_folder`` is (``RUN/policies/<p>/final`` or a
    ``checkpoint-N``) in its chat template, as the worker chose (the recipe's ``chat_template``; unset is plain
    text); None when the folder is not in a run folder or its config does not name the policy. The config is read
    as data: nothing is imported."""
    from mutualrl.config.typed import ConfigError
    from mutualrl.run_folder import RunFolderError

    folder = model_folder.resolve()
    if folder.parent.parent.name != "policies":
        return None
    try:
        policies = policy_entries(RunPaths(folder.parent.parent.parent))
    except (OSError, RunFolderError, ConfigError):  # no readable config: evaluated as any other model folder
        return None
    for entry in policies:
        if entry.get("name") == folder.parent.name:
            return bool(entry.get("chat_template"))
    return None


def policy_entries(paths: RunPaths) -> list[dict[str, Any]]:
    """The policies of a run's ``config.yaml`` as plain mappings, read as data: nothing it names is imported. A
    damaged config is the reader's one-line error (``RunFolderError``, ``ConfigError``)."""
    from mutualrl.config.yaml_strict import load_yaml
    from mutualrl.run_folder import read_bytes

    data = load_yaml(read_bytes(paths.config).decode("utf-8", errors="replace"), str(paths.config))
    pool = data.get("pool") if isinstance(data, dict) else None
    policies = pool.get("policies") if isinstance(pool, dict) else None
    return [entry for entry in policies if isinstance(entry, dict)] if isinstance(policies, list) else []
