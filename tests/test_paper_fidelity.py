"""The paper recipes train the paper's objective and check answers the paper's way (issue 16)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from mutualrl.cli.main import run
from mutualrl.config.loader import load_recipe_data, load_run_config, recipes_dir
from mutualrl.training.trackers import (
    TRACKER_MODULES,
    missing_trackers,
    report_validation,
    tracker_logs,
    tracker_names,
)
from recipe_paths import recipe_params

PAPER_POOLS = ["2qwen", "3qwen", "4qwen", "llama-mist", "qwen-phi4"]


@pytest.mark.parametrize("pool", PAPER_POOLS)
def test_pools_show_prints_plain_kl_and_exact_verifier(pool, capsys):
    assert run(["pools", "show", pool]) == 0
    out = capsys.readouterr().out
    assert "use_bias_correction_kl: false" in out
    assert "verifier: exact" in out


# ---------------------------------------------------------------------------------------
# Every shipped recipe loads; every tracker it names is installed; validation reaches it
# ---------------------------------------------------------------------------------------

RECIPES = sorted(recipes_dir().rglob("*.yaml"))
FRAGMENTS = [p for p in RECIPES if "pool" not in load_recipe_data(p)]  # shared settings, e.g. base/paper.yaml


def _id(path: Path) -> str:
    return str(path.relative_to(recipes_dir()))


@pytest.mark.parametrize("path", [p for p in RECIPES if p not in FRAGMENTS], ids=_id)
def test_every_recipe_loads(path):
    from mutualrl.launch.run import check_task

    config = load_run_config(str(path)).config
    check_task(config)
    assert config.pool.policies


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=_id)
def test_every_shared_fragment_is_extended(fragment):
    def parents(path: Path) -> list[Path]:
        named = (yaml.safe_load(path.read_text()) or {}).get("extends") or []
        return [(path.parent / p).resolve() for p in ([named] if isinstance(named, str) else named)]

    assert any(fragment.resolve() in parents(p) for p in RECIPES), f"{fragment} is extended by no recipe"


def named_trackers() -> set[str]:
    names: set[str] = set()
    for path in RECIPES:
        if path in FRAGMENTS:
            continue
        config = load_run_config(str(path)).config
        for grpo in [config.grpo, *(p.grpo for p in config.pool.policies)]:
            names.update(tracker_names(grpo.get("report_to")))
    return names


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r.strip(), maxsplit=1)[0].lower() for r in requirements}


def test_every_tracker_a_recipe_names_is_a_dependency():
    """./setup.sh installs the project's dependencies, so every named tracker must be one."""
    with (Path(__file__).resolve().parents[1] / "pyproject.toml").open("rb") as fh:
        declared = _requirement_names(tomllib.load(fh)["project"]["dependencies"])
    names = named_trackers()
    assert "tensorboard" in names  # the paper recipes log to TensorBoard
    assert {TRACKER_MODULES[name][0] for name in names} <= declared


