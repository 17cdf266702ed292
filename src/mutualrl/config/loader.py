"""Load YAML recipes into :class:`~mutualrl.config.schema.RunConfig`.

A recipe is a YAML mapping with the fields of :class:`RunConfig`, plus an optional
``extends: <path>`` or ``extends: [<path>, ...]`` (relative to the recipe; merged in
order, later wins) whose content it deep-merges over. Pools ship as
``recipes/pools/<name>.yaml``, the paper's experiments and controls as
``recipes/experiments/<name>.yaml``; both are found by name. Any field can be overridden from the command
line with ``--set dotted.path=value`` (the value is parsed as YAML); policies are
addressed by index or by name: ``--set pool.policies.qwen3.grpo.learning_rate=2e-6``.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from mutualrl.config.plugins import import_plugins
from mutualrl.config.schema import SCHEDULE_GRPO_FIELDS, RunConfig
from mutualrl.config.trl_config import from_trl_config, grpo_key_hint
from mutualrl.config.typed import ConfigError, build_dataclass, check_bounds, convert
from mutualrl.config.yaml_strict import load_yaml
from mutualrl.regimes.registry import get_regime, settings_regimes

_FLOAT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")
POLICY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# GRPOConfig fields that mutualrl sets itself for every policy; a recipe must not set them.
RESERVED_GRPO_FIELDS = {
    "output_dir": "set the top-level `output_dir`; each policy writes to <output_dir>/policies/<name>",
    "logging_dir": "TRL logs go to <output_dir>/policies/<name>",
    "deepspeed": "set launch.deepspeed (none, zero2, zero3); mutualrl writes each policy's DeepSpeed config for "
                 "its own GPUs (a file here would be ignored while the plan said DeepSpeed none)",
}


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
        parent_path = (path.parent / parent).resolve()
        if not parent_path.is_file():
            raise ConfigError(str(path), "extends", f"parent recipe {parent_path} not found")
        merged = deep_merge(merged, load_recipe_data(parent_path, (*_seen, path)))
    return deep_merge(merged, data)


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
    if isinstance(value, str) and _FLOAT_RE.match(value):
        value = float(value)  # YAML 1.1 reads 2e-6 (no dot) as a string
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
    data = from_trl_config(load_recipe_data(path), str(path))  # a `trl grpo --config` file works as a recipe
    if regime is not None:
        data.setdefault("regime", {})
        if not isinstance(data["regime"], dict):
            raise ConfigError(str(path), "regime", "expected a mapping")
        data["regime"]["name"] = regime
    for text in overrides:
        apply_override(data, *parse_override(text))
    for setting in option_settings:
        apply_override(data, setting.key.split("."), setting.value)
    source = str(path) + changes_note(overrides, regime, max_steps, option_settings)
    if max_steps is not None:
        set_max_steps(data, max_steps)
    check_schedule_conflicts(data, source)
    import_plugins(data.get("plugins"))  # a plugin's regime or task is named further down the recipe
    config = build_dataclass(RunConfig, data, source)
    validate_run_config(config, source, check_grpo=check_grpo)
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


def check_schedule_conflicts(data: dict[str, Any], source: str) -> None:
    """A count set both in ``schedule`` (its unit) and in ``grpo`` / ``validation`` (optimizer steps) is an error."""
    schedule = data.get("schedule")
    if not isinstance(schedule, dict):
        return
    grpo = data.get("grpo") if isinstance(data.get("grpo"), dict) else {}
    for ours, trl in SCHEDULE_GRPO_FIELDS.items():
        if schedule.get(ours) is not None and grpo.get(trl) is not None:
            raise ConfigError(source, f"schedule.{ours}", f"grpo.{trl} sets the same count; keep one "
                              f"(schedule.{ours} counts schedule.unit steps, grpo.{trl} optimizer steps)")
    validation = data.get("validation") if isinstance(data.get("validation"), dict) else {}
    if schedule.get("validate_every") is not None and validation.get("every_steps") is not None:
        raise ConfigError(source, "schedule.validate_every", "validation.every_steps sets the same interval; keep one "
                          "(schedule.validate_every counts schedule.unit steps, validation.every_steps optimizer steps)")


def validate_run_config(config: RunConfig, source: str, check_grpo: bool = True) -> None:
    """Semantic checks that types alone cannot express."""
    policies = config.pool.policies
    if not policies:
        raise ConfigError(source, "pool.policies", "a pool needs at least one policy")
    seen: set[str] = set()
    for i, policy in enumerate(policies):
        where = f"pool.policies[{i}]"
        if not POLICY_NAME_RE.match(policy.name):
            raise ConfigError(
                source, f"{where}.name", f"{policy.name!r} is not a valid name (letters, digits, '.', '_', '-')"
            )
        if policy.name in seen:
            raise ConfigError(source, f"{where}.name", f"duplicate policy name {policy.name!r}")
        seen.add(policy.name)
        if not policy.model.strip():
            raise ConfigError(source, f"{where}.model", "empty model (expected a hub id, folder or builtin:NAME)")
        if check_grpo:
            policy.grpo = check_grpo_fields(policy.grpo, source, f"{where}.grpo")
        if policy.lora is not None:
            check_lora(policy.lora, source, f"{where}.lora")
    if get_regime(config.regime.name).needs_peers and len(policies) < 2:
        raise ConfigError(
            source,
            "regime.name",
            f"regime {config.regime.name!r} shares experience between policies and needs at least 2; "
            f"pool {config.pool.name!r} has {len(policies)}",
        )
    _check_regime_settings(config, source)
    if config.see.catch_up and config.see.max_staleness < 1:
        raise ConfigError(source, "see.catch_up", "a policy that skips rounds relies on its peers reading records "
                          "up to see.max_staleness rounds old: set see.max_staleness >= 1 (e.g. 2)")
    if config.see.catch_up and any(grpo.get("fp16") for grpo in (config.grpo, *(p.grpo for p in policies))):
        raise ConfigError(source, "see.catch_up", "a skipped round steps the optimizer with no gradient, which "
                          "fp16's loss scaler refuses: use bf16 (or fp32) with see.catch_up")
    if config.see.max_restarts > 0 and config.see.on_peer_failure != "continue":
        raise ConfigError(source, "see.max_restarts", "a restarted policy rejoins a pool that went on without it: "
                          "set see.on_peer_failure=continue (under 'stop' its failure stops the pool)")
    if config.see.max_restarts > 0 and config.launch.nodes > 1:
        raise ConfigError(source, "see.max_restarts", "restarting a policy into its pool is built for one machine "
                          "only; with launch.nodes > 1 leave it 0 (a failed policy then leaves the pool)")
    replay = config.see.replay_consumption
    if replay is not None and not Path(replay).expanduser().is_dir():
        raise ConfigError(source, "see.replay_consumption", f"{replay!r} is not a folder (give the run folder whose "
                          "peer-round choices to replay)")
    if config.schedule is not None and config.schedule.unit == "paper" and config.batch is None:
        raise ConfigError(source, "schedule.unit", "'paper' counts paper steps, which `batch` defines "
                          "(prompts_per_step, mini_batches_per_step); set `batch`, or schedule.unit: optimizer")
    check_output_dir(config, source)
    if config.launch.device_map is not None:
        names = {p.name for p in policies}
        for key in config.launch.device_map:
            if key not in names:
                raise ConfigError(
                    source, f"launch.device_map.{key}", f"no policy named {key!r} (pool has: {', '.join(names)})"
                )
    if check_grpo:
        config.grpo = check_grpo_fields(config.grpo, source, "grpo")


def _check_regime_settings(config: RunConfig, source: str) -> None:
    """Cross-field checks of each regime's settings (single-field ranges are ``ge``/``gt``/``le`` bounds)."""
    for spec in settings_regimes():
        problem = spec.check(getattr(config.regime, spec.settings_key)) if spec.check else None
        if problem is not None:
            raise ConfigError(source, f"regime.{spec.settings_key}.{problem[0]}", problem[1])


