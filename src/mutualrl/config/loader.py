"""Resolve YAML recipes into :class:`~mutualrl.config.schema.RunConfig`: find, ``extends``, merge, ``--set``.

A recipe is a YAML mapping with the fields of :class:`RunConfig`, plus an optional
``extends: <path>`` or ``extends: [<path>, ...]`` (relative to the recipe, or a recipe's name;
merged in order, later wins) whose content it deep-merges over. Pools ship as
``recipes/pools/<name>.yaml``, the paper's experiments and controls as
``recipes/experiments/<name>.yaml``; both are found by name. Any field can be overridden from the command
line with ``--set dotted.path=value`` (the value is parsed as YAML); policies are
addressed by index or by name: ``--set pool.policies.qwen3.grpo.learning_rate=2e-6``.

Resolution is this module's job (it reads files: recipes, their parents, the paths a recipe names);
the checks of what the result means are :mod:`mutualrl.config.validate`, pure.
"""

from __future__ import annotations

import copy
import difflib
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.config.plugins import import_plugins
from mutualrl.config.recorded_code import check_recorded_modules, overrides_modules
from mutualrl.config.resolved import open_if_run_folder
from mutualrl.config.schema import RunConfig
from mutualrl.config.trl_config import from_trl_config
from mutualrl.config.typed import ConfigError, build_dataclass
from mutualrl.config.validate import check_schedule_conflicts, validate_run_config
from mutualrl.config.yaml_strict import load_yaml
from mutualrl.regimes.core.registry import inherited_setting_key


def recipes_dir() -> Path:
    """The folder holding the shipped recipes (package data, or the source tree's ``recipes/``)."""
    env = os.environ.get("MUTUALRL_RECIPES")
    if env:
        return Path(env)
    packaged = Path(__file__).resolve().parent.parent / "recipes"
    if packaged.is_dir():
        return packaged
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "recipes"
        if (candidate / "pools").is_dir():
            return candidate
    raise FileNotFoundError("mutualrl recipes folder not found (set MUTUALRL_RECIPES)")


RECIPE_FOLDERS = ("pools", "experiments")
"""Folders of ``recipes/`` whose recipes are found by name (``--pool 2qwen``, ``--pool commonsense-3qwen``)."""


def pool_recipe_path(name: str) -> Path:
    """The named recipe: ``recipes/pools/<name>.yaml``, else ``recipes/experiments/<name>.yaml``."""
    for folder in RECIPE_FOLDERS:
        path = recipes_dir() / folder / f"{name}.yaml"
        if path.is_file():
            return path
    return recipes_dir() / "pools" / f"{name}.yaml"


def list_named_recipes() -> list[Path]:
    """Every recipe that can be named: the pools, then the experiments."""
    return [p for folder in RECIPE_FOLDERS for p in sorted((recipes_dir() / folder).glob("*.yaml"))]


def list_pool_recipes() -> list[Path]:
    return sorted((recipes_dir() / "pools").glob("*.yaml"))


def list_experiment_recipes() -> list[Path]:
    return sorted((recipes_dir() / "experiments").glob("*.yaml"))


def resolve_recipe(pool_or_path: str) -> Path:
    """A pool name (``2qwen``) or a path to a YAML recipe -> the recipe file."""
    as_path = Path(pool_or_path)
    if as_path.suffix in (".yaml", ".yml") or os.sep in pool_or_path:
        if not as_path.is_file():
            raise ConfigError(str(as_path), "", "recipe file not found")
        return as_path
    path = pool_recipe_path(pool_or_path)
    if not path.is_file():
        known = [p.stem for p in list_named_recipes()]
        close = difflib.get_close_matches(pool_or_path, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            "--pool", "", f"unknown pool {pool_or_path!r}; known pools and experiments: {', '.join(known)}.{hint}"
        )
    return path


def read_yaml(path: Path) -> dict[str, Any]:
    data = load_yaml(path.read_text(), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "a recipe must be a YAML mapping at the top level")
    return data


