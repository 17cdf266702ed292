"""A run folder names no code by itself: a module its ``config.yaml`` names (``plugins``, ``task.reward_funcs``, a
``task.name`` class) is imported only when the command running now names it too (``--allow-code``, its ``--set``,
its recipe, ``MUTUALRL_ALLOW_CODE``), whatever the folder's ``inputs.json`` says (whoever writes the folder writes
that record too), and then only as ``RUN/inputs.json`` recorded it, with that file and content, as the run
started; a ``__main__`` module (a program that runs when imported: ``unittest.__main__``) is refused outright.

The modules here are the user's environment (on ``sys.path``, as an installed package is): each writes a marker when
imported, so a refusal is seen to run none of them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mutualrl.config import plugins, recorded_code
from mutualrl.errors import UsageError
from mutualrl.run_folder import RunPaths

SIDE_EFFECT = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\ndef score(completions, **kw):\n" \
              "    return [1.0] * len(completions)\n"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Modules that act on import, on ``sys.path`` outside any run folder: ``fx_mod`` and the package ``fx_pkg``
    with a ``__main__``; a tiny run folder; the importer's state is this test's own."""
    from mutualrl.api import load_config
    from mutualrl.config.resolved import write_resolved_config

    code, marker = tmp_path / "site", tmp_path / "MARKER"
    (code / "fx_pkg").mkdir(parents=True)
    (code / "fx_mod.py").write_text(SIDE_EFFECT.format(marker=str(marker)))
    (code / "fx_pkg" / "__init__.py").write_text("")
    (code / "fx_pkg" / "__main__.py").write_text(SIDE_EFFECT.format(marker=str(marker)))
    monkeypatch.setattr(sys, "path", [str(code), *sys.path])
    monkeypatch.chdir(tmp_path)
    for state in ("_DATA_FOLDERS", "_HINT_FOLDERS"):
        monkeypatch.setattr(plugins, state, [], raising=False)
    monkeypatch.setattr(recorded_code, "_NAMED_BY_COMMAND", set())
    monkeypatch.delenv(recorded_code.ALLOW_CODE_ENV, raising=False)
    paths = RunPaths(tmp_path / "run")
    paths.policies.mkdir(parents=True)
    write_resolved_config(paths, load_config("tiny"), "tiny")
    yield paths, code, marker
    for name in ("fx_mod", "fx_pkg", "fx_pkg.__main__"):
        sys.modules.pop(name, None)


def name(paths: RunPaths, *, plugin: str | None = None, reward: str | None = None, record: bool = False) -> None:
    """Write ``plugin`` / ``reward`` into the run's config.yaml; ``record``: as the run's start recorded them."""
    import yaml

    header, body = paths.config.read_text().split("\n", 1)
    data = yaml.safe_load(body)
    data["plugins"] = [plugin] if plugin else []
    data["task"]["reward_funcs"] = [reward] if reward else []
    paths.config.write_text(header + "\n" + yaml.safe_dump(data, sort_keys=False))
    if record:
        from mutualrl.launch.rundir.inputs import current_inputs, user_modules

        config = type("C", (), {"plugins": data["plugins"], "task": type("T", (), {
            "reward_funcs": data["task"]["reward_funcs"], "name": data["task"]["name"]})})()
        paths.inputs.write_text(json.dumps(current_inputs(paths, user_modules(config))))


def readers(paths: RunPaths):
    """Every way a run folder's config is read: a worker / the API / distill, ``eval RUN``, ``train --resume``."""
    from mutualrl.launch.evaluate import run_folder_targets
    from mutualrl.config.resolved import load_resolved_config
    from mutualrl.launch.run import TrainOptions, resolve_config

    return {"worker": lambda: load_resolved_config(paths),
            "eval": lambda: run_folder_targets(str(paths.root), None, None),
            "resume": lambda: resolve_config(TrainOptions(output_dir=paths.root, resume=True))}


