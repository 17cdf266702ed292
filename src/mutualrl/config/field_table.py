"""Every settings field of a run by its dotted key, with what it declares (:mod:`mutualrl.config.field_rules`).

The answers other places need are read from here and listed nowhere else: which keys ``--resume`` may change
(:func:`resume_rule`), which fields send data off this machine (:func:`outbound_fields`,
:func:`outbound_grpo_fields`), the values a lock-step-only regime needs (:func:`lock_step_fields`), the options of
``mutualrl train`` that set a field (:func:`flag_fields`) and the rows of the generated settings page
(:mod:`mutualrl.config.settings_page`).

Keys are as in a recipe, a policy's fields under ``pool.policies.*`` and a regime's settings under
``regime.<key>`` (which take the declarations of ``RegimeConfig.settings``: a regime's settings are the run's
identity and stay on this machine).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from mutualrl.config.field_rules import IDENTITY, NOT_GIVEN
from mutualrl.config.grpo_schema import GRPO_FIELD_RULES, GRPO_UNDECLARED
from mutualrl.config.schema import RegimeConfig, RunConfig
from mutualrl.config.typed import describe_type
from mutualrl.regimes.core.registry import settings_regimes

BOUNDS = ("ge", "gt", "le", "lt")
NO_DEFAULT = dataclasses.MISSING


@dataclass(frozen=True)
class DeclaredField:
    """One settings field: its dotted key (``*`` for any policy's name), described type, help, default
    (:data:`NO_DEFAULT` for a required one), numeric bounds and declarations."""

    key: str
    type: str
    help: str
    default: Any
    bounds: dict[str, float]
    rules: dict[str, Any]
    section: bool = False
    """A mapping whose own fields follow (``see``, ``pool.policies``): its rules cover the section when it is unset
    and any key in it that no field declares."""
    regime: str | None = None
    """For a regime's settings: that regime's name."""


@functools.cache
def declared_fields() -> tuple[DeclaredField, ...]:
    """Every field of :class:`~mutualrl.config.schema.RunConfig`, depth first, in declaration order."""
    return tuple(_walk(RunConfig, ""))


def _walk(cls: type, prefix: str, inherited: dict[str, Any] | None = None,
          regime: str | None = None) -> typing.Iterator[DeclaredField]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, tp = f"{prefix}{f.name}", hints[f.name]
        own = {k: v for k, v in f.metadata.items() if k not in ("help", *BOUNDS)}
        declared = inherited if inherited is not None else own
        target = _dataclass_in(tp)
        row = DeclaredField(key, describe_type(tp), f.metadata.get("help", ""), _default(f),
                            {b: f.metadata[b] for b in BOUNDS if b in f.metadata}, declared,
                            section=target is not None or tp is RegimeConfig, regime=regime)
        yield row
        if tp is RegimeConfig:
            yield from _regime_fields(key)
        elif target is not None:
            step = f"{key}.*." if get_origin(tp) is list else f"{key}."
            yield from _walk(target, step, inherited, regime)


def _regime_fields(prefix: str) -> typing.Iterator[DeclaredField]:
    """``regime.name``, then each registered regime's settings under ``regime.<key>``."""
    by_name = {f.name: f for f in dataclasses.fields(RegimeConfig)}
    name, settings = by_name["name"], by_name["settings"]
    yield DeclaredField(f"{prefix}.name", "a string", name.metadata["help"], name.default, {},
                        _declared(name.metadata))
    for spec in settings_regimes():
        declared = _declared(settings.metadata)
        yield DeclaredField(f"{prefix}.{spec.settings_key}", describe_type(spec.settings), f"{spec.name} settings.",
                            NO_DEFAULT, {}, declared, section=True, regime=spec.name)
        yield from _walk(spec.settings, f"{prefix}.{spec.settings_key}.", declared, spec.name)


def _declared(metadata: Any) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in ("help", *BOUNDS)}


def _dataclass_in(tp: Any) -> type | None:
    """The dataclass a field holds (itself, optional, or a list of them), or None."""
    if dataclasses.is_dataclass(tp):
        return tp  # type: ignore[return-value]
    inner = [a for a in get_args(tp) if dataclasses.is_dataclass(a)] if get_origin(tp) else []
    return inner[0] if inner else None


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return NO_DEFAULT


def rules_of(key: str) -> dict[str, Any]:
    """The declarations governing a flattened recipe key (``see.max_staleness``, ``pool.policies.a.grpo.seed``,
    ``launch.device_map.a``): a GRPOConfig field's from :data:`~mutualrl.config.grpo_schema.GRPO_FIELD_RULES`,
    otherwise the longest declared key it starts with (a section's for a key no field declares); a key of no
    section is the run's identity."""
    parts = key.split(".")
    at = 1 if parts[0] == "grpo" else 4 if parts[:2] == ["pool", "policies"] and parts[3:4] == ["grpo"] else None
    if at is not None and len(parts) > at:
        return GRPO_FIELD_RULES.get(parts[at], GRPO_UNDECLARED)
    best: DeclaredField | None = None
    for declared in declared_fields():
        pattern = declared.key.split(".")
        if len(pattern) <= len(parts) and all(p in ("*", k) for p, k in zip(pattern, parts)):
            if best is None or len(pattern) > len(best.key.split(".")):
                best = declared
    return best.rules if best is not None else {"resume": IDENTITY, "leaves": None}


def resume_rule(key: str) -> str:
    """:data:`~mutualrl.config.field_rules.IDENTITY` or :data:`~mutualrl.config.field_rules.MAY_CHANGE` for a
    flattened recipe key."""
    return rules_of(key)["resume"]


def outbound_fields() -> list[DeclaredField]:
    """The schema's fields whose value may send data off this machine (``leaves`` set), in declaration order."""
    return [f for f in declared_fields() if f.rules.get("leaves")]


def outbound_grpo_fields() -> dict[str, str]:
    """GRPOConfig field -> its ``leaves`` kind, for the fields that may send data off this machine."""
    return {name: rules["leaves"] for name, rules in GRPO_FIELD_RULES.items() if rules["leaves"]}


def flag_fields() -> dict[str, DeclaredField]:
    """``mutualrl train`` option -> the field it sets, for the fields that declare one (``flag``)."""
    return {f.rules["flag"]: f for f in declared_fields() if f.rules.get("flag")}


def option_help(help_text: str, key: str) -> str:
    """The ``--help`` of an option that sets the field ``key``: the field's own help, then the key it sets."""
    return f"{help_text} Recipe key: {key}."


def lock_step_fields() -> list[tuple[str, Any]]:
    """(key, value) of the fields whose value decides whether peers exchange records round for round."""
    return [(f.key, f.rules["lock_step"]) for f in declared_fields() if f.rules.get("lock_step", NOT_GIVEN)
            is not NOT_GIVEN]
