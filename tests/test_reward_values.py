"""A reward function's values are checked where it returns them: one finite number or None per completion, else
one line naming the function, the value's type and the row (before a shard, a loss or a summary sees them)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from mutualrl.errors import DataError
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.reward_form import in_dataset_form

EXAMPLES = [TaskExample(prompt_id=f"p/{i}", task="dataset", prompt=f"{i}+1=", answer=str(i + 1)) for i in range(2)]


def called(func, completions=("2", "3")):
    wrapped = in_dataset_form([func], EXAMPLES)[0]
    out = wrapped(prompts=[e.prompt for e in EXAMPLES], completions=list(completions))
    return asyncio.run(out) if asyncio.iscoroutine(out) else out


@pytest.mark.parametrize("returned, needle", [
    ([[1.0], 0.0], "returned a list ([1.0]) for completion 0"),
    ([0.0, "1"], "returned a str ('1') for completion 1"),
    ([1j, 0.0], "returned a complex"),
    ([float("inf"), 0.0], "inf, not finite"),
    ([0.0, -1e308], "-1e+308, not finite"),
    ([0.0, 1e39], "not finite as the trainer's float32"),
    ([float("nan"), 0.0], "NaN (return None"),
    ("1.0", "returned a str"),
    (1.0, "returned a float"),
    ([1.0], "returned 1 rewards for 2 completions"),
])
def test_a_reward_that_is_not_one_finite_number_per_completion_is_one_line(returned, needle) -> None:
    def my_reward(completions, **kwargs):
        return returned

    with pytest.raises(DataError) as err:
        called(my_reward)
    text = str(err.value)
    assert "'my_reward'" in text and needle in text and "\n" not in text, text
    if "completion 0" in needle or "completion 1" in needle:
        assert "prompt '" in text and "completion '" in text


def test_numbers_and_none_pass_unchanged() -> None:
    values = [np.float64(0.5), None]
    assert called(lambda completions, **kw: values) is values
    array = np.array([1.0, 0.0], dtype=np.float32)
    assert called(lambda completions, **kw: array) is array
    assert called(lambda completions, **kw: (1, 0)) == (1, 0)


def test_an_async_reward_is_checked_too() -> None:
    async def later(completions, **kwargs):
        return [float("-inf"), 0.0]

    with pytest.raises(DataError, match="'later' returned -inf"):
        called(later)


@pytest.mark.parametrize("code", ["0", "3", "'bye'"])
def test_a_module_that_exits_at_import_is_a_failure_naming_it(tmp_path, monkeypatch, code: str) -> None:
    """``sys.exit(0)`` at import ended ``mutualrl train`` with exit 0, no output and no run folder."""
    import sys

    from mutualrl.config.plugins import import_module_for, import_plugins
    from mutualrl.errors import UsageError

    (tmp_path / "exits_at_import.py").write_text(f"import sys\nsys.exit({code})\n")
    (tmp_path / "exits_file.py").write_text(f"import sys\nsys.exit({code})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(UsageError, match=r"task.reward_funcs\[0\]: importing module 'exits_at_import' called "
                                             r"sys.exit"):
            import_module_for("exits_at_import", "task.reward_funcs[0]")
        with pytest.raises(UsageError, match=r"plugins\[0\]: importing .*exits_file.py' called sys.exit"):
            import_plugins([str(tmp_path / "exits_file.py")])
    finally:
        sys.modules.pop("exits_at_import", None)
        sys.modules.pop("mutualrl_regime_exits_file", None)
