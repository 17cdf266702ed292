"""The plan refuses a run no step of which could train (fewer train prompts than one step draws), counts the
optimizer steps of every run length as transformers will, and warns where ``max_steps`` outruns the epochs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from mutualrl.config.cadence import describe, resolve_cadence
from mutualrl.config.schema import BatchConfig, ScheduleConfig
from mutualrl.launch.plan.run_length import (
    TooFewPromptsError,
    check_train_prompts,
    optimizer_steps_per_epoch,
    run_steps,
)
from mutualrl.launch.supervise.worker_output import EMPTY_EPOCH, file_marks, unfinished_exit
from mutualrl.run_folder import RunPaths
from test_cli_errors import assert_one_line_error, run_cli, snapshot

TINY = {"num_generations": 4, "per_device_train_batch_size": 32, "gradient_accumulation_steps": 1, "max_steps": 400}


def plans(rows: list[tuple[str, dict, int]]) -> list[SimpleNamespace]:
    """Stand-ins of PolicyPlan: (name, final GRPO fields, world size) each."""
    return [SimpleNamespace(name=name, grpo=grpo, placement=SimpleNamespace(world_size=world))
            for name, grpo, world in rows]


PAPER_8 = {"num_generations": 5, "per_device_train_batch_size": 10, "gradient_accumulation_steps": 16,
           "steps_per_generation": 64, "num_train_epochs": 15}
"""The paper batch (1024 prompts, 4 mini-batches, 2 prompts a device) on a policy's 8 GPUs (batching.py)."""


def test_fewer_prompts_than_one_step_are_refused_naming_the_figure_and_a_batch_that_splits():
    batch = BatchConfig(prompts_per_step=1024, mini_batches_per_step=4, micro_batch_prompts_per_device=2)
    paper_4 = {**PAPER_8, "steps_per_generation": 128, "gradient_accumulation_steps": 32}
    with pytest.raises(TooFewPromptsError) as refused:
        check_train_prompts(plans([("a", paper_4, 4), ("b", paper_4, 4)]), 240, batch, "task.source rows.jsonl")
    line = str(refused.value)
    assert "\n" not in line
    assert "task.source rows.jsonl: 240 train prompts, fewer than the 1,024 one step of a draws" in line
    # 2 prompts x 4 GPUs x 4 mini-batches: a multiple of 32 splits; 224 is the largest within 240
    assert "--set batch.prompts_per_step=224" in line
    assert check_train_prompts(plans([("a", paper_4, 4)]), 1024, batch, "x") == []  # one whole step is enough


def test_a_recipe_without_batch_is_told_the_per_device_batch_that_fits():
    with pytest.raises(TooFewPromptsError, match=r"6 train prompts, fewer than the 8 one step of tiny-bpe draws.*"
                                                 r"--set grpo.per_device_train_batch_size=24"):
        check_train_prompts(plans([("tiny-bpe", TINY, 1)]), 6, None, "task synthetic-arith")
    assert check_train_prompts(plans([("tiny-bpe", TINY, 1)]), 8, None, "task synthetic-arith") == []
    assert check_train_prompts(plans([("tiny-bpe", TINY, 1)]), None, None, "unknown") == []  # nothing known: no check
    # launch.cpu_processes=2: the plan split the recipe's 32 into 16 a rank; the fix is the recipe's figure again
    split = plans([("tiny-bpe", {**TINY, "per_device_train_batch_size": 16}, 2)])
    split[0].placement.device_type = "cpu"
    with pytest.raises(TooFewPromptsError, match=r"than the 8 one step.*grpo.per_device_train_batch_size=24"):
        check_train_prompts(split, 6, None, "task synthetic-arith")


@pytest.mark.slow  # importing TRL's sampler: ~7 s of CPU
@pytest.mark.parametrize("grpo,world,prompts", [
    (TINY, 1, 8), (TINY, 1, 103), ({**TINY, "gradient_accumulation_steps": 4}, 1, 100),
    ({**TINY, "steps_per_generation": 4, "gradient_accumulation_steps": 2, "num_iterations": 2}, 1, 100),
    ({**TINY, "steps_per_generation": 6, "gradient_accumulation_steps": 4}, 1, 500),  # a last, shorter accumulation
    ({**TINY, "generation_batch_size": 64}, 1, 70),
])
def test_steps_an_epoch_holds_are_transformers_own_count_over_trls_sampler(grpo, world, prompts):
    """TRL's RepeatSampler over ``prompts`` rows and the dataloader batch TRL asks for (per-device x
    steps_per_generation), then transformers' count of optimizer steps an epoch (``set_initial_training_values``)."""
    from trl.trainer.utils import RepeatSampler

    per_device, k = grpo["per_device_train_batch_size"], grpo["num_generations"]
    completions = grpo.get("generation_batch_size") or per_device * world * grpo.get(
        "steps_per_generation", grpo["gradient_accumulation_steps"])
    spg = completions // (per_device * world)
    sampler = RepeatSampler(list(range(prompts)), mini_repeat_count=k, batch_size=completions // k,
                            repeat_count=grpo.get("num_iterations", 1) * spg, shuffle=True, seed=0)
    batches = math.ceil(len(sampler) / (per_device * spg))  # the dataloader (drop_last false), one process
    ga = grpo["gradient_accumulation_steps"]
    assert optimizer_steps_per_epoch(grpo, world, prompts) == batches // ga + int(batches % ga > 0)