def test_every_tracker_a_recipe_names_imports():
    """After ./setup.sh (pip install -e .) every tracker imports and transformers' callback starts."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        installed = _requirement_names(requires("mutualrl") or [])
    except PackageNotFoundError:
        installed = set()
    names = named_trackers()
    stale = {TRACKER_MODULES[name][0] for name in names} - installed
    assert not stale, (f"this environment was installed before {', '.join(sorted(stale))} became a dependency: "
                       "run ./setup.sh again")
    assert missing_trackers(sorted(names)) == []
    from transformers.integrations import INTEGRATION_TO_CALLBACK

    for name in names:  # transformers' own callback starts (it imports its SummaryWriter, ...)
        if name == "tensorboard":
            assert INTEGRATION_TO_CALLBACK[name]()._SummaryWriter is not None


def test_missing_and_unknown_trackers_are_named():
    assert tracker_names("none") == [] and tracker_names(None) == [] and tracker_names("wandb") == ["wandb"]
    problems = missing_trackers(["surely-no-such-tracker"])
    assert len(problems) == 1 and "unknown tracker 'surely-no-such-tracker'" in problems[0]


def test_validation_reward_per_task_reaches_the_trackers():
    metrics = {"eval/n": 20, "eval/reward@1": 0.5, "eval/math/reward@1": 0.25, "eval/arc/reward@1": 0.75,
               "eval/group/add/reward@1": 1.0}
    assert tracker_logs(metrics) == {"eval_n": 20.0, "eval_reward@1": 0.5, "eval_math/reward@1": 0.25,
                                     "eval_arc/reward@1": 0.75, "eval_group/add/reward@1": 1.0}

    class Tracker:
        def __init__(self):
            self.calls = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.calls.append((state.global_step, logs))

    class Other:  # not a tracker: left alone
        def on_log(self, *a, **k):
            raise AssertionError("called")

    tracker = Tracker()

    class Handler:
        def __init__(self):
            self.callbacks = [Other(), tracker]

    class Trainer:
        args, control, callback_handler = object(), object(), Handler()

    class State:
        global_step = 20

    assert report_validation(Trainer(), State(), metrics, tracker_types=(Tracker,)) == 1
    assert tracker.calls == [(20, tracker_logs(metrics))]
    # transformers files eval_* keys under eval/: the tracker shows eval/math/reward@1.
    from transformers.integrations.integration_utils import rewrite_logs

    assert "eval/math/reward@1" in rewrite_logs(tracker.calls[0][1])


# ---------------------------------------------------------------------------------------
# Every experiment is a recipe
# ---------------------------------------------------------------------------------------

COMMONSENSE_POOLS = ["3qwen", "4qwen", "llama-mist", "qwen-phi4"]


@pytest.mark.parametrize("recipe", recipe_params([f"commonsense-{pool}" for pool in COMMONSENSE_POOLS]))
def test_commonsense_recipe_dry_runs_on_8_gpus(recipe, tmp_path):
    from plan_helpers import dry_run

    pool = recipe.removeprefix("commonsense-")
    config = load_run_config(f"commonsense-{pool}").config
    assert (config.pool.name, config.task.name, config.task.verifier) == (pool, "math-qa-mix", "exact")
    assert config.schedule.max_steps == 50 and config.grpo["use_bias_correction_kl"] is False
    plan = dry_run(f"commonsense-{pool}", gpus=8, run_dir=tmp_path, write=False)
    assert not any(tmp_path.iterdir())  # a dry run writes nothing
    for p in plan.policies:
        assert p.grpo["max_steps"] == 200  # 50 paper steps of 1024 prompts in 4 mini-batches
        assert p.batch.prompts_per_step == 1024 and p.placement.device_type == "cuda"
    assert plan.regime == "sgt"


def test_math_qa_mix_is_math_plus_the_six_qa_tasks_each_with_its_own_check():
    from mutualrl.tasks import make_reward_function
    from mutualrl.tasks.registry import get_task

    task = get_task("math-qa-mix")
    assert task.components == ("math", "arc", "openbookqa", "boolq", "piqa", "hellaswag", "siqa")
    assert task.splits == ("train", "test")
    reward = make_reward_function("math-qa-mix", "exact")
    completions = ["\\boxed{\\frac{1}{2}}", "\\boxed{\\dfrac{1}{2}}", "\\boxed{B}", "\\boxed{(B)}", "\\boxed{Yes}"]
    answers = ["\\frac{1}{2}", "\\frac{1}{2}", "B", "B", "Yes"]
    tasks = ["math", "math", "arc", "piqa", "boolq"]
    assert reward(completions=completions, answer=answers, task=tasks) == [1.0, 0.0, 1.0, 0.0, 1.0]
    # Without a task column: letters and Yes/No are choices, anything else a MATH answer.
    strict = task.with_verifier("exact")
    assert [strict.score(c, a) for c, a in zip(completions, answers)] == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_controls_are_recipes_with_their_own_run_folders():
    naive = load_run_config("prp-naive-2qwen").config
    corrected = load_run_config("prp-corrected-2qwen").config
    assert (naive.regime.name, naive.regime.prp.denominator) == ("prp", "learner")
    assert (corrected.regime.name, corrected.regime.prp.denominator) == ("prp", "peer")
    assert naive.output_dir != corrected.output_dir
    assert load_run_config("xgrpo-2qwen").config.regime.name == "xgrpo"
    assert load_run_config("grpo-randpert-2qwen").config.regime.name == "grpo-randpert"
