"""Bring your own task (issue 39): the ``dataset`` task, ``task.reward_funcs`` resolved and combined as TRL does,
``plugins`` and ``package.module:Class`` tasks, and the launcher's checks that refuse them before any worker."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from mutualrl.config.plugins import import_plugins
from mutualrl.errors import DataError, UsageError
from mutualrl.tasks.registry import get_task, task_from_config
from mutualrl.tasks.reward_funcs import RewardSpec, resolve_reward_func, reward_functions, score_batch
from mutualrl.tasks.user_dataset import UserDatasetTask, held_out_indices

REWARD_MODULE = '''
def exact(prompts, completions, completion_ids, answer, family, **kwargs):
    return [1.0 if str(c).strip() == str(a) else 0.0 for c, a in zip(completions, answer)]

def half_or_none(prompts, completions, completion_ids, **kwargs):
    return [None if c == "skip" else 0.5 for c in completions]

NOT_A_FUNCTION = 3
'''

TASK_MODULE = '''
from mutualrl.tasks.base import Task, TaskExample
from mutualrl.tasks.registry import register_task

class Echo(Task):
    name = "byo-echo"
    def load(self, split, source=None, limit=None):
        return [TaskExample(prompt_id=f"echo/{i}", prompt=f"{i}=", answer=str(i), task=self.name) for i in range(3)]
    def score(self, completion, answer):
        return float(completion.strip() == answer)

register_task("byo-registered", "byo_task_mod:Echo")
'''


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"prompt": f"{i}+1=", "answer": i + 1, "family": "add" if i % 2 else "sub"}
            for i in range(start, start + n)]


@pytest.fixture()
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder outside the repository with the user's modules, as the working directory."""
    (tmp_path / "byo_rewards.py").write_text(REWARD_MODULE)
    (tmp_path / "byo_task_mod.py").write_text(TASK_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the importer puts the working directory first: undone after
    yield tmp_path
    for name in ("byo_rewards", "byo_task_mod"):
        sys.modules.pop(name, None)


def configured(eval_fraction: float | None = None, seed: int = 0) -> UserDatasetTask:
    task = get_task("dataset")
    task.configure("train", "test", eval_fraction, seed)
    return task


# -- the dataset task ----------------------------------------------------------------------


def test_a_folder_with_two_splits_keeps_every_column_and_stable_ids(tmp_path: Path) -> None:
    write_rows(tmp_path / "d" / "train.jsonl", rows(5))
    write_rows(tmp_path / "d" / "test.jsonl", [{**r, "id": f"q{i}"} for i, r in enumerate(rows(2, 50))])
    task = configured()
    train, test = task.load("train", str(tmp_path / "d")), task.load("test", str(tmp_path / "d"))
    assert [ex.prompt_id for ex in train][:2] == ["dataset/train/00000", "dataset/train/00001"]
    assert [ex.prompt_id for ex in test] == ["dataset/q0", "dataset/q1"]  # an id column wins
    row = train[1].as_row()
    assert row["family"] == "add" and row["answer"] == 2 and row["task"] == "dataset" and row["prompt"] == "1+1="


def test_one_file_holds_out_a_seeded_fraction_the_same_in_every_process(tmp_path: Path) -> None:
    source = str(write_rows(tmp_path / "all.jsonl", rows(20)))
    train, held = configured().load("train", source), configured().load("test", source)
    assert len(held) == 2 and len(train) == 18  # default 0.1
    assert not {e.prompt_id for e in train} & {e.prompt_id for e in held}
    assert [e.prompt_id for e in configured().load("test", source)] == [e.prompt_id for e in held]
    assert [e.prompt_id for e in configured(0.25, seed=1).load("test", source)] != [e.prompt_id for e in held]
    assert len(configured(0.25).load("test", source)) == 5
    assert held_out_indices(2, 0.9, 0) and len(held_out_indices(2, 0.9, 0)) == 1  # one row left to train on


def test_chat_message_prompts_reach_chat_policies_as_messages(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2="}]
    source = str(write_rows(tmp_path / "d" / "train.jsonl", [{"prompt": messages, "answer": 4}] * 1))
    write_rows(tmp_path / "d" / "test.jsonl", [{"prompt": "3+3=", "answer": 6}])
    (ex,) = configured().load("train", str(Path(source).parent))
    assert ex.for_policy(True) == messages
    assert ex.for_policy(False) == "Be brief.\n\n2+2="


@pytest.mark.parametrize("row, needle", [({"question": "x"}, "no field 'prompt'"),
                                         ({"prompt": "x", "task": "t"}, "'task', which mutualrl sets"),
                                         ({"prompt": 3}, "text or a list of chat messages")])
def test_bad_rows_name_the_row_and_the_column(tmp_path: Path, row: dict, needle: str) -> None:
    source = str(write_rows(tmp_path / "x.jsonl", [row, row]))
    with pytest.raises(DataError, match=needle):
        configured().load("train", source)


def test_source_is_checked_before_a_launch(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs task.source"):
        configured().check_source(None)
    with pytest.raises(UsageError, match="neither an existing file"):
        configured().check_source(str(tmp_path / "missing.jsonl"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no split 'train'"):
        configured().check_source(str(tmp_path / "empty"))
    configured().check_source("owner/name:config")  # a hub id: read (and checked) by datasets.load_dataset


def test_a_misnamed_split_lists_the_data_files_and_the_set_that_reads_them(tmp_path: Path) -> None:
    """A new user's folder held my_train.jsonl: the error names the files found (up to 5) and the --set."""
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("my_train.jsonl", "my_test.jsonl", "notes.txt"):
        (folder / name).write_text('{"prompt": "2+3=", "answer": 5}\n')
    with pytest.raises(DataError) as err:
        configured().check_source(str(folder))
    message = str(err.value)
    assert "no split 'train'" in message and "its data files: my_test.jsonl, my_train.jsonl" in message
    assert "notes.txt" not in message
    assert "--set task.train_split=my_train" in message and "--set task.eval_split=my_test" in message
    for i in range(6):
        (folder / f"part{i}.parquet").write_text("")
    with pytest.raises(DataError, match=r"part2.parquet \.\.\.;"):
        configured().check_source(str(folder))


# -- reward functions ------------------------------------------------------------------------


def test_names_resolve_as_trl_grpo_resolves_them(user_code: Path) -> None:
    assert resolve_reward_func("byo_rewards.exact").__name__ == "exact"  # from the working directory
    assert resolve_reward_func("think_format_reward").__name__ == "think_format_reward"  # TRL's own
    with pytest.raises(UsageError, match=r"task.reward_funcs: cannot import module 'nope_mod'.*working directory"):
        resolve_reward_func("nope_mod.fn")
    with pytest.raises(UsageError, match="has no 'missing'"):
        resolve_reward_func("byo_rewards.missing")
    with pytest.raises(UsageError, match="is not a function"):
        resolve_reward_func("byo_rewards.NOT_A_FUNCTION")
    with pytest.raises(UsageError, match="neither one of TRL's reward functions"):
        resolve_reward_func("exact")


def test_a_builtin_verifier_comes_first_and_weights_must_match(user_code: Path) -> None:
    funcs = reward_functions(RewardSpec("synthetic-arith", funcs=("byo_rewards.half_or_none",)))
    assert [f.__name__ for f in funcs] == ["verifier", "half_or_none"]
    with pytest.raises(UsageError, match=r"grpo.reward_weights: 1 weight\(s\) for 2 reward function\(s\) "
                                         r"\(verifier, byo_rewards.half_or_none\)"):
        reward_functions(RewardSpec("synthetic-arith", funcs=("byo_rewards.half_or_none",), weights=(1.0,)))
    with pytest.raises(UsageError, match="no built-in verifier: name your reward functions"):
        reward_functions(RewardSpec("dataset"))


def test_combined_reward_is_trl_weighted_nansum(user_code: Path) -> None:
    spec = RewardSpec("dataset", funcs=("byo_rewards.exact", "byo_rewards.half_or_none"), weights=(2.0, 1.0))
    columns = {"answer": [3, 3, 3], "family": ["add"] * 3}
    scores = score_batch(spec, ["1+2="] * 3, ["3", "4", "skip"], [[1], [2], [3]], columns)
    assert scores == [2.5, 0.5, 0.0]  # None is missing: "skip" scores 0 from exact and nothing from the other


def test_greedy_scoring_uses_the_runs_reward_functions(user_code: Path) -> None:
    from mutualrl.evaluation.generate import score_examples

    source = str(write_rows(user_code / "d.jsonl", rows(10)))
    examples = configured().load("test", source)
    spec = RewardSpec("dataset", funcs=("byo_rewards.exact",))
    records = score_examples(examples, [str(ex.as_row()["answer"]) for ex in examples], spec)
    assert [r.score for r in records] == [1.0] * len(examples)
    with pytest.raises(UsageError, match="no built-in verifier"):
        score_examples(examples, ["1"] * len(examples), "default")


# -- plugins and task classes ---------------------------------------------------------------


def test_plugins_and_class_paths_register_tasks_in_this_process(user_code: Path) -> None:
    import_plugins(["byo_task_mod"])
    assert get_task("byo-registered").name == "byo-echo"
    task = get_task("byo_task_mod:Echo")
    assert len(task.load("train")) == 3 and get_task("byo-echo").score("1", "1") == 1.0  # rows name it "byo-echo"
    with pytest.raises(UsageError, match=r"plugins\[1\]: cannot import module 'no_such_plugin'"):
        import_plugins(["byo_task_mod", "no_such_plugin"])
    with pytest.raises(UsageError, match="task.name: module 'byo_task_mod' has no 'Nope'"):
        get_task("byo_task_mod:Nope")


def test_the_launcher_refuses_a_reward_function_that_does_not_import(user_code: Path) -> None:
    from mutualrl.launch.run import TrainOptions, resolve_config

    write_rows(user_code / "data" / "train.jsonl", rows(8))
    sets = ["task.name=dataset", f"task.source={user_code / 'data'}"]
    config, _ = resolve_config(TrainOptions(overrides=[*sets, "task.reward_funcs=[byo_rewards.exact]"]))
    assert task_from_config(config.task).holds_out(config.task.source)  # no test split: 10% held out
    with pytest.raises(UsageError, match=r"task.reward_funcs\[0\]: cannot import module 'typo_rewards'"):
        resolve_config(TrainOptions(overrides=[*sets, "task.reward_funcs=[typo_rewards.exact]"]))
    with pytest.raises(UsageError, match="plugins"):
        resolve_config(TrainOptions(overrides=[*sets, "task.reward_funcs=[byo_rewards.exact]", "plugins=[nope_x]"]))


# -- the Python API --------------------------------------------------------------------------


def test_import_mutualrl_stays_light_and_offers_the_api() -> None:
    import subprocess

    code = ("import sys, mutualrl; assert callable(mutualrl.train) and callable(mutualrl.evaluate); "
            "print('torch' in sys.modules, 'trl' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert out.stdout.split() == ["False", "False"]


def test_importable_reward_callables_go_to_the_workers_by_their_path(user_code: Path) -> None:
    from mutualrl.api import load_config, override_texts, reward_func_path

    from mutualrl.config.plugins import import_module_for

    exact = import_module_for("byo_rewards", "test").exact  # the user's module, from the working directory

    assert reward_func_path(exact) == "byo_rewards.exact"  # importable: by its path (lambdas and closures are
    # shipped by value: tests/test_api_shipped_rewards.py)
    assert override_texts({"task.source": "d/", "validation.limit": 4}, [exact]) == [
        'task.source="d/"', "validation.limit=4", 'task.reward_funcs=["byo_rewards.exact"]']
    write_rows(user_code / "data" / "train.jsonl", rows(8))
    config = load_config(overrides={"task.name": "dataset", "task.source": str(user_code / "data")},
                         reward_funcs=[exact])
    assert config.task.reward_funcs == ["byo_rewards.exact"]


def test_sgt_thresholds_outside_the_rewards_range_are_named_at_the_first_step() -> None:
    import torch

    from mutualrl.regimes.sgt.maths import threshold_problem

    assert threshold_problem(torch.tensor([0.0, 1.0, 0.0]), 0.8, 0.2) is None  # 0/1 rewards
    assert threshold_problem(torch.tensor([0.0, 0.0]), 0.8, 0.2) is None  # nothing solved yet: usual early on
    assert "no reward exceeded success_threshold=0.8" in threshold_problem(torch.tensor([0.0, 0.5]), 0.8, 0.2)
    assert "no reward is below failure_threshold=0.2" in threshold_problem(torch.tensor([1.0, 3.0]), 2.5, 0.2)
    assert threshold_problem(torch.tensor([1.0, 3.0]), 2.5, 1.5) is None  # thresholds set inside a 1..3 reward


REGIME_PLUGIN = '''
from dataclasses import dataclass
from mutualrl.regimes.core.registry import RegimeSpec, register_regime

@dataclass
class EchoRegimeSettings:
    pass

register_regime(RegimeSpec(name="byo-echo-regime", help="a plugin's regime", needs_peers=False))
'''


def test_a_plugin_regime_and_task_are_known_wherever_the_config_is_loaded(user_code: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher loads the recipe (config/loader.py), every worker RUN/config.yaml (config/resolved.py):
    both import ``plugins`` before the regime and task names are read."""
    from mutualrl.config.loader import load_run_config
    from mutualrl.config.recorded_code import allowed_code_env
    from mutualrl.config.resolved import load_resolved_config, write_resolved_config
    from mutualrl.launch.rundir.inputs import record_inputs
    from mutualrl.regimes.core.registry import unregister_regime
    from mutualrl.run_folder import RunPaths

    (user_code / "byo_regime_plugin.py").write_text(REGIME_PLUGIN)
    try:
        config = load_run_config("tiny", overrides=["plugins=[byo_regime_plugin, byo_task_mod]",
                                                    "regime.name=byo-echo-regime", "task.name=byo-registered"],
                                 check_grpo=False).config
        paths = RunPaths(user_code / "run")
        paths.root.mkdir()
        write_resolved_config(paths, config, "test")
        record_inputs(paths, config)  # as the launcher records the code a run starts with
        unregister_regime("byo-echo-regime")  # as in a fresh worker process: only the config names it
        sys.modules.pop("byo_regime_plugin")
        monkeypatch.setenv(*allowed_code_env(["byo_regime_plugin", "byo_task_mod"]).popitem())  # its launcher's
        assert load_resolved_config(paths).regime.name == "byo-echo-regime"
    finally:
        unregister_regime("byo-echo-regime")
        sys.modules.pop("byo_regime_plugin", None)


TRL_CONFIG = '''# what `trl grpo --config grpo.yaml` reads, plus the one line naming the pool's models
model_name_or_path: builtin:tiny-bpe
models: [builtin:tiny-bpe, builtin:tiny-sp]
dataset_name: data
dataset_test_split: test
reward_funcs: [byo_rewards.exact, think_format_reward]
reward_weights: [1.0, 0.1]
learning_rate: 3.0e-4
num_generations: 4
per_device_train_batch_size: 8
max_completion_length: 4
max_steps: 2
output_dir: runs/from-trl
use_peft: true
lora_r: 8
torch_dtype: bfloat16
regime: {name: sgt}
'''


def test_a_trl_grpo_config_file_is_a_recipe(user_code: Path) -> None:
    from mutualrl.launch.run import TrainOptions, resolve_config, run_dir_for

    write_rows(user_code / "data" / "train.jsonl", rows(8))
    (user_code / "grpo.yaml").write_text(TRL_CONFIG)
    # the builtin models hold 256 positions: mutualrl's default prompt cap (1024) is refused for them (issue 42)
    config, _ = resolve_config(TrainOptions(pool=str(user_code / "grpo.yaml"), max_steps=3,
                                            overrides=["task.max_prompt_tokens=64"]))
    assert [(p.name, p.model, p.lora) for p in config.pool.policies] == [
        ("tiny-bpe", "builtin:tiny-bpe", {"r": 8}), ("tiny-sp", "builtin:tiny-sp", {"r": 8})]
    assert (config.task.name, config.task.source, config.task.eval_split) == ("dataset", "data", "test")
    assert config.task.reward_funcs == ["byo_rewards.exact", "think_format_reward"]
    assert config.grpo["learning_rate"] == 3.0e-4 and config.grpo["max_steps"] == 3 and config.regime.name == "sgt"
    assert run_dir_for(config) == (user_code / "runs" / "from-trl").resolve()
    (user_code / "one.yaml").write_text("model_name_or_path: builtin:tiny-bpe\ndataset_name: data\n"
                                        "reward_funcs: [byo_rewards.exact]\nregime: {name: sgt}\n")
    from mutualrl.config.typed import ConfigError

    with pytest.raises(ConfigError, match="needs at least 2"):
        resolve_config(TrainOptions(pool=str(user_code / "one.yaml")))


def test_a_loaded_config_passed_to_train_is_the_same_recipe(tmp_path: Path) -> None:
    from mutualrl.api import load_config, recipe_source
    from mutualrl.config.loader import load_run_config
    from mutualrl.config.typed import to_plain

    config = load_config("tiny", regime="xgrpo", overrides=["grpo.learning_rate=1e-4"], max_steps=3)
    again = load_run_config(recipe_source(config, tmp_path)).config
    assert to_plain(again) == to_plain(config) and again.regime.name == "xgrpo" and again.grpo["max_steps"] == 3
    assert recipe_source("tiny", tmp_path) == "tiny"


def test_a_run_read_from_another_folder_names_where_its_workers_imported_user_code_but_does_not_search_it(
        user_code: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mutualrl eval RUN`` (or the API) run elsewhere: the run's launch folder, from its plan, is named in the
    import error, never searched (a run folder is data: a path only it names is not trusted either)."""
    from mutualrl.config import plugins
    from mutualrl.run_folder import RunPaths, launch_folders

    run = RunPaths(tmp_path_factory.mktemp("run"))
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in (str(user_code), "")])
    monkeypatch.setattr(plugins, "_DATA_FOLDERS", [])
    monkeypatch.setattr(plugins, "_HINT_FOLDERS", [])
    with pytest.raises(UsageError, match="cannot import module 'byo_rewards'") as err:
        resolve_reward_func("byo_rewards.exact", "task.reward_funcs[0]")
    assert "workers ran from" not in str(err.value)

    run.plan.parent.mkdir(parents=True)
    run.plan.write_text(json.dumps({"policies": [
        {"launch": {"cwd": str(user_code), "env": {"PYTHONPATH": f"/nonexistent{os.pathsep}"}}},
        {"launch": {"cwd": str(user_code), "env": {}}}]}))
    assert launch_folders(run) == [user_code, Path("/nonexistent")]
    plugins.open_run_folder(run.root, launch_folders(run))
    assert str(user_code) not in sys.path
    with pytest.raises(UsageError, match=r"the run's workers ran from .+, /nonexistent; a run folder's own "
                                         r"record is not searched"):
        resolve_reward_func("byo_rewards.exact", "task.reward_funcs[0]")
    monkeypatch.syspath_prepend(str(user_code))  # the user puts it on the path: found
    assert callable(resolve_reward_func("byo_rewards.exact", "task.reward_funcs[0]"))