def test_every_run_length_is_a_step_count_and_max_steps_beyond_the_epochs_is_said():
    epochs = {**TINY, "max_steps": None, "num_train_epochs": 3}
    assert run_steps(epochs, 1, 100) == 36  # 12 batches of 8 prompts (4 dropped) x 3 epochs
    assert run_steps(epochs, 1, None) is None and run_steps(TINY, 1, None) == 400
    rows = {row[0]: row[2] for row in describe(None, epochs, 5, 100, optimizer_steps_per_epoch(epochs, 1, 100))}
    length = "run length (max_steps; LR schedule length)"
    assert rows[length] == "36 (= 3 epochs x 12 optimizer steps of 100 train prompts)"
    rows = {row[0]: row[2] for row in describe(None, TINY, 5, 100, 12)}
    assert rows["run length (max_steps; LR schedule length)"] == "400 (= 33.3 epochs of 100 train prompts)"
    paper = resolve_cadence(ScheduleConfig(unit="paper"), BatchConfig(prompts_per_step=224, mini_batches_per_step=4,
                                                                     micro_batch_prompts_per_device=2))
    paper_grpo = {**PAPER_8, "steps_per_generation": 28, "gradient_accumulation_steps": 7}
    rows = {row[0]: row[2] for row in describe(paper, paper_grpo, 20, 240,
                                                optimizer_steps_per_epoch(paper_grpo, 4, 240))}
    assert rows["run length (max_steps; LR schedule length)"] == (
        "60 (= 15 epochs x 1 paper step of 240 train prompts, 15 paper steps)")
    warned = check_train_prompts(plans([("p", {**TINY, "num_train_epochs": 2}, 1)]), 100, None, "task")
    assert len(warned) == 1 and "max_steps 400 is more than grpo.num_train_epochs 2 reach (24 optimizer" in warned[0]


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_dry_run_of_the_paper_pool_on_240_rows_exits_naming_the_prompts_a_step_needs(workdir, capsys):
    """``mutualrl train --pool 2qwen --gpus 8 --dry-run`` on a local dataset of 240 train rows (267, a tenth held
    out): one line, exit 2, nothing written."""
    (workdir / "rows.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                                                for i in range(267)))
    before = snapshot(workdir)
    code, err = run_cli(["train", "--pool", "2qwen", "--gpus", "8", "--dry-run", "-o", "run", "--set",
                         "task.name=dataset", "--set", "task.source=rows.jsonl", "--set",
                         "task.reward_funcs=[think_format_reward]"], capsys)
    assert_one_line_error(code, err, "240 train prompts, fewer than the 1,024 one step",
                          "--set batch.prompts_per_step=224")
    assert snapshot(workdir) == before


def test_a_cpu_run_with_fewer_prompts_than_a_step_is_refused_before_any_worker_starts(workdir, capsys):
    """The tiny pool draws 8 prompts a step; 6 used to end "with code 0 at step 0" after the workers loaded."""
    code, err = run_cli(["train", "-o", "run", "--set", "task.train_limit=6"], capsys)
    assert_one_line_error(code, err, "6 train prompts, fewer than the 8 one step of tiny-bpe draws",
                          "--set grpo.per_device_train_batch_size=24")
    assert not (workdir / "run").exists()  # refused before any worker started: no half-made folder left


def test_a_worker_ended_by_an_empty_epoch_is_reported_with_that_cause(tmp_path):
    paths = RunPaths(tmp_path)
    marks = file_marks(paths, "tiny-bpe")
    log = tmp_path / "tiny-bpe.log"
    log.write_text("loading\nThere seems not to be a single sample in your epoch_iterator, stopping training at step "
                   "0! This is expected if you're using an IterableDataset and set num_steps (400) higher than the "
                   "number of available samples.\n")
    reason = unfinished_exit(paths, "tiny-bpe", marks, max_steps=400, log_path=log)
    assert reason is not None and "at step 0 of 400: transformers found no batch in an epoch" in reason
    assert "fewer train prompts than one step draws" in reason and "reward function" not in reason
    log.write_text("loading\n")
    import importlib.util

    trainer = Path(importlib.util.find_spec("transformers").origin).parent / "trainer.py"  # read, not imported
    assert EMPTY_EPOCH in trainer.read_text()  # the warning's own words
    assert "e.g. a reward function" in unfinished_exit(paths, "tiny-bpe", marks, max_steps=400, log_path=log)


def test_the_prepared_prompts_are_counted_for_the_plan(tmp_path):
    from mutualrl.launch.rundir.prepare import prepared_train_prompts

    paths = RunPaths(tmp_path)
    assert prepared_train_prompts(paths) is None
    paths.data.mkdir(parents=True)
    (paths.data / "train.jsonl").write_text('{"prompt": "1"}\n{"prompt": "2"}\n\n')
    assert prepared_train_prompts(paths) == 2
