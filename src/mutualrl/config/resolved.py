"""A run's resolved config, ``RUN/config.yaml``: written once by the launcher, read by every worker and by
``--resume``; its first line names the recipe it was resolved from."""

from __future__ import annotations

import yaml

from mutualrl.atomic_io import write_text_atomic
from mutualrl.config.plugins import import_plugins, search_run_folders
from mutualrl.config.schema import RunConfig
from mutualrl.config.typed import build_dataclass, to_plain
from mutualrl.run_folder import RunPaths

SOURCE_HEADER = "# resolved from "


def write_resolved_config(paths: RunPaths, config: RunConfig, source: str) -> None:
    """The resolved config, headed by the recipe it came from."""
    write_text_atomic(paths.config, f"{SOURCE_HEADER}{source}\n" + yaml.safe_dump(to_plain(config), sort_keys=False))


def load_resolved_config(paths: RunPaths) -> RunConfig:
    """The run's config; a damaged one (not YAML, a FIFO, not a mapping) is one error naming the file."""
    from mutualrl.config.typed import ConfigError
    from mutualrl.config.yaml_strict import load_yaml
    from mutualrl.run_folder import read_bytes

    data = load_yaml(read_bytes(paths.config).decode("utf-8", errors="replace"), str(paths.config))
    if not isinstance(data, dict):
        raise ConfigError(str(paths.config), "", f"damaged: holds a {type(data).__name__}, not the run's settings")
    search_run_folders(paths)  # read from another folder: user code is found where the run's workers found it
    import_plugins(data.get("plugins"))  # every policy process imports what the launcher imported (config/plugins.py)
    return build_dataclass(RunConfig, data, str(paths.config))


def read_source(paths: RunPaths) -> str | None:
    """The recipe a run was resolved from (first line of its config.yaml)."""
    try:
        first = paths.config.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return first[len(SOURCE_HEADER):] if first.startswith(SOURCE_HEADER) else None
