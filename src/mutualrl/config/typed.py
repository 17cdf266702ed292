"""Build typed dataclasses from plain YAML data, with errors that name the field.

A tiny, strict converter: unknown keys, wrong types and missing required fields are
reported as ``<source>: <dotted.path>: <problem>``, the problem naming the type expected, with a
"did you mean" hint for misspelt keys. A field's metadata may bound a number
(``{"ge": 0}``, ``{"gt": 0}``, ``{"le": 1}``): values outside are rejected here, at the
recipe/CLI boundary, never deep in a worker.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin


class ConfigError(ValueError):
    """A configuration value is malformed. The message names the source and the field."""

    def __init__(self, source: str, path: str, problem: str):
        self.source, self.path, self.problem = source, path, problem
        where = f"{source}: " if source else ""
        field_part = f"{path}: " if path else ""
        super().__init__(f"{where}{field_part}{problem}")


def describe_type(tp: Any) -> str:
    """Human-readable name of a type annotation (for error messages)."""
    origin = get_origin(tp)
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(describe_type(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = get_args(tp)
        return f"a list of {describe_type(args[0])}" if args else "a list"
    if origin is dict:
        args = get_args(tp)
        return f"a mapping of {describe_type(args[0])} to {describe_type(args[1])}" if args else "a mapping"
    if dataclasses.is_dataclass(tp) or hasattr(tp, "from_config_data"):
        return f"a mapping ({tp.__name__})"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if tp is Any:
        return "any value"
    simple = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    if tp in simple:
        return simple[tp]
    return getattr(tp, "__name__", str(tp))


def _type_name_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def convert(value: Any, tp: Any, source: str, path: str) -> Any:
    """Convert ``value`` to annotation ``tp`` or raise :class:`ConfigError`."""
    origin = get_origin(tp)
    if tp is Any or tp is object:
        return value
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(source, path, f"expected null, got {_type_name_of(value)}")
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(value, arg, source, path)
            except ConfigError as err:
                errors.append(err)
        raise ConfigError(source, path, f"expected {describe_type(tp)}, got {_type_name_of(value)}")
    if origin is Literal:
        allowed = get_args(tp)
        if value in allowed:
            return value
        hint = ""
        if isinstance(value, str):
            close = difflib.get_close_matches(value, [str(a) for a in allowed], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(source, path, f"got {value!r}, expected {describe_type(tp)}{hint}")
    if hasattr(tp, "from_config_data"):  # a class with its own shape (RegimeConfig: settings from the registry)
        return tp.from_config_data(value, source, path)
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, source, path)
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(source, path, f"expected {describe_type(tp)}, got {_type_name_of(value)}")
        args = get_args(tp)
        item_tp = args[0] if args else Any
        return [convert(v, item_tp, source, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(source, path, f"expected {describe_type(tp)}, got {_type_name_of(value)}")
        args = get_args(tp)
        key_tp, val_tp = args if args else (Any, Any)
        return {
            convert(k, key_tp, source, f"{path}.{k}"): convert(v, val_tp, source, f"{path}.{k}")
            for k, v in value.items()
        }
    return _convert_leaf(value, tp, source, path)


def _convert_leaf(value: Any, tp: Any, source: str, path: str) -> Any:
    """:func:`convert` for an annotation that holds no other: an enum, bool, int, float, str, another class (or
    one it does not understand, passed through)."""
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value).value
        except ValueError:
            raise ConfigError(source, path, f"got {value!r}, expected {describe_type(tp)}") from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(source, path, f"expected a boolean (true/false), got {_type_name_of(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(source, path, f"expected an integer, got {_type_name_of(value)}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(source, path, f"expected a number, got {_type_name_of(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(source, path, f"expected a string, got {_type_name_of(value)}")
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise ConfigError(source, path, f"expected {describe_type(tp)}, got {_type_name_of(value)}")
    return value  # annotations we do not understand are passed through unchanged


def build_dataclass(cls: type, data: Any, source: str, path: str = "") -> Any:
    """Instantiate dataclass ``cls`` from mapping ``data``, strictly."""
    if hasattr(cls, "from_config_data"):
        return cls.from_config_data(data, source, path)
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(source, path, f"expected {describe_type(cls)}, got {_type_name_of(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            source, _join(path, str(key)), f"unknown key (expected one of: {', '.join(fields)}){hint}"
        )
    kwargs = {}
    for name, f in fields.items():
        sub = _join(path, name)
        if name in data:
            kwargs[name] = convert(data[name], hints[name], source, sub)
            check_bounds(kwargs[name], f.metadata, source, sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            help_text = f.metadata.get("help", "")
            raise ConfigError(
                source, sub, f"required field is missing (expected {describe_type(hints[name])}: {help_text})"
            )
    return cls(**kwargs)


MAX_WHOLE = 2**63 - 1
"""The largest whole number a setting may hold (a C ``ssize_t``): a count or an id beyond it means nothing."""

BOUND_CHECKS = {
    "gt": (lambda value, bound: value > bound, "must be > {bound}"),
    "ge": (lambda value, bound: value >= bound, "must be >= {bound}"),
    "le": (lambda value, bound: value <= bound, "must be <= {bound}"),
    "lt": (lambda value, bound: value < bound, "must be < {bound}"),
}


def check_bounds(value: Any, bounds: typing.Mapping[str, Any], source: str, path: str) -> None:
    """Reject a non-finite number anywhere, and one outside the ``gt``/``ge``/``le``/``lt`` bounds in ``bounds``.

    No setting of a run means anything at infinity or NaN (``1e999`` parses as ``inf``): refusing them
    here, for every numeric field, stops a run that would die at step 2 in ``torch.multinomial``.
    """
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if isinstance(value, int) and abs(value) > MAX_WHOLE:  # no count or id means it; C's ssize_t overflows on it
        raise ConfigError(source, path, f"must be a whole number of at most {MAX_WHOLE:,} either side of 0, got "
                                        f"{str(value)[:30]}{'...' if len(str(value)) > 30 else ''}")
    if not math.isfinite(value):
        raise ConfigError(source, path, f"must be a finite number, got {value!r}")
    for key, (ok, problem) in BOUND_CHECKS.items():
        if key in bounds and not ok(value, bounds[key]):
            raise ConfigError(source, path, f"{problem.format(bound=bounds[key])}, got {value!r}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def to_plain(obj: Any) -> Any:
    """Dataclass tree -> plain dict/list tree (for YAML/JSON dumps)."""
    if hasattr(obj, "to_config_data") and not isinstance(obj, type):
        return to_plain(obj.to_config_data())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


def iter_field_help(cls: type, prefix: str = "") -> typing.Iterator[tuple[str, str, str, Any]]:
    """Yield (dotted name, type, help, default) for every field of a dataclass tree."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        name = _join(prefix, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if hasattr(tp, "field_help"):  # a class with its own shape (RegimeConfig)
            yield name, describe_type(tp), f.metadata.get("help", ""), None
            yield from tp.field_help(name)
            continue
        inner = [a for a in get_args(tp) if dataclasses.is_dataclass(a)] if get_origin(tp) else []
        target = tp if dataclasses.is_dataclass(tp) else (inner[0] if inner else None)
        if target is not None and get_origin(tp) not in (list,):
            yield name, describe_type(tp), f.metadata.get("help", ""), None
            yield from iter_field_help(target, name)
        else:
            yield name, describe_type(tp), f.metadata.get("help", ""), default


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{'a': {'b': 1}}`` -> ``{'a.b': 1}``; policies are keyed by name, so reordering is no change."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return flatten({str(v["name"]): v for v in value}, prefix)
    return {prefix[:-1]: value}
