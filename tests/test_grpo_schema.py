"""GRPOConfig's field types and defaults served from the schema cache (config/grpo_schema.py) behave as TRL's own.

Every field's rebuilt annotation converts and refuses a battery of values exactly as the real one (same value,
same ``ConfigError`` message); cached defaults are TRL's; a warm cache spares a dry run the import of TRL; a
stale, damaged or unwritable cache falls back to TRL and never fails.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
import typing
from typing import Any, Literal, Union

import pytest
from e2e_helpers import child_env

from mutualrl.config import grpo_schema as gs
from mutualrl.config.typed import ConfigError, convert, describe_type
from mutualrl.config.validate import check_grpo_fields

BATTERY = [None, True, False, 0, 1, -1, 1.5, "1e-6", "abc", "", [1], ["a"], [], {"a": 1}, {"a": True}, {}]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache of this test's own; the in-process schema forgotten before and after."""
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MUTUALRL_DEBUG_DISK_FULL", raising=False)
    gs.grpo_schema.cache_clear()
    yield tmp_path / "cache"
    gs.grpo_schema.cache_clear()


class Calls(list):
    """One item per time the module took the schema from TRL itself; ``real()`` takes it without counting."""

    real: Any


@pytest.fixture
def trl_calls(monkeypatch):
    calls = Calls()
    calls.real = gs.trl_schema
    monkeypatch.setattr(gs, "trl_schema", lambda: calls.append(1) or calls.real())
    return calls


def warm(cache) -> gs.GrpoSchema:
    """The schema as a later process reads it: written by a cold call, then read back from the file."""
    gs.grpo_schema.cache_clear()
    gs.grpo_schema()
    gs.grpo_schema.cache_clear()
    rebuilt = gs.read_schema(gs.schema_path())
    assert rebuilt is not None and gs.schema_path().is_file()
    return rebuilt


def outcome(value: Any, tp: Any) -> tuple:
    try:
        out = convert(value, tp, "recipe.yaml", "grpo.x")
    except ConfigError as err:
        return ("error", str(err))
    return ("ok", out, type(out))


def enums_in(tp: Any) -> list[type[enum.Enum]]:
    found = [tp] if isinstance(tp, type) and issubclass(tp, enum.Enum) else []
    return found + [e for arg in typing.get_args(tp) for e in enums_in(arg)]


def test_every_rebuilt_field_type_converts_and_refuses_as_trls_own(cache):
    real, rebuilt = gs.trl_schema(), warm(cache)
    assert list(rebuilt.types) == list(real.types)
    unbuilt = [name for name, tp in rebuilt.types.items() if tp is gs.NOT_REBUILT]
    assert len(unbuilt) <= 3, unbuilt  # accelerate's ParallelismConfig dataclass; the rest are rebuilt
    compared = 0
    for name, tp in real.types.items():
        mine = rebuilt.field_type(name)
        if name in unbuilt:
            assert mine is tp  # TRL's own class, imported when a recipe sets the field
            continue
        assert describe_type(mine) == describe_type(tp), name
        values = list(BATTERY)
        for enum_cls in enums_in(tp):
            first = next(iter(enum_cls)).value
            values += [first, list(enum_cls)[-1].value, "not-a-member", [first]]
        values += [a for a in typing.get_args(tp) if not isinstance(a, type) and a is not None and a is not Any]
        for value in values:
            assert outcome(value, mine) == outcome(value, tp), (name, value)
            compared += 1
    assert compared > 16 * 150


def test_cached_defaults_are_grpoconfigs_own(cache):
    from trl import GRPOConfig

    rebuilt = warm(cache)
    fields = [f for f in dataclasses.fields(GRPOConfig) if f.init]
    assert list(rebuilt.defaults) == [f.name for f in fields]
    cached = 0
    for f in fields:
        value = rebuilt.defaults[f.name]
        if value is not gs.NOT_CACHED:
            assert value == f.default and type(value) is type(f.default), f.name
            cached += 1
        assert rebuilt.default(f.name) is f.default or rebuilt.default(f.name) == f.default
    assert cached >= len(fields) - 3
    assert rebuilt.defaults["include_for_metrics"] is dataclasses.MISSING  # a default factory, as fields() says


def test_check_grpo_fields_reads_the_warm_cache_with_trls_messages(cache, trl_calls):
    warm(cache)
    trl_calls.clear()
    converted = check_grpo_fields({"learning_rate": 1e-6, "lr_scheduler_type": "cosine", "report_to": []},
                                  "r.yaml", "grpo")
    assert converted == {"learning_rate": 1e-6, "lr_scheduler_type": "cosine", "report_to": []}
    wrong = r"r.yaml: grpo.optim: expected one of 'adamw_torch'.* or a string, got a list"
    with pytest.raises(ConfigError, match=wrong):
        check_grpo_fields({"optim": ["adamw_torch"]}, "r.yaml", "grpo")
    with pytest.raises(ConfigError, match="not a field of trl.GRPOConfig; did you mean 'learning_rate'"):
        check_grpo_fields({"learning_rat": 1.0}, "r.yaml", "grpo")
    assert trl_calls == []


