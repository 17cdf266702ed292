"""User code found by name (issue 93, class 5): every module of the working directory that the named reward module
imports is recorded as the run starts and checked on ``--resume`` (a changed helper was used without a word), and a
module named like an installed package (``datasets.py``) is refused in one line before anything imports it (it
passed the launcher and failed in the workers after their weights loaded). In process, in a temporary working
directory."""

from __future__ import annotations

import json
import sys

import pytest

from mutualrl.config.plugins import import_object
from mutualrl.config.recorded_code import sibling_modules
from mutualrl.errors import UsageError
from mutualrl.launch.rundir.inputs import check_resume_inputs, code_changes, current_inputs
from mutualrl.run_folder import RunPaths


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    forget_user_modules()  # another test of this worker may have imported its own `my_rewards` from its folder
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    forget_user_modules()


def forget_user_modules() -> None:
    import importlib

    for name in [n for n in sys.modules if n.split(".")[0] in ("my_rewards", "helper", "scoring", "lazy_helper")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def write_project(folder):
    (folder / "my_rewards.py").write_text(
        "import json\nimport helper\nfrom scoring import parts\n\n"
        "def exact(completions, answer, **kwargs):\n    from lazy_helper import norm\n"
        "    return [helper.score(norm(c), a) for c, a in zip(completions, answer)]\n")
    (folder / "helper.py").write_text("def score(c, a):\n    return float(c == str(a))\n")
    (folder / "scoring").mkdir()
    (folder / "scoring" / "__init__.py").write_text("from . import parts\n")
    (folder / "scoring" / "parts.py").write_text("WEIGHT = 1.0\n")
    (folder / "lazy_helper.py").write_text("def norm(text):\n    return text.strip()\n")


def test_every_module_of_the_working_directory_the_reward_module_imports_is_recorded_and_checked(workdir):
    write_project(workdir)
    found = sibling_modules(["my_rewards"])
    assert set(found) == {"helper", "scoring", "scoring.parts", "lazy_helper"}  # not json, not the library
    paths = RunPaths(workdir / "runs" / "mine")
    paths.root.mkdir(parents=True)
    record = current_inputs(paths, ["my_rewards", *found])
    paths.inputs.write_text(json.dumps(record))
    assert code_changes(paths) == []

    (workdir / "helper.py").write_text("def score(c, a):\n    return 1.0\n")  # the helper changed before --resume
    assert code_changes(paths) == [f"module 'helper' ({workdir / 'helper.py'}) changed since the run started"]
    with pytest.raises(UsageError, match=r"--resume: .*module 'helper' .*changed since the run started") as err:
        check_resume_inputs(paths)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["datasets", "json"])
def test_a_reward_module_named_like_an_installed_package_is_refused_in_one_line(workdir, name):
    (workdir / f"{name}.py").write_text("def exact(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    with pytest.raises(UsageError) as err:
        import_object(f"{name}.exact", "task.reward_funcs[0]")
    said = str(err.value)
    assert said.startswith(f"task.reward_funcs[0]: module '{name}' in the working directory") and "\n" not in said
    assert "rename your module" in said
    assert str(workdir) not in str(getattr(sys.modules.get(name), "__file__", ""))  # the user's file never ran


def test_a_module_of_its_own_name_is_imported(workdir):
    (workdir / "my_rewards.py").write_text("def exact(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    assert import_object("my_rewards.exact", "task.reward_funcs[0]")(["a"]) == [1.0]
