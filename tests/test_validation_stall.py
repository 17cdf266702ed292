"""A reward function that hangs while validation scores is named (issue 68): the training callback's scoring writes
the function's name, and what it was doing, in the worker's reward-call marker, and the launcher's stall limit
names both (before, the console showed "validating 4/4" until the stall limit and never named the function)."""

from __future__ import annotations

import contextlib
import io
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mutualrl.run_folder import RunPaths
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.reward_funcs import RewardSpec

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

EXAMPLES = [TaskExample(prompt_id=f"p{i}", prompt=f"{i}+1=", answer=str(i + 1), task="dataset") for i in range(2)]
DOING = "scoring the validation of step 0: 2 prompts"
HANGING_REWARD = '''
import threading
release = threading.Event()
def hangs(completions, **kwargs):
    release.wait(300)
    return [1.0] * len(completions)
'''


@pytest.mark.slow  # imports TRL and accelerate (7 s where nothing else has)
def test_a_reward_that_hangs_in_validation_is_named_in_the_call_marker(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import trl.models.utils

    import mutualrl.evaluation.generate as generate
    from mutualrl.evaluation.results import ModelEvalResult
    from mutualrl.launch.supervise.worker_output import in_reward_function
    from mutualrl.training.callbacks import ValidationCallback

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "stall_rewards.py").write_text(HANGING_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    import stall_rewards

    def scored_without_a_model(model, tokenizer, shard, **kwargs):  # generation faked; the scoring is validation's
        records = generate.score_examples(shard, ["1"] * len(shard), kwargs["verifier"], None, False,
                                          kwargs["trainer_state"])
        return ModelEvalResult(model="m", records=records, policy="p", step=0)

    monkeypatch.setattr(generate, "evaluate_examples", scored_without_a_model)
    monkeypatch.setattr(trl.models.utils, "unwrap_model_for_generation",
                        lambda model, *a, **k: contextlib.nullcontext(model))
    paths = RunPaths(tmp_path / "run")
    callback = ValidationCallback(paths, "p", "sgt", EXAMPLES, None, False, every_steps=1, max_new_tokens=4,
                                  batch_size=2, at_start=True,
                                  verifier=RewardSpec(task="dataset", verifier="none", funcs=("stall_rewards.hangs",)))
    callback.trainer = SimpleNamespace(use_vllm=False, model_wrapped=None, args=SimpleNamespace(
        ds3_gather_for_generation=True), accelerator=SimpleNamespace(process_index=0, num_processes=1),
        callback_handler=SimpleNamespace(callbacks=[]))
    for folder in (paths.reward_call("p").parent, paths.policy_metrics("p").parent):
        folder.mkdir(parents=True, exist_ok=True)
    state = SimpleNamespace(global_step=0, is_world_process_zero=True, log_history=[])
    errors: list[BaseException] = []

    def validate() -> None:
        try:
            callback.validate(state)
        except BaseException as err:  # noqa: BLE001 - said by the assertion below
            errors.append(err)

    validating = threading.Thread(target=validate, daemon=True)
    validating.start()
    deadline = time.monotonic() + 120  # the thread imports TRL and accelerate first: slow on a loaded box
    while not paths.reward_call("p").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert paths.reward_call("p").read_text() == f"hangs\n{DOING}"
        assert in_reward_function(paths, "p") == f" (in reward function 'hangs', {DOING})"
    finally:
        stall_rewards.release.set()
        validating.join(120)
    assert errors == [] and not paths.reward_call("p").exists()  # a call that returned leaves no name
    assert paths.eval_result("p", 0).exists()


STALLS_IN_VALIDATION = '''
import json, sys, time
from pathlib import Path
from mutualrl.run_folder import RunPaths
from mutualrl.tasks.reward_form import DatasetFormReward, calls_named_in
paths, name = RunPaths(Path(sys.argv[1])), sys.argv[2]
paths.status_dir.mkdir(parents=True, exist_ok=True)
paths.status(name).write_text(json.dumps({"policy": name, "step": 0, "max_steps": 4, "phase": "validating 2/2"}))
def hangs(completions, **kwargs):
    time.sleep(60)
with calls_named_in(paths.reward_call(name), "''' + DOING + '''"):
    DatasetFormReward(hangs, {}, False)(["p"], ["c"])
'''


@pytest.mark.slow  # a 4 s stall limit: the stand-in's start (its imports) must fit in it on a loaded box
def test_the_stall_limit_names_the_reward_function_that_hangs_in_validation(tmp_path: Path) -> None:
    from rich.console import Console

    from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings

    script = tmp_path / "worker.py"
    script.write_text(STALLS_IN_VALIDATION)
    paths = RunPaths(tmp_path / "run")
    procs = [PolicyProcess(name="b", argv=[sys.executable, str(script), str(paths.root), "b"], env={},
                           log_path=paths.log("b"))]
    settings = PoolSettings(paths.see_root(), stall_timeout_s=4.0, grace_s=2.0, poll_s=0.05, max_steps=4)
    started = time.monotonic()
    outcome = PoolRunner(procs, paths, settings, console=Console(file=io.StringIO())).run()
    assert time.monotonic() - started < 30  # not the function's 60 s: the stall limit ended it
    assert not outcome.ok and outcome.failed_policy == "b"
    assert "(stalled)" in outcome.reason and outcome.reason.endswith(f"(in reward function 'hangs', {DOING})")
