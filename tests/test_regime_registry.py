"""The regime registry: one RegimeSpec per regime; a regime added from outside the package trains.

This file is itself a regime module: ``MUTUALRL_REGIMES=<this file>`` makes the launcher and the
policy processes import it, and it registers the throwaway regime ``throwaway-test`` (settings
under ``regime.throwaway``, an adapter that reads the peers' rewards). Inside pytest it registers
only through the ``throwaway`` fixture, so other tests never see it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from mutualrl.errors import UnknownNameError
from mutualrl.regimes.core.registry import (
    ENV_VAR,
    RegimeSpec,
    get_regime,
    regime_names,
    register_regime,
    unregister_regime,
)
from mutualrl.regimes.core.adapter import RegimeAdapter

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ThrowawaySettings:
    """Settings of the throwaway regime."""

    bonus: float = field(default=0.25, metadata={"ge": 0, "help": "A number logged every step (proves settings reach the worker)."})


class ThrowawayAdapter(RegimeAdapter):
    """Reads the peers' rewards and logs their mean; leaves TRL's batch as it is."""

    peer_columns = ("prompt_id", "sample_index", "reward")

    def transform(self, output, rollouts, peers):
        settings = getattr(self.config.regime, self.spec.settings_key)
        rewards = [float(r) for table in peers.values() for r in table.column("reward").to_pylist()]
        return output, {"peer_reward_mean": sum(rewards) / max(len(rewards), 1), "peers": len(peers),
                        "bonus": settings.bonus}


SPEC = RegimeSpec(
    name="throwaway-test", help="a regime defined in a test file", needs_peers=True, settings_key="throwaway",
    settings=ThrowawaySettings, adapter=f"{__name__}:ThrowawayAdapter", status=(("peer_reward_mean", "peer r"),),
)
if __name__.startswith("mutualrl_regime_"):  # imported through MUTUALRL_REGIMES (launcher, policy processes)
    register_regime(SPEC)


@pytest.fixture
def throwaway():
    register_regime(SPEC)
    yield SPEC
    unregister_regime(SPEC.name)


def test_builtin_regimes_in_order():
    paper = ("standalone", "xgrpo", "sgt", "prp", "grpo-randpert")
    assert tuple(name for name in regime_names() if name in paper) == paper and regime_names()[0] == "standalone"
    assert [get_regime(n).needs_peers for n in ("standalone", "xgrpo", "sgt", "prp", "grpo-randpert")] == [
        False, True, True, True, False]
    assert get_regime("grpo-randpert").needs_exchange and not get_regime("standalone").needs_exchange


def test_unknown_regime_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="unknown regime 'sgtt'; expected one of standalone, .*did you mean 'sgt'"):
        get_regime("sgtt")


def test_a_second_spec_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_regime(RegimeSpec(name="sgt", help="impostor"))


def test_a_regime_name_is_spelled_in_one_source_file():
    src = ROOT / "src" / "mutualrl"
    hits = [p for p in src.rglob("*.py") if '"xgrpo"' in p.read_text()]
    assert [str(p.relative_to(src)) for p in hits] == ["regimes/xgrpo/spec.py"]


def test_every_builtin_regime_is_one_folder():
    """The registry's regimes are the folders with a ``spec.py``, whichever they are (adding one touches no test)."""
    from mutualrl.regimes.core.registry import builtin_spec_modules

    folders = sorted(p.parent.name for p in (ROOT / "src" / "mutualrl" / "regimes").glob("*/spec.py"))
    assert [f"mutualrl.regimes.{folder}.spec" for folder in folders] == sorted(builtin_spec_modules())
    assert {"sgt", "prp", "xgrpo", "randpert", "standalone"} <= set(folders)
    assert {get_regime(n).adapter.split(":")[0] for n in ("xgrpo", "sgt", "prp", "grpo-randpert")} == {
        "mutualrl.regimes.xgrpo.adapter", "mutualrl.regimes.sgt.adapter", "mutualrl.regimes.prp.adapter",
        "mutualrl.regimes.randpert.adapter"}