def load_recipe_data(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a recipe and merge the chain of ``extends`` it names (child wins)."""
    path = path.resolve()
    if path in _seen:
        raise ConfigError(str(path), "extends", "circular `extends` chain")
    data = read_yaml(path)
    parents = data.pop("extends", None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not parents or not all(isinstance(p, str) for p in parents):
        raise ConfigError(str(path), "extends", "expected a path to another recipe, or a list of paths")
    merged: dict[str, Any] = {}
    for parent in parents:
        parent_path = parent_recipe_path(path, parent)
        merged = deep_merge(merged, load_recipe_data(parent_path, (*_seen, path)))
    return deep_merge(merged, data)


def parent_recipe_path(recipe: Path, parent: str) -> Path:
    """An ``extends`` entry: a path relative to the recipe, else a recipe name as ``--pool`` takes it
    (``extends: tiny``)."""
    relative = (recipe.parent / parent).resolve()
    if relative.is_file():
        return relative
    named = pool_recipe_path(parent) if parent and not Path(parent).suffix and "/" not in parent else None
    if named is not None and named.is_file():
        return named.resolve()
    raise ConfigError(str(recipe), "extends", f"parent recipe {relative} not found, nor a recipe named {parent!r} "
                      "(`mutualrl pools` lists the names)" if named is not None else
                      f"parent recipe {relative} not found")


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (['a','b','c'], parsed YAML value)."""
    if "=" not in text:
        raise ConfigError("--set", text, "expected KEY=VALUE, e.g. grpo.learning_rate=1e-6")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError("--set", text, "empty key")
    value = load_yaml(raw, f"--set {key}") if raw.strip() else ""
    return key.split("."), value


def apply_override(data: dict[str, Any], keys: list[str], value: Any) -> None:
    """Set ``data[keys...] = value``; list items are addressed by index or by their ``name``.

    Names may contain dots (``qwen2.5-math``): the longest run of keys that names an item wins.
    """
    node: Any = data
    i = 0
    while i < len(keys):
        key = keys[i]
        dotted = ".".join(keys[: i + 1])
        if isinstance(node, list):
            index, used = _list_index(node, keys[i:], dotted)
            i += used
            if i == len(keys):
                node[index] = value
                return
            node = node[index]
            continue
        if not isinstance(node, dict):
            raise ConfigError("--set", dotted, "cannot descend into a non-mapping value")
        if i == len(keys) - 1:
            node[key] = value
            return
        if key not in node or node[key] is None:
            node[key] = {}
        node = node[key]
        i += 1


def value_at(data: Any, keys: list[str]) -> Any:
    """The value at ``keys`` (as :func:`apply_override` addresses it), or :data:`NOT_SET`."""
    node, i = data, 0
    while i < len(keys):
        if isinstance(node, list):
            try:
                index, used = _list_index(node, keys[i:], ".".join(keys[: i + 1]))
            except ConfigError:
                return NOT_SET
            node, i = node[index], i + used
        elif isinstance(node, dict) and keys[i] in node:
            node, i = node[keys[i]], i + 1
        else:
            return NOT_SET
    return node


NOT_SET = object()


def override_changes(pool_or_path: str, overrides: typing.Sequence[str]) -> list[str]:
    """What each ``--set`` changed in the recipe, ``key: before -> after`` (the dry run echoes it); unchecked."""
    data = from_trl_config(load_recipe_data(resolve_recipe(pool_or_path)), pool_or_path)
    lines = []
    for text in overrides:
        keys, value = parse_override(text)
        before = value_at(data, keys)
        apply_override(data, keys, value)
        shown = "(not set)" if before is NOT_SET else repr(before)
        lines.append(f"{'.'.join(keys)}: {shown} -> {value!r}" + (" (unchanged)" if before == value else ""))
    return lines


def _list_index(items: list[Any], keys: list[str], dotted: str) -> tuple[int, int]:
    """(index of the addressed item, number of keys consumed)."""
    key = keys[0]
    if key.isdigit():
        index = int(key)
        if index >= len(items):
            raise ConfigError("--set", dotted, f"index {index} out of range (list has {len(items)} items)")
        return index, 1
    names = [item.get("name") if isinstance(item, dict) else None for item in items]
    for used in range(len(keys), 0, -1):
        candidate = ".".join(keys[:used])
        if candidate in names:
            return names.index(candidate), used
    known = ", ".join(str(n) for n in names if n is not None)
    raise ConfigError("--set", dotted, f"no item named {key!r} (known: {known})")


@dataclass(frozen=True)
class OptionSetting:
    """A field set by a dedicated CLI option (``--gpus 8`` -> ``launch.gpus`` = 8): a typed value applied as is,
    never re-parsed from text, and named by its flag in error messages."""

    flag: str
    key: str  # dotted, as in ``--set`` (``launch.gpus``, ``regime.prp.denominator``)
    value: Any


@dataclass
class LoadedRecipe:
    config: RunConfig
    source: str
    data: dict[str, Any]


def load_run_config(
    pool_or_path: str,
    overrides: typing.Sequence[str] = (),
    regime: str | None = None,
    check_grpo: bool = True,
    max_steps: int | None = None,
    option_settings: typing.Sequence[OptionSetting] = (),
) -> LoadedRecipe:
    """Load a recipe by pool name or path, apply ``--set`` overrides and validate it.

    ``max_steps`` (``--max-steps``) is the run length in the recipe's own unit: it sets
    ``schedule.max_steps`` when the recipe has a ``schedule``, else ``grpo.max_steps``.
    ``option_settings`` are the dedicated CLI options (:class:`OptionSetting`): applied after the ``--set``
    overrides (they win) and named by their flag in error messages, so an error never blames a ``--set``
    the user did not give.
    """
    path = resolve_recipe(pool_or_path)
    run_folder = open_if_run_folder(path)  # a run's own config.yaml: nothing is imported from inside the run folder
    data = from_trl_config(load_recipe_data(path), str(path))  # a `trl grpo --config` file works as a recipe
    if run_folder:  # and it names only code this command names too, as its start recorded it
        check_recorded_modules(path.parent, data, overrides_modules(parse_override(text) for text in overrides))
    if regime is not None:
        data.setdefault("regime", {})
        if not isinstance(data["regime"], dict):
            raise ConfigError(str(path), "regime", "expected a mapping")
        data["regime"]["name"] = regime
    for text in overrides:
        apply_override(data, *parse_override(text))
    import_plugins(data.get("plugins"))  # a plugin's regime or task is named further down the recipe
    running = data.get("regime", {}).get("name") if isinstance(data.get("regime"), dict) else None
    for setting in option_settings:
        apply_override(data, inherited_setting_key(running, setting.key).split("."), setting.value)
    source = str(path) + changes_note(overrides, regime, max_steps, option_settings)
    if max_steps is not None:
        set_max_steps(data, max_steps)
    check_schedule_conflicts(data, source)
    config = validate_run_config(build_dataclass(RunConfig, data, source), source, check_grpo=check_grpo)
    check_paths(config, source)
    return LoadedRecipe(config=config, source=source, data=data)


def changes_note(overrides: typing.Sequence[str], regime: str | None, max_steps: int | None,
                 option_settings: typing.Sequence[OptionSetting]) -> str:
    """`` (with --set overrides, --max-steps)``: what changed the recipe, for error messages; empty if nothing."""
    changes = ["--set overrides"] if overrides else []
    flags = [*(["--regime"] if regime is not None else []), *(setting.flag for setting in option_settings),
             *(["--max-steps"] if max_steps is not None else [])]
    changes += list(dict.fromkeys(flags))  # one mention per flag, in order
    return f" (with {', '.join(changes)})" if changes else ""


def set_max_steps(data: dict[str, Any], steps: int) -> None:
    """The run length in the recipe's unit: ``schedule.max_steps`` if it has a schedule, else ``grpo.max_steps``."""
    schedule = data.get("schedule")
    if isinstance(schedule, dict):
        schedule["max_steps"] = steps
        if isinstance(data.get("grpo"), dict):
            data["grpo"].pop("max_steps", None)
    else:
        apply_override(data, ["grpo", "max_steps"], steps)


def check_paths(config: RunConfig, source: str) -> None:
    """The paths a recipe names that must exist when it is resolved (validation itself reads no filesystem)."""
    replay = config.see.replay_consumption
    if replay is not None and not Path(replay).expanduser().is_dir():
        raise ConfigError(source, "see.replay_consumption", f"{replay!r} is not a folder (give the run folder whose "
                          "peer-round choices to replay)")
