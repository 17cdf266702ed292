"""A launched worker's GRPOConfig is its plan's ``RUN/launch/<policy>.grpo.json`` and nothing of ``RUN/config.yaml``:
the worker reads the run's other settings from config.yaml, but neither takes nor types its ``grpo`` mappings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mutualrl.run_folder import RunPaths
from mutualrl.training.grpo_args import PLANNED_GRPO_ENV


class Built(Exception):
    """Raised in place of GRPOConfig: the test stops the worker there."""


def planned_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The tiny pool planned and prepared in a run folder (config.yaml and the plan's files): (paths, plan)."""
    from mutualrl.api import load_config
    from mutualrl.config import plugins
    from mutualrl.config.resolved import write_resolved_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan

    for state in ("_DATA_FOLDERS", "_HINT_FOLDERS"):  # the run folder's registration is this test's own
        monkeypatch.setattr(plugins, state, [], raising=False)
    config = load_config("tiny")
    plan = make_launch_plan(config, tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=1000.0, dry_run=True)
    plan.write()
    paths = RunPaths(tmp_path / "run")
    write_resolved_config(paths, config, "tiny")
    return paths, plan


def rewrite_grpo(paths: RunPaths, shared: object, own: object) -> None:
    """config.yaml with another shared ``grpo`` and first policy's ``grpo``."""
    header, body = paths.config.read_text().split("\n", 1)
    data = yaml.safe_load(body)
    data["grpo"] = shared
    data["pool"]["policies"][0]["grpo"] = own
    paths.config.write_text(header + "\n" + yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize(("shared", "own"), [
    ({"learning_rate": 0.5, "max_steps": 999, "seed": 3}, {"learning_rate": 0.25, "report_to": ["wandb"]}),
    (3, ["not", "a", "mapping"]),  # the worker does not even type them (it failed here before 2026-11-26)
])
def test_the_worker_builds_its_grpo_config_from_the_plan_whatever_config_yaml_says(tmp_path, monkeypatch, shared,
                                                                                   own) -> None:
    from mutualrl.training import grpo_args, worker

    paths, plan = planned_run(tmp_path, monkeypatch)
    policy = plan.policies[0]
    rewrite_grpo(paths, shared, own)
    built: dict = {}

    def build(grpo):
        built.update(grpo)
        raise Built

    monkeypatch.setattr(grpo_args, "build_grpo_config", build)
    monkeypatch.setenv(PLANNED_GRPO_ENV, policy.launch.env[PLANNED_GRPO_ENV])  # as its launcher starts it
    with pytest.raises(Built):
        worker.run_policy(paths, policy.name)
    assert built == policy.grpo and built.get("learning_rate") != 0.5