def check_output_dir(config: RunConfig, source: str) -> None:
    """``output_dir`` may use only the {pool} and {regime} placeholders."""
    try:
        config.output_dir.format(pool=config.pool.name, regime=config.regime.name)
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(source, "output_dir", f"{config.output_dir!r} is not a valid folder template ({err!r}); "
                          "the only placeholders are {pool} and {regime} (write {{ and }} for literal braces)") from None


def grpo_field_types() -> dict[str, Any]:
    """Field name -> type annotation of TRL's GRPOConfig (imported lazily: it is slow)."""
    import dataclasses

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(GRPOConfig) if f.init}


def check_lora(section: Any, source: str, path: str) -> None:
    """A ``lora:`` section is a mapping of peft ``LoraConfig`` fields (config.lora)."""
    from mutualrl.config.lora import ALIASES, lora_kwargs

    if not isinstance(section, dict):
        raise ConfigError(source, path, f"expected a mapping of peft LoraConfig fields, got {section!r}")
    try:
        lora_kwargs(section)
    except KeyError as err:
        key, hint = err.args
        raise ConfigError(source, f"{path}.{key}", f"not a field of peft.LoraConfig{hint}") from None
    for key, value in list(section.items()):
        name = ALIASES.get(key, key)
        if name in LORA_FIELD_BOUNDS:
            kind, bounds = LORA_FIELD_BOUNDS[name]
            number = convert(value, kind, source, f"{path}.{key}")
            check_bounds(number, bounds, source, f"{path}.{key}")
            if isinstance(value, str):  # ``--set ...lora.alpha=1.5e3``: YAML leaves exponents as text
                section[key] = number


