"""A run folder does not choose where a resumed run sends its weights, completions or metrics: a stored setting
that pushes to the Hub, logs completions to a Hub dataset, reports to a remote tracker, talks to a vLLM server,
publishes the exchange outside the run folder or meets another machine's rendezvous is taken on ``train --resume``
only when the command running now gives it again; otherwise the resume is refused in one line naming the file and
the fields. The recipes' own settings (TensorBoard files, no tracker, colocated vLLM) resume as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.errors import UsageError
from mutualrl.launch.rundir.export_settings import LEAVING_GRPO_FIELDS
from security_helpers import resume, stored_run_maker


@pytest.fixture
def stored_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A run folder of the tiny pool whose stored config has ``overrides`` applied."""
    return stored_run_maker(tmp_path, monkeypatch)


STORED = {
    "hub push": (["grpo.push_to_hub=true", "grpo.hub_model_id=someone/weights"],
                 ["grpo.push_to_hub", "grpo.hub_model_id"]),
    "hub token": (["grpo.hub_token=hf_xxx"], ["grpo.hub_token"]),
    "completions to a hub dataset": (["grpo.log_completions=true", "grpo.log_completions_hub_repo=someone/logs"],
                                     ["grpo.log_completions_hub_repo"]),
    "remote tracker": (["grpo.report_to=[wandb]"], ["grpo.report_to"]),
    "trackio space": (["grpo.report_to=[tensorboard]", "grpo.trackio_space_id=someone/space"],
                      ["grpo.trackio_space_id"]),
    "vllm server": (["grpo.vllm_mode=server", "grpo.vllm_server_base_url=http://203.0.113.9:8000"],
                    ["grpo.vllm_mode", "grpo.vllm_server_base_url"]),
    "vllm server host": (["grpo.vllm_server_host=203.0.113.9"], ["grpo.vllm_server_host"]),
    "a policy's own": (["pool.policies.0.grpo.push_to_hub=true"], ["grpo.push_to_hub"]),
    "exchange outside the run": (["see.dir=/tmp/elsewhere-see"], ["see.dir"]),
    "another rendezvous": (["launch.nodes=2", "launch.main_address=203.0.113.9"], ["launch.main_address"]),
}


@pytest.mark.parametrize("case", list(STORED))
def test_a_stored_setting_that_sends_elsewhere_is_refused_on_resume_naming_file_and_fields(stored_run, case) -> None:
    settings, fields = STORED[case]
    paths = stored_run(*settings)
    with pytest.raises(UsageError) as err:
        resume(paths)
    text = str(err.value)
    assert text.startswith(f"{paths.config}: ") and "\n" not in text and "--set" in text
    assert all(field in text for field in fields), text


def test_the_command_running_now_may_give_them_again(stored_run) -> None:
    paths = stored_run("grpo.push_to_hub=true", "grpo.hub_model_id=someone/weights", "grpo.report_to=[wandb]")
    config = resume(paths, "grpo.push_to_hub=true", "grpo.hub_model_id=mine/weights", "grpo.report_to=[wandb]")
    assert config.grpo["hub_model_id"] == "mine/weights" and config.grpo["push_to_hub"] is True
    paths = stored_run("launch.nodes=2", "launch.main_address=203.0.113.9")
    assert resume(paths, main_address="203.0.113.9").launch.main_address == "203.0.113.9"  # its option counts


def test_a_shared_setting_now_does_not_cover_a_policys_stored_own(stored_run) -> None:
    """The policy's own stored value would win over the shared one given now: still refused, naming the policy's."""
    from mutualrl.api import load_config

    name = load_config("tiny").pool.policies[0].name
    paths = stored_run(f"pool.policies.{name}.grpo.hub_model_id=someone/weights")
    with pytest.raises(UsageError, match=rf"pool\.policies\.{name}\.grpo\.hub_model_id"):
        resume(paths, "grpo.hub_model_id=mine/weights")
    assert resume(paths, f"pool.policies.{name}.grpo.hub_model_id=mine/weights").pool.policies[0].grpo[
        "hub_model_id"] == "mine/weights"


@pytest.mark.parametrize("settings", [[], ["grpo.report_to=[tensorboard]"], ["grpo.vllm_mode=colocate"],
                                      ["grpo.report_to=none"]])
def test_local_settings_resume_as_before(stored_run, settings) -> None:
    assert resume(stored_run(*settings)).pool.name == "tiny"


def test_an_exchange_inside_the_run_folder_resumes_as_before(stored_run, tmp_path: Path) -> None:
    assert resume(stored_run(f"see.dir={tmp_path / 'run' / 'see'}")).see.dir == str(tmp_path / "run" / "see")


def test_every_listed_field_is_a_field_of_the_installed_grpo_config() -> None:
    """The list follows TRL 1.16's GRPOConfig: a field renamed there would silently stop being checked."""
    from mutualrl.config.grpo_schema import grpo_schema

    assert set(LEAVING_GRPO_FIELDS) <= set(grpo_schema().types)