@pytest.mark.parametrize("reader", ["worker", "eval", "resume"])
@pytest.mark.parametrize("what", [{"plugin": "fx_mod"}, {"reward": "fx_mod.score"}])
@pytest.mark.parametrize("record", [False, True], ids=["unrecorded", "forged-record"])
def test_a_module_the_command_does_not_name_is_refused_by_name_and_not_imported(installed, reader, what,
                                                                                 record) -> None:
    """A record in the folder (``inputs.json`` naming the module's real path and sha256, as a forger writes it)
    vouches for nothing: the refusal names the module and the flag that accepts it."""
    paths, _, marker = installed
    name(paths, **what, record=record)
    with pytest.raises(UsageError) as err:
        readers(paths)[reader]()
    text = str(err.value)
    assert "fx_mod" in text and "--allow-code fx_mod" in text and "\n" not in text
    assert not marker.exists() and "fx_mod" not in sys.modules


@pytest.mark.parametrize("module", ["http.server", "tempfile", "this"])
def test_an_installed_module_a_forged_record_names_is_not_imported(installed, module) -> None:
    """The standard library's modules that act on import or call: named by the folder alone, refused."""
    from mutualrl.config.resolved import load_resolved_config

    paths, _, _ = installed
    was_loaded = module in sys.modules
    name(paths, plugin=module, record=True)
    with pytest.raises(UsageError, match=f"--allow-code {module}"):
        load_resolved_config(paths)
    assert was_loaded or module not in sys.modules


def test_allow_code_and_the_environment_accept_a_recorded_module(installed, monkeypatch) -> None:
    """The command names it (``--allow-code``; a launcher's workers: the environment it hands them): imported."""
    from mutualrl.config.resolved import load_resolved_config

    paths, _, marker = installed
    name(paths, plugin="fx_mod", record=True)
    monkeypatch.setenv(recorded_code.ALLOW_CODE_ENV, "other,fx_mod")
    load_resolved_config(paths)
    assert marker.exists()
    marker.unlink()
    sys.modules.pop("fx_mod")
    monkeypatch.delenv(recorded_code.ALLOW_CODE_ENV)
    recorded_code.accept_code(["fx_mod"])
    load_resolved_config(paths)
    assert marker.exists()


def test_a_launcher_hands_its_workers_the_modules_its_command_named() -> None:
    from mutualrl.config.recorded_code import allowed_code_env, named_modules

    env = allowed_code_env(m for m, _ in named_modules(["my_rewards.exact", "accuracy_reward"], ["my_plugin"],
                                                       "my_tasks:Task"))
    assert env == {recorded_code.ALLOW_CODE_ENV: "my_plugin,my_rewards,my_tasks"}


def test_read_run_imports_nothing_the_folder_names(installed) -> None:
    """The Python API's ``read_run`` reads the policies as data: no plugin of the folder's is imported."""
    from mutualrl.api import read_run

    paths, _, marker = installed
    name(paths, plugin="fx_mod", record=True)
    paths.summary.write_text("{}")
    result = read_run(paths.root)
    assert sorted(result.models) == ["tiny-bpe", "tiny-sp"] and not marker.exists()


@pytest.mark.parametrize("module", ["fx_pkg.__main__", "unittest.__main__"])
def test_a_main_module_is_refused_even_when_recorded(installed, module) -> None:
    from mutualrl.config.resolved import load_resolved_config

    paths, _, marker = installed
    name(paths, plugin=module, record=True)
    with pytest.raises(UsageError, match=r"plugins\[0\]: .*__main__ module"):
        load_resolved_config(paths)
    assert not marker.exists() and module not in sys.modules


def test_a_recipe_naming_a_main_module_is_refused_too(installed) -> None:
    from mutualrl.api import load_config

    _, _, marker = installed
    with pytest.raises(UsageError, match="__main__ module"):
        load_config("tiny", overrides=["plugins=[fx_pkg.__main__]"])
    with pytest.raises(UsageError, match="__main__ module"):
        load_config("tiny", overrides=["task.reward_funcs=[fx_pkg.__main__.score]"])
    assert not marker.exists()


def test_a_recorded_module_loads_and_a_changed_one_is_refused(installed) -> None:
    from mutualrl.config.resolved import load_resolved_config

    paths, code, marker = installed
    name(paths, plugin="fx_mod", record=True)
    recorded_code.accept_code(["fx_mod"])
    load_resolved_config(paths)  # control: recorded as the run started, unchanged
    assert marker.exists()
    marker.unlink()
    sys.modules.pop("fx_mod")
    (code / "fx_mod.py").write_text((code / "fx_mod.py").read_text() + "# edited\n")
    with pytest.raises(UsageError, match=r"module 'fx_mod' \(.*fx_mod\.py\) changed since the run started"):
        load_resolved_config(paths)
    assert not marker.exists()


