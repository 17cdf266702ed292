"""Each settings field declares what the rest of mutualrl asks of it; refusals and docs/settings.md derive from it."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from mutualrl.config.field_rules import DECLARED, IDENTITY, MAY_CHANGE, missing, rules
from mutualrl.config.field_table import declared_fields, lock_step_fields, outbound_fields, resume_rule
from mutualrl.config.grpo_schema import GRPO_FIELD_RULES, grpo_schema
from mutualrl.config.schema import RunConfig
from mutualrl.config.settings_page import GENERATED, render

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "settings.md"


def schema_fields(cls: type, prefix: str = "") -> typing.Iterator[tuple[str, dataclasses.Field]]:
    """Every field of the schema's dataclass tree (a regime's settings take RegimeConfig.settings' declarations)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        yield f"{prefix}{f.name}", f
        tp = hints[f.name]
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        target = tp if dataclasses.is_dataclass(tp) else (inner[0] if inner else None)
        if target is not None:
            yield from schema_fields(target, f"{prefix}{f.name}.")


def test_every_schema_field_declares_what_is_asked_of_it():
    lacking = [f"{key}: {', '.join(missing(f.metadata))}" for key, f in schema_fields(RunConfig) if missing(f.metadata)]
    assert lacking == [], "declare these with **rules(...) in the field's metadata (config/field_rules.py):\n" + \
        "\n".join(lacking)
    assert len(list(schema_fields(RunConfig))) >= 80  # the walk reaches the nested sections


def test_the_check_finds_a_field_without_declarations():
    @dataclasses.dataclass
    class Partial:
        declared: int = dataclasses.field(default=0, metadata={"help": "x", **rules("G", resume=IDENTITY)})
        bare: int = dataclasses.field(default=0, metadata={"help": "y"})

    assert [key for key, f in schema_fields(Partial) if missing(f.metadata)] == ["bare"]
    assert missing({"help": "y", "group": "G"}) == [k for k in DECLARED if k != "group"]
    with pytest.raises(ValueError, match="resume must be one of"):
        rules("G", resume="sometimes")


def test_the_settings_page_is_what_the_generator_makes_of_the_schema():
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/settings.md is out of date: .venv/bin/python -m mutualrl.config.settings_page docs/settings.md")
    assert PAGE.read_text(encoding="utf-8").splitlines()[0] == GENERATED


def test_the_page_lists_every_leaf_field_once_with_its_rules():
    text = render()
    leaves = [f.key for f in declared_fields() if not f.section and not f.key.startswith("regime.randpert.")]
    assert [key for key in leaves if text.count(f"- `{key}` (") != 1] == []
    assert "`see.max_staleness` (an integer; ≥ 0; default `0`; fixed on resume;" in text
    assert "opd, opd-sgt, byte-kd: `0` only" in text and "`launch.gpus` (" in text and "may change on resume" in text


# The keys --resume has let change since resuming was written (the prefix list the declarations replaced); any other
# key is the run's identity.
MAY_CHANGE_KEYS = [
    "output_dir", "pool.description", "grpo.max_steps", "grpo.logging_steps", "grpo.save_steps",
    "grpo.save_total_limit", "grpo.report_to", "pool.policies.a.grpo.max_steps", "pool.policies.a.grpo.report_to",
    "schedule.max_steps", "schedule.log_every", "schedule.save_every", "schedule.validate_every",
    "validation.every_steps", "validation.limit", "validation.at_start", "see.barrier_timeout_s",
    "see.peer_timeout_s", "see.poll_interval_s", "see.on_peer_failure", "see.catch_up", "see.max_restarts",
    "launch.gpus", "launch.device_map.a", "launch.nodes", "launch.main_address", "launch.vllm_max_num_seqs",
    "task.stop_after_no_reward_steps",
]
IDENTITY_KEYS = [
    "regime.name", "regime.sgt.lam", "pool.name", "pool.policies.a.model", "pool.policies.a.grpo.seed",
    "pool.policies.a.grpo.learning_rate", "grpo.seed", "grpo.learning_rate", "grpo.push_to_hub", "task.name",
    "task.train_limit", "schedule.unit", "schedule.warmup_steps", "schedule", "batch.prompts_per_step", "batch",
    "see.dir", "see.max_staleness", "see.retention_steps", "see.replay_consumption", "see.record_standalone",
    "see.unknown_key", "description", "plugins", "unknown_section.x",
]


@pytest.mark.parametrize("key", MAY_CHANGE_KEYS)
def test_resume_may_change_what_it_always_could(key):
    assert resume_rule(key) == MAY_CHANGE


@pytest.mark.parametrize("key", IDENTITY_KEYS)
def test_resume_refuses_what_it_always_refused(key):
    assert resume_rule(key) == IDENTITY


def test_outbound_and_lock_step_fields_come_from_the_declarations():
    assert [f.key for f in outbound_fields()] == ["see.dir", "launch.main_address"]
    assert lock_step_fields() == [("see.max_staleness", 0), ("see.on_peer_failure", "stop"),
                                  ("see.replay_consumption", None)]
    assert set(GRPO_FIELD_RULES) <= set(grpo_schema().types)  # TRL's own field names, spelt as TRL spells them
