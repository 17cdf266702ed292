"""Issue 42 case 10: recipes are parsed strictly: no duplicate keys, bounded alias expansion anywhere."""

from __future__ import annotations

import time

import pytest

from mutualrl.config.loader import load_run_config, parse_override
from mutualrl.config.typed import ConfigError
from mutualrl.config.yaml_strict import MAX_NODES, load_yaml

BOMB = """extends: {base}
grpo:
  model_init_kwargs:
    a: &a [x, x, x, x, x, x, x, x, x]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    i: [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_an_alias_bomb_inside_a_free_form_mapping_is_refused_at_once_naming_its_key(tmp_path):
    from mutualrl.config.loader import pool_recipe_path

    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(BOMB.format(base=pool_recipe_path("tiny")))
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb.yaml: grpo.model_init_kwargs.f: its aliases expand to more than"):
        load_run_config(str(recipe))
    assert time.perf_counter() - started < 5.0


def test_a_key_given_twice_is_refused_naming_it_and_its_line():
    with pytest.raises(ConfigError, match=r"r.yaml: learning_rate: given twice in one mapping \(line 3\)"):
        load_yaml("grpo:\n  learning_rate: 1.0e-6\n  learning_rate: 2.0e-6\n", "r.yaml")


def test_merge_keys_may_be_overridden_and_shared_anchors_stay_cheap():
    data = load_yaml("base: &b {x: 1, y: 2}\nover:\n  <<: *b\n  y: 3\n", "r.yaml")
    assert data["over"] == {"x": 1, "y": 3}
    many = "a: &a [" + ", ".join(["1"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 50) + "]\n"
    assert len(load_yaml(many, "r.yaml")["b"]) == 50  # 51 000 values: under the bound
    assert MAX_NODES >= 100_000


def test_recursive_aliases_and_deep_nesting_are_one_error():
    with pytest.raises(ConfigError, match="refers to its own anchor"):
        load_yaml("a: &a [*a]\n", "r.yaml")
    with pytest.raises(ConfigError, match="nested too deeply|expand to more than"):
        load_yaml("[" * 100_000 + "]" * 100_000, "r.yaml")


def test_a_set_value_is_parsed_strictly_too():
    with pytest.raises(ConfigError, match="given twice"):
        parse_override("grpo.model_init_kwargs={a: 1, a: 2}")


def test_a_seed_numpy_refuses_is_refused_at_the_boundary():
    """A value a library refuses later (transformers' set_seed: numpy takes 0 <= seed < 2**32) fails here."""
    from mutualrl.config.loader import load_run_config

    with pytest.raises(ConfigError, match=r"grpo.seed: must be <= 4294967295"):
        load_run_config("tiny", overrides=[f"grpo.seed={2**32}"])


def test_an_exponent_without_a_dot_is_a_number_wherever_yaml_is_read(tmp_path):
    """PyYAML (YAML 1.1) reads ``2e-6`` as text; the one reader of recipes, ``--set`` values and config.yaml reads the
    number (3474d10 converted it in the ``--set`` parser and again per field; a recipe file's lora section kept text)."""
    assert load_yaml("[1e-6, -2E+3, .5e3, 1.0e-6]", "t") == [1e-6, -2000.0, 500.0, 1e-6]
    assert load_yaml("[1e5x, '1e-6', e5]", "t") == ["1e5x", "1e-6", "e5"]  # not numbers, or quoted: text
    assert parse_override("grpo.learning_rate=2e-6") == (["grpo", "learning_rate"], 2e-6)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("extends: tiny\ngrpo:\n  learning_rate: 3e-6\n")
    config = load_run_config(str(recipe), overrides=["pool.policies.tiny-bpe.lora={r: 8, alpha: 1.5e1}"]).config
    assert config.grpo["learning_rate"] == 3e-6
    assert config.pool.policies[0].lora["alpha"] == 15.0 and type(config.pool.policies[0].lora["alpha"]) is float
    with pytest.raises(ConfigError, match="grpo.learning_rate: expected a number, got str '2e-6'"):
        load_run_config("tiny", overrides=["grpo.learning_rate='2e-6'"])
