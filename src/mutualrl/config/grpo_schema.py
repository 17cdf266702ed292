"""TRL's ``GRPOConfig`` field types and defaults, without importing TRL: one cache file per installed version set.

Checking a recipe's ``grpo`` keys and planning its batch need only GRPOConfig's field names, type
annotations and a few defaults, but importing ``trl.GRPOConfig`` pulls in transformers' TrainingArguments
and torch (about 3.4 s of a dry run's 5). The first process to need them imports TRL once and writes
``$MUTUALRL_CACHE/grpo-schema/grpo-config-<versions>.json`` (the versions of trl, transformers, accelerate
and Python: a new install is a new file); every later launcher reads it.

Each annotation is stored as a JSON *type tree* and rebuilt into real typing objects, so that
:func:`~mutualrl.config.typed.convert` and :func:`~mutualrl.config.typed.describe_type` behave exactly as with
TRL's own: bool, int, float, str, None, Any, ``list[...]``/``tuple[...]``/``dict[...]`` (and bare ones), unions
(``typing.Union`` and ``X | Y`` alike, in their order), ``Literal[...]`` and enums (rebuilt with the same name,
members and values). Anything else (accelerate's ``ParallelismConfig`` dataclass) is stored as not rebuildable:
a recipe that sets such a field gets TRL's own type, imported then. A default that JSON cannot hold exactly is
likewise imported when asked for. A missing, stale or damaged cache file (or a folder in its place) is rebuilt
from TRL; one that cannot be written (read-only cache) costs only the import, never the run.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib.metadata
import operator
import os
import re
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from mutualrl.atomic_io import write_json_atomic
from mutualrl.config.field_rules import IDENTITY, MAY_CHANGE, rules
from mutualrl.config.typed import describe_type
from mutualrl.errors import StorageError
from mutualrl.run_folder import read_json_or

FORMAT = 2
"""Version of the cache file's layout (part of its name: a new layout never reads an old file); raise it whenever
:func:`encode_type` or :func:`encode_schema` changes what they write."""
VERSIONED = ("trl", "transformers", "accelerate")
NOT_REBUILT = object()
"""In :attr:`GrpoSchema.types`: an annotation the cache cannot rebuild; :meth:`GrpoSchema.field_type` imports TRL."""
NOT_CACHED = object()
"""In :attr:`GrpoSchema.defaults`: a default JSON cannot hold; :meth:`GrpoSchema.default` imports TRL."""

GRPO = "GRPO (TRL)"
"""The settings page's heading of the ``grpo`` mapping and of the GRPOConfig fields below."""
_SENDS = rules(GRPO, resume=IDENTITY, leaves="value")
GRPO_FIELD_RULES: dict[str, dict[str, Any]] = {
    # how long to train and how to report: a resumed run may change them (grpo.max_steps also sets the length of the
    # learning-rate schedule from the resumed step on)
    **{name: rules(GRPO, resume=MAY_CHANGE) for name in ("max_steps", "logging_steps", "save_steps",
                                                         "save_total_limit")},
    # the weights to a Hub repository (transformers' TrainingArguments)
    **{name: _SENDS for name in ("push_to_hub", "hub_model_id", "hub_token", "hub_private_repo", "hub_revision",
                                 "hub_strategy", "hub_always_push")},
    # completions to a Hub dataset (TRL)
    "log_completions_hub_repo": _SENDS,
    # metrics to trackers and the places they name
    "report_to": rules(GRPO, resume=MAY_CHANGE, leaves="trackers"),
    **{name: _SENDS for name in ("project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id")},
    # prompts to, and the weights synced into, a vLLM server (TRL's server mode)
    **{name: _SENDS for name in ("vllm_mode", "vllm_server_base_url", "vllm_server_host", "vllm_server_port",
                                 "vllm_group_port")},
}
"""What mutualrl asks of TRL 1.16's ``GRPOConfig`` fields (its own and ``TrainingArguments'``), in the words of
:mod:`mutualrl.config.field_rules`; every other GRPOConfig field is the run's identity and stays on this machine
(:data:`GRPO_UNDECLARED`)."""
GRPO_UNDECLARED = rules(GRPO, resume=IDENTITY)

BASIC = {t.__name__: t for t in (bool, int, float, str, object)}
BARE = {t.__name__: t for t in (list, tuple, dict)}


