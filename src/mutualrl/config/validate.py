"""Pure validation of a resolved recipe: semantic checks that types alone cannot express.

:func:`validate_run_config` reads a :class:`~mutualrl.config.schema.RunConfig` that
:func:`~mutualrl.config.typed.build_dataclass` built and returns a checked copy whose ``grpo`` values
have their GRPOConfig fields' types (a ``lora`` section's numbers are checked, not converted); it never changes its input and
never looks at a file or folder of the recipe's (GRPOConfig's fields come from the schema cache,
:mod:`mutualrl.config.grpo_schema`; a path a recipe names that must exist is the resolver's check,
:func:`mutualrl.config.loader.check_paths`; the regime registry lists its own package on a
lookup). Every error is a :class:`ConfigError` naming the source, the field and what was expected
(did-you-mean for a misspelt key).
:func:`check_schedule_conflicts` is the one check made on the raw recipe mapping, before
it is typed (a count given in two units).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import string
from pathlib import Path
from typing import Any

from mutualrl.config.field_table import lock_step_fields
from mutualrl.config.grpo_schema import grpo_schema
from mutualrl.config.schema import SCHEDULE_GRPO_FIELDS, RunConfig
from mutualrl.config.trl_config import grpo_key_hint
from mutualrl.config.typed import ConfigError, check_bounds, convert
from mutualrl.regimes.core.pooled_spec import PooledRowsSettings, check_pooled_grpo
from mutualrl.regimes.core.regime_spec import RegimeSpec
from mutualrl.regimes.core.registry import get_regime, settings_regimes
from mutualrl.regimes.core.sampling import check_processor_ratio, check_vllm_ratio

POLICY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
NAME_MAX_CHARS = 100
"""A policy's or pool's name becomes file and folder names (with prefixes, suffixes and temporary names around it):
this many characters keep every one of them within a file name's 255 bytes."""
# GRPOConfig fields that mutualrl sets itself for every policy; a recipe must not set them.
RESERVED_GRPO_FIELDS = {
    "output_dir": "set the top-level `output_dir`; each policy writes to <output_dir>/policies/<name>",
    "logging_dir": "TRL logs go to <output_dir>/policies/<name>",
    "deepspeed": "set launch.deepspeed (none, zero2, zero3); mutualrl writes each policy's DeepSpeed config for "
                 "its own GPUs (a file here would be ignored while the plan said DeepSpeed none)",
    # FSDP's sharded checkpoints keep their index as a pickle that a resume unpickles (torch.distributed.checkpoint)
    "fsdp": "FSDP is not offered: set launch.deepspeed (zero3 shards as FSDP's full sharding does)",
    "fsdp_config": "FSDP is not offered: set launch.deepspeed (zero2, zero3)",
}


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


def validate_run_config(config: RunConfig, source: str, check_grpo: bool = True) -> RunConfig:
    """``config`` checked, as a new :class:`RunConfig` whose ``grpo`` values have their fields' types.

    ``config`` itself is left as it was (its policies and their sections are copied where a value is converted).
    """
    if not config.pool.policies:
        raise ConfigError(source, "pool.policies", "a pool needs at least one policy")
    seen: set[str] = set()
    policies = [_checked_policy(policy, i, seen, source, check_grpo) for i, policy in enumerate(config.pool.policies)]
    checked = dataclasses.replace(config, pool=dataclasses.replace(config.pool, policies=policies))
    _check_pool(checked, source)
    if check_grpo:  # the shared fields last, as before the split: an error names the first bad field in this order
        checked = dataclasses.replace(checked, grpo=check_grpo_fields(config.grpo, source, "grpo"))
    return checked


def _checked_policy(policy: Any, index: int, seen: set[str], source: str, check_grpo: bool) -> Any:
    """One ``pool.policies`` entry checked (``seen``: the names before it), as a converted copy."""
    where = f"pool.policies[{index}]"
    check_path_name(policy.name, source, f"{where}.name")
    if policy.name in seen:
        raise ConfigError(source, f"{where}.name", f"duplicate policy name {policy.name!r}")
    seen.add(policy.name)
    if not policy.model.strip():
        raise ConfigError(source, f"{where}.model", "empty model (expected a hub id, folder or builtin:NAME)")
    grpo = check_grpo_fields(policy.grpo, source, f"{where}.grpo") if check_grpo else policy.grpo
    lora = check_lora(policy.lora, source, f"{where}.lora") if policy.lora is not None else None
    return dataclasses.replace(policy, grpo=grpo, lora=lora)


