"""A run folder does not switch ``grpo.trust_remote_code`` on by itself: its ``config.yaml`` names the models (any
folder, one inside the run folder too) and the setting, so a tampered folder would choose the code a worker runs on
``train --resume``. Only the command running now switches it on; a run folder without it resumes as before. Nor
can a recipe or a run folder ask for FSDP, whose checkpoints a resume would unpickle."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.errors import UsageError
from security_helpers import joining_machine, resume, stored_run_maker


@pytest.fixture
def stored_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A run folder of the tiny pool whose stored config sets (or not) ``grpo.trust_remote_code``."""
    return stored_run_maker(tmp_path, monkeypatch)


def trusting(config) -> list[str]:
    return [p.name for p in config.pool.policies if {**config.grpo, **p.grpo}.get("trust_remote_code") is True]


def test_a_stored_trust_remote_code_is_refused_on_resume_naming_the_folder_and_the_models(stored_run) -> None:
    paths = stored_run("grpo.trust_remote_code=true")
    with pytest.raises(UsageError) as err:
        resume(paths)
    text = str(err.value)
    assert str(paths.config) in text and "grpo.trust_remote_code" in text and "--set" in text and "\n" not in text


def test_a_policy_level_stored_trust_is_refused_too(stored_run) -> None:
    paths = stored_run("pool.policies.0.grpo.trust_remote_code=true")
    with pytest.raises(UsageError, match="trust_remote_code"):
        resume(paths)


def test_the_command_running_now_may_switch_it_on(stored_run) -> None:
    paths = stored_run("grpo.trust_remote_code=true")
    assert trusting(resume(paths, "grpo.trust_remote_code=true"))


def test_a_run_folder_without_it_resumes_as_before(stored_run) -> None:
    paths = stored_run()
    assert not trusting(resume(paths))


@pytest.mark.parametrize("setting", ["grpo.fsdp=full_shard", "grpo.fsdp_config={state_dict_type: SHARDED_STATE_DICT}",
                                     "pool.policies.0.grpo.fsdp=full_shard"])
def test_fsdp_is_refused_so_no_resume_unpickles_its_checkpoint_index(setting: str) -> None:
    """FSDP's sharded checkpoints keep ``.metadata`` as a pickle that ``torch.distributed.checkpoint`` unpickles on
    resume, outside ``torch.load``'s guard; mutualrl plans DeepSpeed, so a recipe or a run folder naming FSDP is
    refused by name."""
    from mutualrl.api import load_config
    from mutualrl.config.typed import ConfigError

    with pytest.raises(ConfigError, match="launch.deepspeed"):
        load_config("tiny", overrides=[setting])


@pytest.fixture
def joining(monkeypatch: pytest.MonkeyPatch):
    """``run_machine`` of machine 1 of 2 with the session and the pool loop stood in for: the plan it would run is
    kept in the returned list instead of started."""
    return joining_machine(monkeypatch)


def test_a_joining_machine_does_not_take_trust_remote_code_from_the_shared_folder(stored_run, joining) -> None:
    """Machine K > 0 plans the shared folder's stored config: that config alone does not switch shipped code on."""
    paths = stored_run("grpo.trust_remote_code=true", "launch.nodes=2")
    with pytest.raises(UsageError, match=r"config\.yaml: grpo\.trust_remote_code is on"):
        joining(paths)
    assert joining(stored_run("launch.nodes=2"))  # control: a shared config without it is planned and run


def test_a_joining_machine_checks_the_shared_config_as_a_recipe(stored_run, joining) -> None:
    """A field no recipe may set (FSDP, whose checkpoints a resume unpickles) written into the shared config."""
    import yaml

    from mutualrl.config.typed import ConfigError

    paths = stored_run("launch.nodes=2")
    header, body = paths.config.read_text().split("\n", 1)
    data = yaml.safe_load(body)
    data["grpo"]["fsdp"] = "full_shard"
    paths.config.write_text(header + "\n" + yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match="fsdp"):
        joining(paths)


def test_only_functions_this_process_shipped_are_handed_to_workers(tmp_path: Path) -> None:
    """A ``by-value:`` name that only a config holds (a joining machine's shared folder, a tampered run) gets no
    digest in the workers' environment: the digest would come from the folder whose pickle it is meant to check."""
    import dataclasses
    import hashlib
    import json

    from mutualrl.api import load_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan
    from mutualrl.tasks.shipped_rewards import SHIPPED_ENV, ship_by_value

    own = ship_by_value(lambda completions, **kw: [1.0] * len(completions))
    foreign = f"by-value:evil:{hashlib.sha256(b'a pickle the folder holds').hexdigest()}"
    config = load_config("tiny")
    config = dataclasses.replace(config, task=dataclasses.replace(config.task, reward_funcs=[own, foreign]))
    plan = make_launch_plan(config, tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=1000.0, dry_run=True)
    handed = [json.loads(spec.env[SHIPPED_ENV]) for spec in plan.specs]
    assert handed and all(set(files) == {own.rpartition(":")[2]} for files in handed)