@dataclasses.dataclass(frozen=True)
class GrpoSchema:
    """GRPOConfig's ``init`` fields, in TRL's order: annotation and default (``dataclasses.MISSING`` for a field
    with a default factory, as ``dataclasses.fields`` gives it) and TRL's help text (its field metadata)."""

    types: dict[str, Any]
    defaults: dict[str, Any]
    helps: dict[str, str] = dataclasses.field(default_factory=dict)

    def field_type(self, name: str) -> Any:
        """The annotation of field ``name`` (``KeyError`` for a name that is not a field)."""
        tp = self.types[name]
        return trl_schema().types[name] if tp is NOT_REBUILT else tp

    def default(self, name: str) -> Any:
        value = self.defaults[name]
        return trl_schema().defaults[name] if value is NOT_CACHED else value


def grpo_help(name: str) -> str:
    """TRL's own help text of GRPOConfig field ``name`` (``""`` when it has none), one line."""
    return " ".join(grpo_schema().helps.get(name, "").split())


def grpo_default(name: str) -> Any:
    """GRPOConfig's own default of field ``name``."""
    return grpo_schema().default(name)


@functools.cache
def grpo_schema() -> GrpoSchema:
    """The schema from the cache file when it is there and sound, else from TRL (written to the cache for next time)."""
    path = schema_path()
    cached = read_schema(path)
    if cached is not None:
        return cached
    schema = trl_schema()
    write_schema(path, schema)
    return schema


@functools.cache
def trl_schema() -> GrpoSchema:
    """The schema read from ``trl.GRPOConfig`` itself (slow: imports transformers and torch)."""
    import typing

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    fields = [f for f in dataclasses.fields(GRPOConfig) if f.init]
    return GrpoSchema({f.name: hints.get(f.name, Any) for f in fields}, {f.name: f.default for f in fields},
                      {f.name: str(f.metadata.get("help") or "") for f in fields})