def check_path_name(name: str, source: str, key: str) -> None:
    """A name that becomes a path (a policy's, the pool's): letters, digits, '.', '_', '-', starting with a letter
    or digit (no '/', no '..'), at most :data:`NAME_MAX_CHARS` characters."""
    if not POLICY_NAME_RE.fullmatch(name):
        raise ConfigError(source, key, f"{name[:120]!r} is not a valid name (letters, digits, '.', '_', '-', "
                          "starting with a letter or digit): it names files and folders")
    if len(name) > NAME_MAX_CHARS:
        raise ConfigError(source, key, f"{name[:40]!r}... is {len(name)} characters; a name that becomes file "
                          f"names may have at most {NAME_MAX_CHARS}")


def _check_pool(config: RunConfig, source: str) -> None:
    """The checks across sections: regime and pool size, SEE settings, schedule, output folder, device map."""
    policies = config.pool.policies
    check_path_name(config.pool.name, source, "pool.name")
    if get_regime(config.regime.name).needs_peers and len(policies) < 2:
        raise ConfigError(
            source,
            "regime.name",
            f"regime {config.regime.name!r} shares experience between policies and needs at least 2; "
            f"pool {config.pool.name!r} has {len(policies)}",
        )
    _check_regime_settings(config, source)
    for policy in policies:
        if policy.init_adapter is not None and {**config.grpo, **policy.grpo}.get("use_vllm"):
            raise ConfigError(source, f"pool.policies.{policy.name}.init_adapter", "merged into the trainer's model "
                              "only, and vLLM would generate from the model without it; set grpo.use_vllm: false")
    _check_see(config, source)
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


def _check_see(config: RunConfig, source: str) -> None:
    """The SEE settings that only make sense together."""
    see = config.see
    if see.catch_up and see.max_staleness < 1:
        raise ConfigError(source, "see.catch_up", "a policy that skips rounds relies on its peers reading records "
                          "up to see.max_staleness rounds old: set see.max_staleness >= 1 (e.g. 2)")
    if see.catch_up and any(grpo.get("fp16") for grpo in (config.grpo, *(p.grpo for p in config.pool.policies))):
        raise ConfigError(source, "see.catch_up", "a skipped round steps the optimizer with no gradient, which "
                          "fp16's loss scaler refuses: use bf16 (or fp32) with see.catch_up")
    if see.max_restarts > 0 and see.on_peer_failure != "continue":
        raise ConfigError(source, "see.max_restarts", "a restarted policy rejoins a pool that went on without it: "
                          "set see.on_peer_failure=continue (under 'stop' its failure stops the pool)")
    if see.max_restarts > 0 and config.launch.nodes > 1:
        raise ConfigError(source, "see.max_restarts", "restarting a policy into its pool is built for one machine "
                          "only; with launch.nodes > 1 leave it 0 (a failed policy then leaves the pool)")


def _check_regime_settings(config: RunConfig, source: str) -> None:
    """Cross-field checks of each regime's settings (single-field ranges are ``ge``/``gt``/``le`` bounds), then of
    each policy's GRPO fields under the running regime: its ``grpo_check``, a pooling regime's settings against them
    (``check_pooled_grpo``: GSPO with a per-token correction, truncated sampling with the peer's trace as
    denominator) and truncated sampling with TRL's vLLM ratio (``check_vllm_ratio``, every regime), and a logit
    processor with either (``check_processor_ratio``)."""
    for spec in settings_regimes():
        problem = spec.check(getattr(config.regime, spec.settings_key)) if spec.check else None
        if problem is not None:
            raise ConfigError(source, f"regime.{spec.settings_key}.{problem[0]}", problem[1])
    running = get_regime(config.regime.name)
    _check_lock_step(config, running, source)
    settings = getattr(config.regime, running.settings_key) if running.settings_key else None
    for policy in config.pool.policies:
        grpo = {**config.grpo, **policy.grpo}
        problem = running.grpo_check(grpo) if running.grpo_check else None
        if problem is None and isinstance(settings, PooledRowsSettings):
            problem = check_pooled_grpo(settings, grpo, running.settings_key)
        problem = problem or check_vllm_ratio(grpo)
        peer_denominator = isinstance(settings, PooledRowsSettings) and settings.denominator == "peer"
        problem = problem or check_processor_ratio(grpo, peer_denominator, running.settings_key)
        if problem is not None:
            where = f"pool.policies.{policy.name}.grpo" if problem[0] in policy.grpo else "grpo"
            raise ConfigError(source, f"{where}.{problem[0]}", problem[1])


