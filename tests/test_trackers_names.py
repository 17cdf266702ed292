"""Trackers (grpo.report_to): each policy is run `<run>/<policy>`, and a run's policies share one group / experiment."""

from __future__ import annotations

import json

from mutualrl.launch.plan.launch_plan import LaunchPlan
from mutualrl.run_folder import RunPaths
from mutualrl.training.grpo_args import planned_grpo_args, unplanned_grpo_args
from mutualrl.training.trackers import policy_run_name, tracker_group_env
from plan_helpers import dry_run

POLICIES = ("tiny-bpe", "tiny-sp")


def test_each_policy_is_a_run_named_after_the_run_and_the_policy(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    run_dir = tmp_path / "tiny-sgt-7"
    plan = dry_run("tiny", ["grpo.report_to=[wandb, mlflow]"], gpus=0, run_dir=run_dir, write=True)
    paths = RunPaths(run_dir.resolve())
    for policy in POLICIES:
        written = json.loads(paths.planned_grpo(policy).read_text())  # what the worker's GRPOConfig gets
        assert written["run_name"] == f"tiny-sgt-7/{policy}"
        assert LaunchPlan.read(run_dir).policy(policy).grpo["run_name"] == f"tiny-sgt-7/{policy}"
        env = plan.policy(policy).launch.env
        assert env["WANDB_RUN_GROUP"] == env["MLFLOW_EXPERIMENT_NAME"] == "tiny-sgt-7"


def test_the_worker_config_keeps_the_planned_run_name(tmp_path, monkeypatch):
    from mutualrl.config.loader import load_run_config

    monkeypatch.delenv("MUTUALRL_LAUNCHER_PID", raising=False)
    config = load_run_config("tiny").config
    policy = config.pool.policies[0]
    paths = RunPaths(tmp_path / "my-run")
    by_hand = planned_grpo_args(paths, policy.name, lambda: unplanned_grpo_args(config, policy, paths, {}))
    assert by_hand["run_name"] == f"my-run/{policy.name}"  # started by hand: no plan
    assert by_hand["output_dir"] == str(paths.policy_dir(policy.name)) and by_hand["disable_tqdm"] is True
    paths.launch.mkdir(parents=True)
    planned = {"run_name": "planned/x", "output_dir": "o", "report_to": [], "disable_tqdm": True}
    paths.planned_grpo(policy.name).write_text(json.dumps(planned))
    assert planned_grpo_args(paths, policy.name, dict) == planned  # the plan's arguments, as they are


def test_the_users_group_and_run_names_win(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_RUN_GROUP", "my-sweep")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    plan = dry_run("tiny", ["grpo.report_to=[wandb]"], gpus=0, run_dir=tmp_path / "run")
    env = plan.policies[0].launch.env
    assert "WANDB_RUN_GROUP" not in env and "MLFLOW_EXPERIMENT_NAME" not in env  # mlflow is not a tracker here
    assert policy_run_name("run", "a", {"run_name": "sweep-3"}, {}) == "sweep-3/a"
    assert policy_run_name("run", "a", {"run_name": "sweep-3"}, {"run_name": "mine"}) == "mine"
    assert tracker_group_env(["all"], "run", {}) == {"WANDB_RUN_GROUP": "run", "MLFLOW_EXPERIMENT_NAME": "run"}
    assert tracker_group_env("none", "run", {}) == {} == tracker_group_env(["tensorboard"], "run", {})


def test_a_users_tensorboard_folder_gets_one_run_per_policy(tmp_path):
    from mutualrl.training.trackers import tensorboard_dir_env

    assert tensorboard_dir_env({}, "run/a") == {} == tensorboard_dir_env({"TENSORBOARD_LOGGING_DIR": ""}, "run/a")
    env = {"TENSORBOARD_LOGGING_DIR": str(tmp_path / "tb")}
    dirs = {tensorboard_dir_env(env, f"tiny-sgt/{p}")["TENSORBOARD_LOGGING_DIR"] for p in POLICIES}
    assert dirs == {str(tmp_path / "tb" / "tiny-sgt" / p) for p in POLICIES}