def cache_root() -> Path:
    """``$MUTUALRL_CACHE`` or ``~/.cache/mutualrl``: the rule of :func:`mutualrl.assets.cache.cache_dir`, repeated here
    because ``config/`` does not import ``assets/`` (layer 1 imports run one way, docs/architecture.md); not created."""
    root = os.environ.get("MUTUALRL_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "mutualrl"


@functools.cache
def installed_versions() -> dict[str, str]:
    """The versions the cache file is keyed by (package metadata: no import)."""
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "none"
    versions["python"] = ".".join(str(n) for n in sys.version_info[:3])
    return versions


def schema_path() -> Path:
    key = "-".join(f"{name}{version}" for name, version in installed_versions().items())
    return cache_root() / "grpo-schema" / f"grpo-config-v{FORMAT}-{re.sub(r'[^A-Za-z0-9.+_-]', '_', key)}.json"


def read_schema(path: Path) -> GrpoSchema | None:
    """The schema in ``path``, or None when it is missing, damaged or written for other versions."""
    data = read_json_or(path, None)
    if data is None or data.get("format") != FORMAT or data.get("versions") != installed_versions():
        return None
    try:
        return decode_schema(data["fields"])
    except Exception:  # noqa: BLE001 - whatever a damaged file holds, the answer is "rebuild it from TRL"
        return None


def write_schema(path: Path, schema: GrpoSchema) -> None:
    """``schema`` into the cache file, atomically; a cache that cannot be written is left as it is."""
    data = {"format": FORMAT, "versions": installed_versions(), "fields": encode_schema(schema)}
    try:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()  # an empty folder in the file's place (a non-empty one is left alone: no cache, no harm)
        write_json_atomic(path, data, indent=None, default=None)
    except (OSError, StorageError):
        pass


def encode_schema(schema: GrpoSchema) -> list[dict[str, Any]]:
    """One entry per field: its type tree (None: not rebuildable) and default (``{"value": v}``, ``{"missing":
    true}`` for a default factory, ``{}`` when JSON cannot hold it exactly). A tree whose rebuilt type does not
    describe itself as the real one does is not trusted either."""
    out = []
    for name, tp in schema.types.items():
        tree = encode_type(tp)
        if tree is not None and describe_type(decode_type(tree)) != describe_type(tp):
            tree = None
        default = schema.defaults[name]
        stored = ({"missing": True} if default is dataclasses.MISSING
                  else {"value": default} if exact_json(default) else {})
        out.append({"name": name, "type": tree, "default": stored, "help": schema.helps.get(name, "")})
    return out


def decode_schema(entries: list[dict[str, Any]]) -> GrpoSchema:
    """The inverse of :func:`encode_schema`; raises on anything it did not write."""
    types_: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    helps: dict[str, str] = {}
    for entry in entries:
        name, tree, default, helps[entry["name"]] = entry["name"], entry["type"], entry["default"], entry["help"]
        if not isinstance(name, str) or not isinstance(default, dict) or not isinstance(helps[name], str):
            raise ValueError(f"damaged entry {entry!r}")
        types_[name] = NOT_REBUILT if tree is None else decode_type(tree)
        defaults[name] = (dataclasses.MISSING if default.get("missing") is True
                          else default["value"] if "value" in default else NOT_CACHED)
    if not types_:
        raise ValueError("no fields")
    return GrpoSchema(types_, defaults, helps)


def exact_json(value: Any) -> bool:
    """Whether ``value`` comes back from JSON as itself: plain scalars (finite floats), lists and str-keyed dicts of
    them; not a tuple, an enum member or a subclass of str."""
    if value is None or type(value) in (bool, int, str):
        return True
    if type(value) is float:
        return value == value and value not in (float("inf"), float("-inf"))
    if type(value) is list:
        return all(exact_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and exact_json(v) for k, v in value.items())
    return False


def encode_type(tp: Any) -> dict[str, Any] | None:
    """``tp`` as a JSON type tree, or None when it holds something the tree cannot rebuild."""
    if tp is type(None):
        return {"kind": "none"}
    if tp is Any:
        return {"kind": "any"}
    if isinstance(tp, type) and BASIC.get(tp.__name__) is tp:
        return {"kind": "basic", "name": tp.__name__}
    if isinstance(tp, type) and BARE.get(tp.__name__) is tp:
        return {"kind": "bare", "name": tp.__name__}
    if tp is Ellipsis:
        return {"kind": "ellipsis"}
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType) or (origin in (list, tuple, dict) and args):
        trees = [encode_type(arg) for arg in args]
        if any(tree is None for tree in trees):
            return None
        if origin in (list, tuple, dict):
            return {"kind": "generic", "name": origin.__name__, "args": trees}
        return {"kind": "union", "form": "pipe" if origin is types.UnionType else "typing", "args": trees}
    if origin is Literal:
        return {"kind": "literal", "values": list(args)} if all(scalar(a) for a in args) else None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return encode_enum(tp)
    return None


def scalar(value: Any) -> bool:
    return value is None or type(value) in (bool, int, str) or (type(value) is float and exact_json(value))


def encode_enum(tp: type[enum.Enum]) -> dict[str, Any] | None:
    """A plain enum (``str``/``int`` mixin or none) whose values are JSON scalars; not a Flag, nor one with its own
    shape (``from_config_data``)."""
    if issubclass(tp, enum.Flag) or hasattr(tp, "from_config_data") or not all(scalar(m.value) for m in tp):
        return None
    mixin = "str" if issubclass(tp, str) else "int" if issubclass(tp, int) else None
    return {"kind": "enum", "name": tp.__name__, "mixin": mixin, "members": [[m.name, m.value] for m in tp]}


def decode_type(tree: dict[str, Any]) -> Any:
    """The typing object a tree of :func:`encode_type` stands for; raises (``KeyError``, ...) on a damaged one."""
    kind = tree["kind"]
    if kind in ("none", "any", "ellipsis"):
        return {"none": type(None), "any": Any, "ellipsis": Ellipsis}[kind]
    if kind == "basic":
        return BASIC[tree["name"]]
    if kind == "bare":
        return BARE[tree["name"]]
    if kind == "literal":
        return Literal[tuple(tree["values"])]
    if kind == "enum":
        mixin = {"str": str, "int": int, None: None}[tree["mixin"]]
        return enum.Enum(tree["name"], [(name, value) for name, value in tree["members"]], type=mixin)
    args = tuple(decode_type(arg) for arg in tree["args"])
    if kind == "generic":
        return BARE[tree["name"]][args]
    if kind == "union" and tree["form"] == "pipe":
        return functools.reduce(operator.or_, args)
    if kind == "union":
        return Union[args]
    raise ValueError(f"unknown type tree kind {kind!r}")