def test_config_loading_and_every_regime_spec_do_not_import_torch():
    code = ("import sys, mutualrl.config; from mutualrl.regimes.core.registry import regime_names; "
            "assert len(regime_names()) >= 5; print('torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"


def test_a_registered_regime_gets_config_validation_settings_and_status(throwaway, tmp_path):
    import yaml

    from mutualrl.config.loader import load_run_config
    from mutualrl.config.schema import RunConfig
    from mutualrl.config.typed import ConfigError, iter_field_help, to_plain
    from mutualrl.launch.supervise.runner import describe_status
    from mutualrl.training.adapters import make_regime_adapter
    from mutualrl.training.callbacks import StatusCallback
    from mutualrl.run_folder import RunPaths

    recipe = {"pool": {"name": "p", "policies": [{"name": "a", "model": "builtin:tiny-bpe"},
                                                 {"name": "b", "model": "builtin:tiny-sp"}]},
              "regime": {"name": "throwaway-test", "throwaway": {"bonus": 0.5}, "sgt": {"lam": 0.3}}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    config = load_run_config(str(path), check_grpo=False).config
    assert config.regime.throwaway.bonus == 0.5 and config.regime.sgt.lam == 0.3
    assert to_plain(config)["regime"]["throwaway"] == {"bonus": 0.5}
    assert "regime.throwaway.bonus" in {row[0] for row in iter_field_help(RunConfig)}
    adapter = make_regime_adapter(config, "a")
    assert isinstance(adapter, ThrowawayAdapter) and adapter.name == "throwaway-test" and adapter.needs_peers
    assert describe_status({"phase": "train", "throwaway-test/peer_reward_mean": 0.5}) == "train  peer r 0.5"
    status = StatusCallback(RunPaths(tmp_path / "run"), "a")  # the policy's side of the live progress line
    status.path.parent.mkdir(parents=True)
    status.on_log(None, SimpleNamespace(is_world_process_zero=True, global_step=1, max_steps=2), None,
                  logs={"throwaway-test/peer_reward_mean": 0.5, "throwaway-test/peers": 1})
    written = json.loads(status.path.read_text())
    assert written["throwaway-test/peer_reward_mean"] == 0.5 and "throwaway-test/peers" not in written
    with pytest.raises(ConfigError, match="regime.throwaway.bonus: must be >= 0"):
        load_run_config(str(path), overrides=["regime.throwaway.bonus=-1"], check_grpo=False)
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({**recipe, "pool": {"name": "p", "policies": recipe["pool"]["policies"][:1]}}))
    with pytest.raises(ConfigError, match="needs at least 2"):
        load_run_config(str(one), check_grpo=False)


def test_an_unknown_regime_in_a_recipe_names_the_field(tmp_path):
    import yaml

    from mutualrl.config.loader import load_run_config
    from mutualrl.config.typed import ConfigError

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"pool": {"name": "p", "policies": [{"name": "a", "model": "builtin:tiny-bpe"}]},
                                    "regime": {"name": "xgrp"}}))
    with pytest.raises(ConfigError, match="regime.name: unknown regime 'xgrp'.*did you mean 'xgrpo'"):
        load_run_config(str(path), check_grpo=False)


