"""Run length and cadence in paper steps -> optimizer steps (paper App. "Implementation details")."""

from __future__ import annotations

import pytest
from rich.console import Console

from mutualrl.config import ConfigError, load_run_config
from mutualrl.config.schema import BatchConfig, ScheduleConfig
from mutualrl.errors import UsageError
from mutualrl.config.cadence import (
    apply_cadence,
    epoch_length,
    max_optimizer_steps,
    optimizer_steps_per_paper_step,
    resolve_cadence,
    validation_interval,
)
from mutualrl.launch.plan.render import render_plan
from plan_helpers import dry_run

PAPER_BATCH = BatchConfig(prompts_per_step=1024, mini_batches_per_step=4, micro_batch_prompts_per_device=2)
PAPER_SCHEDULE = ScheduleConfig(unit="paper", max_steps=50, warmup_steps=0, save_every=20, log_every=1,
                                validate_every=5)


def test_paper_cadence_in_optimizer_steps():
    # One paper step = 1024 prompts in 4 mini-batches = 4 optimizer steps.
    cadence = resolve_cadence(PAPER_SCHEDULE, PAPER_BATCH)
    assert cadence.optimizer_steps_per_unit == 4
    assert validation_interval(cadence, None) == 20  # validation every 5 paper steps
    assert cadence.grpo_fields() == {"max_steps": 200, "warmup_steps": 0, "save_steps": 80, "logging_steps": 4}


def test_generation_reuse_multiplies_the_optimizer_steps_of_a_paper_step():
    assert optimizer_steps_per_paper_step(4, num_iterations=2) == 8
    cadence = resolve_cadence(PAPER_SCHEDULE, PAPER_BATCH, num_iterations=2)
    assert cadence.optimizer("validate_every") == 40 and cadence.optimizer("save_every") == 160
    with pytest.raises(ValueError):
        optimizer_steps_per_paper_step(0)


def test_optimizer_unit_and_no_schedule_keep_counts_as_written():
    cadence = resolve_cadence(ScheduleConfig(unit="optimizer", save_every=7, validate_every=3), None)
    assert cadence.grpo_fields() == {"save_steps": 7} and validation_interval(cadence, None) == 3
    assert resolve_cadence(None, PAPER_BATCH) is None
    assert validation_interval(None, None) == 5  # the old default
    assert validation_interval(None, 20) == 20
    assert validation_interval(resolve_cadence(ScheduleConfig(validate_every=0), PAPER_BATCH), None) == 0
    grpo = {"save_steps": 100, "learning_rate": 1e-6}
    assert apply_cadence(grpo, None) == ({}, [])  # nothing decided: the recipe's counts stand


def test_the_schedule_decides_only_its_own_fields_and_names_a_value_it_replaces():
    cadence = resolve_cadence(ScheduleConfig(unit="optimizer", save_every=7), None)
    assert apply_cadence({"save_steps": 100, "learning_rate": 1e-6}, cadence) == (
        {"save_steps": 7}, ["grpo.save_steps=100 (a policy override) replaced by the schedule's 7"])
    assert apply_cadence({"save_steps": 7}, cadence) == ({"save_steps": 7}, [])


def test_paper_unit_needs_a_batch():
    with pytest.raises(UsageError, match="batch"):
        resolve_cadence(PAPER_SCHEDULE, None)
    with pytest.raises(ConfigError, match="schedule.unit"):
        load_run_config("tiny", overrides=["schedule.unit=paper"])


def test_epoch_length_as_trl_counts_it():
    # MATH train (7,500 prompts): 7 full batches of 1024 per epoch (TRL drops the rest); 15 epochs.
    cadence = resolve_cadence(ScheduleConfig(), PAPER_BATCH)
    assert epoch_length(15, 7500, cadence) == (7, 420)
    assert epoch_length(1.5, 7500, cadence) == (7, 42)
    # TRL's own sampler: 7 chunks of 1024 prompts per epoch, each repeated K x steps_per_generation times.
    from trl.trainer.utils import RepeatSampler

    sampler = RepeatSampler(range(7500), mini_repeat_count=5, batch_size=1024, repeat_count=1, seed=0)
    assert len(sampler) == 7 * 1024 * 5