def _check_lock_step(config: RunConfig, running: RegimeSpec, source: str) -> None:
    """A ``lock_step_only`` regime with a field off its declared lock-step value (``lock_step`` in the field's
    metadata: see.max_staleness, see.on_peer_failure, see.replay_consumption)."""
    if not running.lock_step_only:
        return
    for key, lock_step in lock_step_fields():
        value = functools.reduce(getattr, key.split("."), config)
        if value != lock_step:
            raise ConfigError(source, key, f"{value!r}: regime {running.name!r} needs every peer's records of the same "
                              f"round, so it runs lock-step only ({key} {lock_step!r})")


def check_output_dir(config: RunConfig, source: str) -> None:
    """``output_dir`` may use only the {pool} and {regime} placeholders, bare (no format width, conversion or
    index: ``{pool:>999999999}`` would build a gigabyte name), and the folder it names fits a path."""
    hint = "the only placeholders are {pool} and {regime} (write {{ and }} for literal braces)"
    shown = repr(config.output_dir[:200])
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(config.output_dir)
                  if name is not None]
    except ValueError as err:
        raise ConfigError(source, "output_dir", f"{shown} is not a valid folder template ({err}); {hint}") from None
    for name, spec, conv in fields:
        if name not in ("pool", "regime") or spec or conv:
            text = "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            raise ConfigError(source, "output_dir", f"{shown}: {text[:60]} is not a placeholder mutualrl fills; {hint}")
    folder = config.output_dir.format(pool=config.pool.name, regime=config.regime.name)
    if len(folder.encode(errors="replace")) >= 4000 or any(len(part.encode(errors="replace")) > 200
                                                          for part in Path(folder).parts):
        raise ConfigError(source, "output_dir", f"{shown}: the run folder's path is too long for a filesystem "
                          "(a name over 200 bytes, or the path over 4000); choose a shorter one")


def check_lora(section: Any, source: str, path: str) -> dict[str, Any]:
    """A ``lora:`` section is a mapping of peft ``LoraConfig`` fields (config.lora) whose numbers have their types and
    ranges; returns it in a new mapping."""
    from mutualrl.config.lora import ALIASES, lora_kwargs

    if not isinstance(section, dict):
        raise ConfigError(source, path, f"expected a mapping of peft LoraConfig fields, got {section!r}")
    try:
        lora_kwargs(section)
    except KeyError as err:
        key, hint = err.args
        raise ConfigError(source, f"{path}.{key}", f"not a field of peft.LoraConfig{hint}") from None
    for key, value in section.items():
        name = ALIASES.get(key, key)
        if name in LORA_FIELD_BOUNDS:
            kind, bounds = LORA_FIELD_BOUNDS[name]
            check_bounds(convert(value, kind, source, f"{path}.{key}"), bounds, source, f"{path}.{key}")
    return dict(section)


# Types and ranges of peft LoraConfig's numeric fields (peft checks few of them before the model is built).
LORA_FIELD_BOUNDS: dict[str, tuple[type, dict[str, float]]] = {
    "r": (int, {"ge": 1}), "lora_alpha": (float, {"gt": 0}), "lora_dropout": (float, {"ge": 0, "le": 1})}


def check_grpo_fields(mapping: dict[str, Any], source: str, path: str) -> dict[str, Any]:
    """Every key must be a GRPOConfig field of a compatible type; returns the converted values (a new mapping)."""
    if not mapping:
        return {}
    schema = grpo_schema()  # GRPOConfig's fields from the schema cache: TRL is imported only when it is cold
    converted = {}
    for key, value in mapping.items():
        where = f"{path}.{key}"
        if key in RESERVED_GRPO_FIELDS:
            raise ConfigError(source, where, f"set by mutualrl: {RESERVED_GRPO_FIELDS[key]}")
        if key not in schema.types:
            close = difflib.get_close_matches(key, list(schema.types), n=1)
            hint = grpo_key_hint(key) or (f"; did you mean {close[0]!r}?" if close else "")
            raise ConfigError(source, where, f"not a field of trl.GRPOConfig{hint}")
        converted[key] = convert(value, schema.field_type(key), source, where)
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