# Types and ranges of peft LoraConfig's numeric fields (peft checks few of them before the model is built).
LORA_FIELD_BOUNDS: dict[str, tuple[type, dict[str, float]]] = {
    "r": (int, {"ge": 1}), "lora_alpha": (float, {"gt": 0}), "lora_dropout": (float, {"ge": 0, "le": 1})}


def check_grpo_fields(mapping: dict[str, Any], source: str, path: str) -> dict[str, Any]:
    """Every key must be a GRPOConfig field of a compatible type; returns the converted values."""
    if not mapping:
        return {}
    types_by_name = grpo_field_types()
    converted = {}
    for key, value in mapping.items():
        where = f"{path}.{key}"
        if key in RESERVED_GRPO_FIELDS:
            raise ConfigError(source, where, f"set by mutualrl: {RESERVED_GRPO_FIELDS[key]}")
        if key not in types_by_name:
            close = difflib.get_close_matches(key, list(types_by_name), n=1)
            hint = grpo_key_hint(key) or (f"; did you mean {close[0]!r}?" if close else "")
            raise ConfigError(source, where, f"not a field of trl.GRPOConfig{hint}")
        converted[key] = convert(value, types_by_name[key], source, where)
        check_grpo_bounds(key, converted[key], source, where)
    return converted


# Ranges of the GRPOConfig fields a recipe commonly sets (TRL checks few of them itself).
GRPO_FIELD_BOUNDS: dict[str, dict[str, float]] = {
    "learning_rate": {"gt": 0}, "seed": {"ge": 0, "le": 2**32 - 1}, "num_generations": {"ge": 2},  # numpy's range
    "per_device_train_batch_size": {"ge": 1}, "per_device_eval_batch_size": {"ge": 1},
    "gradient_accumulation_steps": {"ge": 1}, "steps_per_generation": {"ge": 1}, "num_iterations": {"ge": 1},
    "max_completion_length": {"ge": 1}, "max_prompt_length": {"ge": 1}, "temperature": {"gt": 0},
    "top_p": {"gt": 0, "le": 1}, "beta": {"ge": 0}, "epsilon": {"ge": 0}, "epsilon_high": {"ge": 0},
    "warmup_steps": {"ge": 0}, "warmup_ratio": {"ge": 0, "le": 1}, "weight_decay": {"ge": 0},
    "max_grad_norm": {"ge": 0}, "logging_steps": {"gt": 0}, "save_steps": {"gt": 0}, "eval_steps": {"gt": 0},
    "save_total_limit": {"ge": 1}, "num_train_epochs": {"gt": 0}, "generation_batch_size": {"ge": 1},
}


def check_grpo_bounds(key: str, value: Any, source: str, where: str) -> None:
    """Range of one GRPOConfig value; ``max_steps`` is >= 1, or -1 (TRL: train ``num_train_epochs``)."""
    if key == "max_steps" and isinstance(value, int) and value != -1 and value < 1:
        raise ConfigError(source, where, f"must be >= 1 (or -1: train num_train_epochs), got {value}")
    check_bounds(value, GRPO_FIELD_BOUNDS.get(key, {}), source, where)
