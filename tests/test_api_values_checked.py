"""The Python API checks its arguments as the CLI checks its options, naming the argument; ``--set`` values read
as YAML 1.2 numbers (``1:20`` is text, never YAML 1.1's base-60 80)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.config.typed import ConfigError
from mutualrl.errors import UsageError


@pytest.mark.parametrize("kwargs, needle", [
    ({"max_steps": -1}, "max_steps: -1"), ({"max_steps": 0}, "max_steps: 0"), ({"max_steps": 2.5}, "max_steps: 2.5"),
    ({"max_steps": True}, "max_steps: True"), ({"output_dir": 123}, "output_dir: 123 (int)"),
    ({"overrides": {"grpo.learning_rate": object()}}, "overrides['grpo.learning_rate']: object"),
    ({"overrides": {"grpo.seed": {1, 2}}}, "overrides['grpo.seed']: set"),
    ({"overrides": {3: 1}}, "the key 3"),
])
def test_an_api_argument_is_checked_and_named_before_anything_runs(tmp_path: Path, kwargs, needle) -> None:
    import mutualrl

    with pytest.raises(UsageError) as err:
        mutualrl.train("tiny", progress=False, **{"output_dir": tmp_path / "run", **kwargs})
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_load_config_checks_max_steps_too() -> None:
    from mutualrl.api import load_config

    with pytest.raises(UsageError, match="max_steps: -1"):
        load_config("tiny", max_steps=-1)


@pytest.mark.parametrize("text", ["1:20", "1:20.5", "190:20:30"])
def test_a_base_60_number_is_text_and_a_number_field_names_it(text: str) -> None:
    from mutualrl.api import load_config
    from mutualrl.config.yaml_strict import load_yaml

    assert load_yaml(text, "t") == text
    with pytest.raises(ConfigError, match=f"grpo.seed: expected an integer, got str '{text}'"):
        load_config("tiny", overrides=[f"grpo.seed={text}"])
    assert load_yaml("20", "t") == 20 and load_yaml("1e-6", "t") == 1e-6
