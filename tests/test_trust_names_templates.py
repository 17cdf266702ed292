"""Names that become paths are checked like policy names, a ``task.name`` calls nothing but a Task class, an
``output_dir`` template takes bare placeholders only, and a chat template renders within bounds of time and size."""

from __future__ import annotations

import time

import pytest

from mutualrl.config.typed import ConfigError
from mutualrl.errors import DataError, UnknownNameError


def load(*overrides: str):
    from mutualrl.config.loader import load_run_config

    return load_run_config("tiny", overrides=list(overrides), check_grpo=False).config


@pytest.mark.parametrize("setting", ["pool.name=../../esc", "pool.name=a/b", "pool.name=" + "p" * 101,
                                     "pool.policies.0.name=" + "q" * 252])
def test_a_name_that_becomes_a_path_is_refused_in_one_line(setting: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(setting)
    assert "name" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("template", ["runs/{pool:>999999999}", "runs/{pool!r}", "runs/{pool[0]}", "runs/{0}",
                                      "runs/{other}", "runs/{pool"])
def test_output_dir_takes_bare_placeholders_only(template: str) -> None:
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="output_dir"):
        load(f"output_dir='{template}'")
    assert time.perf_counter() - start < 5  # refused before anything is formatted


def test_output_dir_too_long_for_a_filesystem_is_refused() -> None:
    with pytest.raises(ConfigError, match="too long"):
        load("output_dir=runs/" + "x" * 300)
    assert load("output_dir=runs/{pool}-{regime}").output_dir == "runs/{pool}-{regime}"


@pytest.mark.parametrize("name", ["tempfile:mkdtemp", "os:getcwd", "mutualrl.tasks.base:TaskExample"])
def test_task_name_calls_nothing_but_a_task_class(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from mutualrl.tasks.registry import task_class_by_path

    calls = []
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: calls.append("called"))
    with pytest.raises(UnknownNameError, match="not a mutualrl.tasks.base.Task subclass"):
        task_class_by_path(name)
    assert calls == []


def test_a_chat_template_that_loops_without_end_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from mutualrl.assets.tokenizers import load_tokenizer
    from mutualrl.evaluation.generate import prompt_token_ids
    from mutualrl.pools import template_render
    from mutualrl.training.data import prompt_token_length

    monkeypatch.setattr(template_render, "RENDER_SECONDS", 0.5)
    tokenizer = load_tokenizer("gpt2")
    tokenizer.chat_template = ("{% for a in range(100000) %}{% for b in range(100000) %}{{ '' }}{% endfor %}"
                               "{% endfor %}")
    for render in (lambda: prompt_token_ids(tokenizer, "1+1=", True), lambda: prompt_token_length(tokenizer, "1+1=", True)):
        start = time.perf_counter()
        with pytest.raises(DataError, match="did not render one prompt in 0.5 s"):
            render()
        assert time.perf_counter() - start < 5
    tokenizer.chat_template = "{{ messages[0]['content'] }}" * 10 + "{#" + " " * template_render.TEMPLATE_MAX_CHARS + "#}"
    with pytest.raises(DataError, match="chat template is"):
        prompt_token_ids(tokenizer, "1+1=", True)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert prompt_token_ids(tokenizer, "1+1=", True) == list(tokenizer("1+1=")["input_ids"])
