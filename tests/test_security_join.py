"""A machine joining a run on several machines runs what its own command resolves, not what the shared run folder
says: machine 0's stored config is compared whole with this machine's (any difference beyond which machine it is
and its own flags is one line naming the first differing keys), and a module only the stored config names is refused
before that config is read (reading it imports its plugins)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mutualrl.errors import UsageError
from security_helpers import joining_machine, stored_run_maker

NODES = ["launch.nodes=2"]


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``make(*overrides)``: the shared run folder as machine 0 wrote it (tiny pool, 2 machines, ``overrides``)."""
    return stored_run_maker(tmp_path, monkeypatch, *NODES)


@pytest.fixture
def join(monkeypatch: pytest.MonkeyPatch):
    """``join(paths, *overrides)``: machine 1's ``run_machine`` with its own command's ``overrides``; the session and
    the pool loop stood in for, the plan it would run returned."""
    return joining_machine(monkeypatch)


def test_the_same_command_on_every_machine_joins(shared, join) -> None:
    paths = shared("grpo.learning_rate=2e-4")
    assert join(paths, "grpo.learning_rate=2e-4", "launch.force=true", "launch.join_timeout_s=30")


@pytest.mark.parametrize(("stored", "named"), [
    ("grpo.learning_rate=2e-4", r"grpo\.learning_rate: 0\.0002 there, 0\.0003 here"),
    ("grpo.push_to_hub=true", r"grpo\.push_to_hub: True there, '<unset>' here"),
    ("see.dir=/tmp/x-see", r"see\.dir: '/tmp/x-see' there, None here"),
    ("task.eval_limit=3", r"task\.eval_limit: 3 there"),
    ("pool.policies.0.grpo.temperature=0.5", r"pool\.policies\.[^.]+\.grpo\.temperature: 0\.5 there")])
def test_a_stored_setting_this_machine_does_not_give_is_refused_naming_it(shared, join, stored, named) -> None:
    import re

    paths = shared(stored)
    with pytest.raises(UsageError) as err:
        join(paths)
    text = str(err.value)
    assert text.startswith(f"{paths.config}: machine 0 runs") and "\n" not in text and "same options" in text
    assert re.search(named, text), text


def test_many_differences_name_the_first_few(shared, join) -> None:
    paths = shared("grpo.learning_rate=2e-4", "grpo.temperature=0.5", "grpo.top_p=0.9", "grpo.beta=0.1",
                   "grpo.epsilon=0.3", "task.eval_limit=3")
    with pytest.raises(UsageError, match=r"grpo\.beta: .*; \.\.\. 2 more\)"):
        join(paths)


def test_a_module_only_the_shared_config_names_is_refused_before_it_is_imported(shared, join, tmp_path: Path) -> None:
    """Even one the shared folder's inputs.json records with its true file and hash."""
    from mutualrl.launch.rundir.inputs import current_inputs

    code, marker = tmp_path / "site", tmp_path / "MARKER"
    code.mkdir()
    (code / "fx_join_plugin.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    sys.path.insert(0, str(code))
    try:
        paths = shared()
        text = paths.config.read_text().replace("plugins: []", "plugins: [fx_join_plugin]")
        assert "fx_join_plugin" in text
        paths.config.write_text(text)
        paths.inputs.write_text(json.dumps(current_inputs(paths, ["fx_join_plugin"])))
        with pytest.raises(UsageError, match=r"plugins\[0\] names module 'fx_join_plugin', which this machine"):
            join(paths)
        assert not marker.exists() and "fx_join_plugin" not in sys.modules
    finally:
        sys.modules.pop("fx_join_plugin", None)