@pytest.mark.slow
def test_a_regime_registered_from_a_test_file_trains_two_steps(throwaway, random_lm_pair, tmp_path):
    """The regime of this file trains, and its status metric reaches the live progress line (the policies'
    status files, which the launcher shows for every policy, and the step lines it prints)."""
    from e2e_helpers import child_env, metric_lines, train_command, write_recipe

    from mutualrl.launch.supervise.runner import describe_status

    recipe = write_recipe(tmp_path / "r.yaml", random_lm_pair, regime=SPEC.name, steps=2,
                          extra={"regime.throwaway.bonus": 0.5})
    run_dir = tmp_path / "run"
    done = subprocess.run(train_command(recipe, run_dir), env={**child_env(), ENV_VAR: str(Path(__file__).resolve())},
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    train = metric_lines(run_dir)
    for policy in ("bpe", "sp"):
        rows = [line for line in train if line["policy"] == policy]
        assert [line["step"] for line in rows] == [1, 2]
        assert all(line["throwaway-test/peers"] == 1 and line["throwaway-test/bonus"] == 0.5 for line in rows)
        assert all("throwaway-test/peer_reward_mean" in line for line in rows)
        status = json.loads((run_dir / "status" / f"{policy}.json").read_text())
        shown = f"peer r {status['throwaway-test/peer_reward_mean']:.3g}"
        assert shown in describe_status(status) and shown in done.stdout


def test_a_regimes_own_train_option_comes_from_its_spec():
    """``--prp-denominator`` is PRP's RegimeFlag: the CLI adds it after --regime, the registry turns it into the
    override and refuses a value its settings field does not allow."""
    import inspect

    from mutualrl.cli.train_cmd import train
    from mutualrl.errors import UsageError
    from mutualrl.regimes.core.registry import flag_setting, regime_flags

    assert [f.flag for _, f in regime_flags()] == ["--prp-denominator"]
    names = list(inspect.signature(train).parameters)
    assert names[names.index("regime") + 1] == "prp_denominator"
    assert flag_setting("--prp-denominator", "learner") == ("regime.prp.denominator", "learner")
    with pytest.raises(UsageError, match="--prp-denominator: expected 'learner' or 'peer', got 'both'"):
        flag_setting("--prp-denominator", "both")


@dataclass
class FlaggedSettings:
    k: int = field(default=1, metadata={"help": "an integer"})
    on: bool = field(default=False, metadata={"help": "a switch"})
    label: str | None = field(default=None, metadata={"help": "text"})


def test_a_regime_flag_gives_the_type_of_its_settings_field():
    """A plugin regime's ``--<regime>-k 3`` sets the integer 3 (and true the boolean), as ``--set`` would; text
    fields keep the text ("007" stays "007")."""
    from mutualrl.errors import UsageError
    from mutualrl.regimes.core.registry import RegimeFlag, flag_setting

    spec = RegimeSpec(name="flagged-test", help="test", settings_key="flagged", settings=FlaggedSettings,
                      flags=(RegimeFlag("--flagged-k", "k", "k"), RegimeFlag("--flagged-on", "on", "on"),
                             RegimeFlag("--flagged-label", "label", "label")))
    register_regime(spec)
    try:
        assert flag_setting("--flagged-k", "3") == ("regime.flagged.k", 3)
        assert flag_setting("--flagged-on", "true") == ("regime.flagged.on", True)
        assert flag_setting("--flagged-label", "007") == ("regime.flagged.label", "007")
        with pytest.raises(UsageError, match="--flagged-k: '\\[1' is not a value"):
            flag_setting("--flagged-k", "[1")
    finally:
        unregister_regime(spec.name)


def test_a_variant_whose_settings_do_not_subclass_its_parents_or_whose_parent_is_unknown_is_refused(tmp_path):
    """``parent=`` is checked where a recipe is read: the variant's settings must subclass the parent's (else the
    parent's values could not reach them), and the parent must be a registered regime; each is one line."""
    from mutualrl.config import load_run_config
    from mutualrl.config.typed import ConfigError

    @dataclass
    class Unrelated:
        bonus: float = 0.0

    for name, parent, match in (("orphan-test", "sgt", "must subclass its parent 'sgt'"),
                                ("lost-test", "sgtt", "unknown regime 'sgtt'")):
        register_regime(RegimeSpec(name=name, help="a test variant", parent=parent, settings_key=name.replace("-", "_"),
                                   settings=Unrelated))
        try:
            with pytest.raises(ConfigError, match=match):
                load_run_config("tiny", regime=name, check_grpo=False)
        finally:
            unregister_regime(name)
