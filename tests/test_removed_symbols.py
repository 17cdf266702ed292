"""What left src/ stays out: test-only and benchmark-only code, dead names, twins, scattered fault hooks.

Each name below was in src/ at 3474d10 and is gone from it (moved beside its only users in tests/ or
benchmarks/, or deleted); a twin is defined once; the ``MUTUALRL_DEBUG_*`` hooks live in ``mutualrl.fault_injection``.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "mutualrl"

MOVED_MODULES = {
    "see/synthetic.py": "tests/see_synthetic.py",
    "evaluation/sampling.py": "benchmarks/survey_sampling.py",
    "thl/paper_reference.py": "benchmarks/thl_paper_reference.py",
}
#: Moved inside src/ (issue 69): the shared regime modules behind ``mutualrl.regimes.api``, checks into ``trust/``,
#: operations into ``ops/``.
#: No shim keeps an old path importable.
MOVED_INSIDE_SRC = {
    **{f"regimes/{name}.py": f"regimes/core/{name}.py" for name in (
        "adapter", "batch_rows", "grpo", "importance", "peer_responses", "peers", "pooled_rows", "pooled_spec",
        "publication", "quantile_sketch", "rank_metrics", "regime_spec", "registry")},
    "regimes/usability.py": "evaluation/channel_decomposition.py",
    "regimes/pool.py": "regimes/core/reward_shapes.py",
    # renamed so that a module's name says what it holds
    "regimes/seam.py": "regimes/core/trainer_interface.py",
    "regimes/core/seam.py": "regimes/core/trainer_interface.py",
    "faults.py": "fault_injection.py",
    "tested_versions.py": "versions.py",
    "tested_lock.py": "versions.py",
    "figure_words.py": "metric_labels.py",
    "evaluation/metric_words.py": "evaluation/plot_labels.py",
    "see/source_figures.py": "ops/peer_offpolicy_stats.py",
    "launch/plan/decided.py": "launch/plan/grpo_decisions.py",
    "launch/rundir/outbound.py": "launch/rundir/export_settings.py",
    "see/offlock/consumption.py": "see/async_rounds/consumption.py",
    "see/offlock/staleness.py": "see/async_rounds/staleness.py",
    "training/no_signal.py": "training/reward_signal_watch.py",
    "evaluation/usability.py": "evaluation/channel_decomposition.py",
    "launch/join.py": "launch/secondary_machine.py",
    "regimes/core/pool.py": "regimes/core/reward_shapes.py",
    "launch/supervise/pool.py": "launch/supervise/machine_workers.py",
    "launch/plan/engine.py": "launch/plan/colocated_vllm.py",
    "host/cpu_lm_head.py": "host/trl_cpu_lm_head_patch.py",
    "output_files.py": "output_guards.py",
    "run_inputs.py": "inputs_record_reader.py",
    "pools/safe_load.py": "trust/checkpoint_pickles.py",
    "see/binding.py": "trust/exchange_binding.py",
    "see/inspect.py": "ops/exchange_inspect.py",
    "see/inspect_report.py": "ops/exchange_inspect_report.py",
    "see/mounts.py": "ops/mounts.py",
    "see/rollback.py": "ops/exchange_rollback.py",
    "training/watchdog.py": "ops/watchdog.py",
    "training/checkpoint_files.py": "ops/checkpoint_files.py",
}
REMOVED_NAMES = (
    # used only by tests or benchmarks
    "append_to_prompts", "LearnerBatch", "prp_behaviour_logps", "peer_log_ratio", "shuffled_pool_control",
    "trl_rewards", "resolve_deepspeed_auto",
    # dead
    "peer_policy_index", "SGT_KEYS", "METADATA_KEYS", "STEP_UNITS", "DERIVED_FIELDS",
    # twins and scattered hooks
    "_FLOAT_RE", "inject_disk_full", "THROTTLE_ENV", "NO_SYNC_ENV", "_COMPRESSIONS",
    # the SEE record in one module (see/records.py): per-row ids stored once (the manifest), tests' own helpers
    "RolloutRecord", "from_records", "ShardMetadata", "stamped", "ID_COLUMNS", "shard_info_from_manifest",
    "write_bytes_atomic",
    # renamed so that a name says what it holds
    "Decided", "OUTBOUND_GRPO_FIELDS", "OUTBOUND_KINDS", "metric_words", "METRIC_WORDS", "source_figures",
    "NoSignalWatch", "run_pool", "pool_settings",
)
#: Four modules of one concept, now ``see/records.py``.
MERGED_MODULES = ("see/columns.py", "see/ragged.py", "see/validation.py", "see/schema.py")
DEFINED_ONCE = {"pool_order": r"def pool_order\b", "nanstd": r"def nanstd\b", "write_atomic": r"def write_atomic\b",
                "temporary names": r"\bTEMP_RE = ", "fsync_dir": r"def fsync_dir\b"}


def sources() -> dict[str, str]:
    return {str(p.relative_to(SRC)): p.read_text() for p in SRC.rglob("*.py")}


def test_moved_modules_are_not_in_src():
    root = SRC.parents[1]
    assert [m for m in MOVED_MODULES if (SRC / m).exists()] == []
    assert [new for new in MOVED_MODULES.values() if not (root / new).is_file()] == []
    dotted = [m.removesuffix(".py").replace("/", ".") for m in MOVED_MODULES]
    found = {(path, name) for path, text in sources().items() for name in dotted if f"mutualrl.{name}" in text}
    assert found == set()


def test_modules_moved_inside_src_are_only_at_their_new_path():
    assert [old for old in MOVED_INSIDE_SRC if (SRC / old).exists()] == []
    assert [new for new in MOVED_INSIDE_SRC.values() if not (SRC / new).is_file()] == []
    dotted = [f"mutualrl.{m.removesuffix('.py').replace('/', '.')}" for m in MOVED_INSIDE_SRC]
    found = {(path, name) for path, text in sources().items() for name in dotted
             if re.search(rf"{re.escape(name)}\b", text)}
    assert found == set()


def test_merged_modules_are_gone_and_imported_nowhere():
    assert [m for m in MERGED_MODULES if (SRC / m).exists()] == []
    dotted = [f"mutualrl.{m.removesuffix('.py').replace('/', '.')}" for m in MERGED_MODULES]
    found = {(path, name) for path, text in sources().items() for name in dotted
             if re.search(rf"(from|import) {re.escape(name)}\b", text)}
    assert found == set()


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_removed_names_appear_nowhere_in_src():
    found = {(path, name) for path, text in sources().items() for name in REMOVED_NAMES
             if re.search(rf"\b{re.escape(name)}\b", text)}
    assert found == set()


def test_twins_are_defined_once():
    texts = sources()
    counts = {name: sum(len(re.findall(rx, text)) for text in texts.values()) for name, rx in DEFINED_ONCE.items()}
    assert counts == {"pool_order": 1, "nanstd": 0,  # nanstd is TRL's own
                      "write_atomic": 1, "temporary names": 1, "fsync_dir": 1}  # atomic_io's, for every file


def test_fault_hooks_live_in_one_module():
    named = {path for path, text in sources().items() if "MUTUALRL_DEBUG_" in text}
    assert named == {"fault_injection.py"}


def test_the_exchange_has_no_compression_or_durable_parameter():
    from mutualrl.see.exchange import ExperienceExchange

    parameters = set(inspect.signature(ExperienceExchange).parameters)
    assert parameters & {"compression", "durable"} == set()