def test_a_recorded_module_found_elsewhere_now_is_refused(installed, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The same name in another folder (the working directory comes first): not the file the run recorded."""
    from mutualrl.config.resolved import load_resolved_config

    paths, _, marker = installed
    name(paths, reward="fx_mod.score", record=True)
    recorded_code.accept_code(["fx_mod"])
    other = tmp_path / "other"
    other.mkdir()
    (other / "fx_mod.py").write_text(SIDE_EFFECT.format(marker=str(marker)))
    monkeypatch.chdir(other)
    with pytest.raises(UsageError, match=f"module 'fx_mod' is now {other / 'fx_mod.py'}"):
        load_resolved_config(paths)
    assert not marker.exists()


def test_a_module_one_api_call_accepts_is_not_accepted_by_the_next(installed) -> None:
    """A Python API call is one command: ``load_config`` whose overrides name ``fx_mod`` accepts it for that call;
    a run folder naming ``fx_mod`` read afterwards in the same process is refused, as in a new CLI process."""
    from mutualrl import api

    paths, _, _ = installed
    name(paths, plugin="fx_mod", record=True)
    config = api.load_config("tiny", overrides=["plugins=[fx_mod]"])
    assert config.plugins == ["fx_mod"]
    assert not recorded_code.named_by_command("fx_mod")
    with pytest.raises(UsageError, match="--allow-code fx_mod"):
        readers(paths)["eval"]()
    with recorded_code.one_command():  # nested: what the outer command accepted stays after the inner one ends
        recorded_code.accept_code(["fx_mod"])
        with recorded_code.one_command():
            recorded_code.accept_code(["other"])
        assert recorded_code.named_by_command("fx_mod") and not recorded_code.named_by_command("other")
    assert not recorded_code.named_by_command("fx_mod")


def test_evaluate_of_a_result_train_returned_accepts_what_that_train_call_accepted(installed, monkeypatch) -> None:
    """``mutualrl.evaluate(result)`` of a run this process trained: the code that ``train`` call accepted (its reward
    functions) is accepted for the evaluation, and only then; a result read back from the folder brings none."""
    from mutualrl import api
    from mutualrl.launch import evaluate

    paths, _, _ = installed
    seen = []
    monkeypatch.setattr(evaluate, "run_eval_command", lambda *a, **k: (seen.append(
        recorded_code.named_by_command("fx_mod")) or [], {}))
    trained = api.RunResult(run_dir=paths.root, summary={}, models={}, metrics=[], accepted_code=("fx_mod",))
    api.evaluate(trained, progress=False)
    api.evaluate(api.RunResult(run_dir=paths.root, summary={}, models={}, metrics=[]), progress=False)
    assert seen == [True, False] and not recorded_code.named_by_command("fx_mod")


def test_two_modules_the_command_names_are_each_checked_against_what_it_names(installed) -> None:
    """``train --resume --set plugins=[fx_mod] --set task.reward_funcs=[fx_two.score]`` of a run whose config names
    both: each module is checked against the modules the command names (the second was once checked against the
    first's comparison result, and refused though named)."""
    import yaml

    from mutualrl.api import load_config

    paths, code, marker = installed
    (code / "fx_two.py").write_text(SIDE_EFFECT.format(marker=str(marker)))
    try:
        name(paths, plugin="fx_mod", reward="fx_two.score", record=True)
        data = yaml.safe_load(paths.config.read_text().split("\n", 1)[1])
        recorded_code.check_recorded_modules(paths.root, data, {"fx_mod", "fx_two"})  # both named: both pass
        with pytest.raises(UsageError, match="names module 'fx_two', .*--allow-code fx_two"):
            recorded_code.check_recorded_modules(paths.root, data, {"fx_mod"})  # the second alone unnamed
        assert not marker.exists()
        config = load_config(str(paths.config), overrides=["plugins=[fx_mod]", "task.reward_funcs=[fx_two.score]"])
        assert config.plugins == ["fx_mod"] and config.task.reward_funcs == ["fx_two.score"]
    finally:
        sys.modules.pop("fx_two", None)