def test_a_count_set_in_both_units_is_refused():
    with pytest.raises(ConfigError, match="grpo.save_steps"):
        load_run_config("2qwen", overrides=["grpo.save_steps=80"])
    with pytest.raises(ConfigError, match="validation.every_steps"):
        load_run_config("2qwen", overrides=["validation.every_steps=20"])
    # Dropping the schedule's count makes the optimizer-step field the one in force.
    cfg = load_run_config("2qwen", overrides=["grpo.save_steps=80", "schedule.save_every=null"]).config
    assert cfg.grpo["save_steps"] == 80


def test_max_steps_option_counts_in_the_recipe_unit():
    paper = load_run_config("2qwen", max_steps=3).config
    assert paper.schedule.max_steps == 3 and "max_steps" not in paper.grpo
    assert max_optimizer_steps(paper) == 12
    tiny = load_run_config("tiny", max_steps=3).config
    assert tiny.schedule is None and tiny.grpo["max_steps"] == 3 and max_optimizer_steps(tiny) == 3


def test_paper_plan_sets_trl_fields_and_shows_both_units(tmp_path):
    plan = dry_run("2qwen", gpus=8, run_dir=tmp_path, write=False)
    assert not any(tmp_path.iterdir())  # a dry run writes nothing
    for p in plan.policies:
        assert (p.grpo["save_steps"], p.grpo["logging_steps"], p.grpo["warmup_steps"]) == (80, 4, 0)
        assert "max_steps" not in p.grpo  # 15 epochs
        rows = {row[0]: row[1:] for row in p.schedule}
        assert rows["validate every"] == ["5 paper steps", "20"]
        assert rows["checkpoint every (save_steps)"] == ["20 paper steps", "80"]
        assert rows["run length (max_steps; LR schedule length)"][1].startswith("420 (= 15 epochs x 7 paper steps")
    console = Console(record=True, width=200)
    render_plan(plan, console, written=False)
    text = console.export_text()
    assert "Run length and cadence" in text and "20 paper steps" in text and "1024 prompts" in text


def test_tiny_pool_keeps_its_optimizer_step_counts(tmp_path):
    cfg = load_run_config("tiny").config
    assert cfg.schedule is None and cfg.validation.every_steps == 20
    plan = dry_run("tiny", run_dir=tmp_path, write=False)
    assert not any(tmp_path.iterdir())
    for p in plan.policies:
        assert (p.grpo["max_steps"], p.grpo["save_steps"], p.grpo["logging_steps"], p.grpo["warmup_steps"]) == (
            400, 100, 1, 10)
        assert {row[0]: row[2] for row in p.schedule}["validate every"] == "20"


def test_schedule_counts_may_change_on_resume():
    from mutualrl.launch.rundir.resume import config_changes

    before = {"schedule": {"unit": "paper", "max_steps": 50, "validate_every": 5}}
    after = {"schedule": {"unit": "paper", "max_steps": 60, "validate_every": 2}}
    refused, allowed = config_changes(before, after)
    assert refused == [] and len(allowed) == 2
    refused, _ = config_changes(before, {"schedule": {**before["schedule"], "unit": "optimizer"}})
    assert [str(change) for change in refused] == ["schedule.unit: 'paper' -> 'optimizer'"]


def test_every_count_states_its_unit_in_its_help():
    import dataclasses

    from mutualrl.config import schema

    for cls in (schema.ScheduleConfig, schema.ValidationConfig, schema.RunConfig, schema.BatchConfig):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
    counts = {f.name: f.metadata["help"] for f in dataclasses.fields(schema.ScheduleConfig) if f.name != "unit"}
    assert all("`unit` steps" in text for text in counts.values()), counts
    assert "OPTIMIZER steps" in schema.ValidationConfig.__dataclass_fields__["every_steps"].metadata["help"]
