"""A worker's GRPOConfig comes from its launcher's plan, not from whatever ``RUN/launch/<policy>.grpo.json`` holds
when it starts: the launcher hands each worker the sha256 of the file it wrote (in the worker's environment, as it
hands the digests of reward functions shipped by value), and the worker refuses a file with other bytes, naming it.
A worker started by hand (no digest) reads the file as before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mutualrl.errors import DataError
from mutualrl.run_folder import RunPaths
from mutualrl.training.grpo_args import PLANNED_GRPO_ENV, planned_grpo_args


@pytest.fixture
def planned(tmp_path: Path):
    """The tiny pool planned and written into a run folder: (paths, plan)."""
    from mutualrl.api import load_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan

    plan = make_launch_plan(load_config("tiny"), tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=1000.0,
                            dry_run=True)
    plan.write()
    return RunPaths(tmp_path / "run"), plan


def test_each_worker_is_handed_the_digest_of_the_file_its_launcher_wrote(planned) -> None:
    paths, plan = planned
    for policy in plan.policies:
        written = paths.planned_grpo(policy.name).read_bytes()
        assert all(spec.env[PLANNED_GRPO_ENV] == hashlib.sha256(written).hexdigest() for spec in policy.commands)
        assert json.loads(written) == policy.grpo


def test_the_worker_takes_the_planned_file_and_refuses_one_changed_since(planned, monkeypatch) -> None:
    paths, plan = planned
    policy = plan.policies[0]
    for key, value in policy.launch.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MUTUALRL_LAUNCHER_PID", "1")
    assert planned_grpo_args(paths, policy.name, dict) == policy.grpo  # as planned: taken
    file = paths.planned_grpo(policy.name)
    tampered = {**json.loads(file.read_text()), "push_to_hub": True, "hub_model_id": "someone/weights"}
    file.write_text(json.dumps(tampered, indent=2, sort_keys=True) + "\n")
    with pytest.raises(DataError) as err:
        planned_grpo_args(paths, policy.name, dict)
    text = str(err.value)
    assert text.startswith(f"{file}: ") and repr(policy.name) in text and "sha256" in text and "\n" not in text


def test_another_policys_planned_file_is_refused_too(planned, monkeypatch) -> None:
    """The digest binds a worker to its own file: a peer's (valid, planned) settings copied over it are refused."""
    paths, plan = planned
    first, second = plan.policies[:2]
    monkeypatch.setenv(PLANNED_GRPO_ENV, first.launch.env[PLANNED_GRPO_ENV])
    paths.planned_grpo(first.name).write_bytes(paths.planned_grpo(second.name).read_bytes())
    with pytest.raises(DataError, match="not the GRPO settings the launcher planned"):
        planned_grpo_args(paths, first.name, dict)


def test_a_worker_started_by_hand_reads_the_file_as_before(planned, monkeypatch) -> None:
    paths, plan = planned
    monkeypatch.delenv(PLANNED_GRPO_ENV, raising=False)
    monkeypatch.delenv("MUTUALRL_LAUNCHER_PID", raising=False)
    assert planned_grpo_args(paths, plan.policies[0].name, dict) == plan.policies[0].grpo