def test_a_warm_cache_spares_a_dry_run_the_import_of_trl(cache, tmp_path):
    warm(cache)
    code = ("import contextlib, io, sys\n"
            "from mutualrl.cli.main import run\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    rc = run(['train', '--pool', 'tiny', '--dry-run', '-o', sys.argv[1]])\n"
            "print(rc, 'tiny-bpe' in out.getvalue(), 'trl' in sys.modules,\n"
            "      'transformers.training_args' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")],
                          env={**child_env(), "MUTUALRL_CACHE": str(cache)}, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.split() == ["0", "True", "False", "False"], done.stderr[-2000:]


def test_other_versions_read_their_own_file(cache, trl_calls, monkeypatch):
    first = warm(cache)
    trl_calls.clear()
    assert gs.grpo_schema().types.keys() == first.types.keys() and trl_calls == []
    first_path = gs.schema_path()
    other = {**gs.installed_versions(), "trl": "99.0.0"}
    monkeypatch.setattr(gs, "installed_versions", lambda: other)
    gs.grpo_schema.cache_clear()
    assert gs.schema_path() != first_path
    gs.grpo_schema()
    assert trl_calls == [1]
    assert "trl99.0.0" in gs.schema_path().name and json.loads(gs.schema_path().read_text())["versions"] == other
    assert len(list((cache / "grpo-schema").iterdir())) == 2


def damage_other_versions(path):
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "versions": {**data["versions"], "transformers": "0.1"}}))


DAMAGES = {
    "garbage": lambda path: path.write_bytes(b"\x00\xff{not json"),
    "truncated": lambda path: path.write_text(path.read_text()[:1000]),
    "a JSON list": lambda path: path.write_text("[]"),
    "fields not a list": lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "fields": 3})),
    "no fields": lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "fields": []})),
    "an unknown tree": lambda path: path.write_text(path.read_text().replace('"kind": "basic"', '"kind": "what"', 1)),
    "an unknown basic type": lambda path: path.write_text(path.read_text().replace('"name": "int"', '"name": "in"', 1)),
    "another format": lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "format": 0})),
    "other versions inside": damage_other_versions,
    "a folder in its place": lambda path: (path.unlink(), path.mkdir()),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_cache_falls_back_to_trl_and_is_rewritten(cache, trl_calls, damage):
    warm(cache)
    path = gs.schema_path()
    DAMAGES[damage](path)
    trl_calls.clear()
    schema = gs.grpo_schema()
    assert trl_calls == [1] and schema.types == trl_calls.real().types
    gs.grpo_schema.cache_clear()
    assert path.is_file() and gs.read_schema(path) is not None  # rewritten whole
    gs.grpo_schema()
    assert trl_calls == [1]


def test_an_unwritable_cache_costs_only_the_import(tmp_path, monkeypatch, cache, trl_calls):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "a-file" / "cache"))  # no folder can be made there
    assert check_grpo_fields({"learning_rate": 1e-6}, "r.yaml", "grpo") == {"learning_rate": 1e-6}
    assert gs.grpo_default("num_generations") == trl_calls.real().defaults["num_generations"]
    assert trl_calls == [1]


def test_a_full_disk_costs_only_the_import_and_a_read_only_warm_cache_is_read(monkeypatch, cache, trl_calls):
    monkeypatch.setenv("MUTUALRL_DEBUG_DISK_FULL", "grpo-schema")
    assert gs.grpo_schema().types == trl_calls.real().types
    assert not gs.schema_path().exists() and trl_calls == [1]
    monkeypatch.delenv("MUTUALRL_DEBUG_DISK_FULL")
    warm(cache)
    monkeypatch.setenv("MUTUALRL_DEBUG_DISK_FULL", "grpo-schema")
    trl_calls.clear()
    gs.grpo_schema.cache_clear()
    assert gs.grpo_schema().field_type("learning_rate") is float and trl_calls == []


class Colour(enum.IntEnum):
    RED = 1
    BLUE = 2


class Perm(enum.Flag):
    R = 4


@dataclasses.dataclass
class Shape:
    x: int = 0


@pytest.mark.parametrize("tp", [tuple[int, ...], tuple, list, dict, dict[str, Any], list[float] | None,
                                Union[str, None, Literal[False]], Literal[0, False, "x", None, 1.5], Colour,
                                Colour | str, typing.Optional[int]])
def test_type_trees_round_trip(tp):
    tree = gs.encode_type(tp)
    rebuilt = gs.decode_type(json.loads(json.dumps(tree)))
    assert describe_type(rebuilt) == describe_type(tp)
    assert [describe_type(a) for a in typing.get_args(rebuilt)] == [describe_type(a) for a in typing.get_args(tp)]
    assert typing.get_origin(rebuilt) is typing.get_origin(tp)
    for value in [*BATTERY, 2, "RED", [1.5, 2]]:
        assert outcome(value, rebuilt) == outcome(value, tp), value


@pytest.mark.parametrize("tp", [Shape, Perm, Shape | None, list[Shape], Literal[b"x"], Union[int, Literal[b"x"]]])
def test_what_a_tree_cannot_rebuild_is_marked_so(tp):
    assert gs.encode_type(tp) is None


def test_exact_json_keeps_only_what_comes_back_as_itself():
    assert all(gs.exact_json(v) for v in (None, True, 3, 1.5, "s", [1, "a"], {"k": [None]}))
    assert not any(gs.exact_json(v) for v in (float("nan"), float("inf"), (1,), Colour.RED, {1: 2}, b"x", str))
