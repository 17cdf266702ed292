"""A run resumed from its checkpoint ends with the bytes of an uninterrupted one, for every regime that exchanges
rollouts or carries state from one step to the next (SGT, PRP, XGRPO, OPD, opd-sgt, byte-kd; standalone GRPO beside
them), end to end.

Each test rides on a run the suite already makes, checkpointed at every step (``tiny_regime_2_steps``,
``sgt_3_steps`` and its standalone baseline): its uninterrupted end is the reference, and a copy of its folder cut
back to ``checkpoint-1`` (the later checkpoints and the final models left out: a run stopped after its first
checkpoint) is resumed with ``--resume``. The resumed processes start from that checkpoint as a stopped run's do (its
weights, optimizer, schedule, random state and regime state; the exchange's rounds and the metric rows after it
dropped), so a test adds one launch to the shared run, not two. The stop itself (SIGTERM, the step the
policies hold at, its checkpoint), with HACPO resumed against the same run not stopped: tests/test_train_e2e.py's
SIGTERM test; a resume that lengthens a run (``--max-steps``): tests/test_byo_task_e2e.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import assert_ok, child_env
from mutualrl.training.regime_state import REGIME_STATE_NAME

POLICIES = ("tiny-bpe", "tiny-sp")
pytestmark = pytest.mark.slow


def train(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """``mutualrl train -o run_dir *args`` with the shared runs' environment (no test's fault injection)."""
    env = {k: v for k, v in child_env().items() if not k.startswith("MUTUALRL_DEBUG")}
    return subprocess.run([sys.executable, "-m", "mutualrl", "train", "-o", str(run_dir), *args], env=env,
                          capture_output=True, text=True, timeout=600)


def resumed_from_step_1(reference: Path, run_dir: Path, steps: int, keeps_state: bool) -> None:
    """A copy of ``reference`` in ``run_dir`` without its checkpoints after step 1 or its final models, resumed to
    its end (``steps``) from ``checkpoint-1``."""
    for policy in POLICIES:
        saved = sorted(path.name for path in (reference / "policies" / policy).glob("checkpoint-*"))
        assert saved == sorted(f"checkpoint-{s}" for s in range(1, steps + 1)), (policy, saved)

    def after_step_1(folder: str, names: list[str]) -> list[str]:
        if Path(folder).parent.name != "policies":
            return []
        return [name for name in names if name == "final" or name.startswith("checkpoint-") and name != "checkpoint-1"]

    shutil.copytree(reference, run_dir, symlinks=True, ignore=after_step_1)
    for policy in POLICIES:
        saved = json.loads((run_dir / "policies" / policy / "checkpoint-1" / REGIME_STATE_NAME).read_text())
        assert bool(saved["state"]) == keeps_state, (policy, saved)
    resumed = train(run_dir, "--resume", "--max-steps", str(steps))
    assert_ok(resumed)
    assert "resuming every policy from checkpoint-1" in " ".join(resumed.stdout.split()), resumed.stdout[-2000:]


def assert_same_bytes(reference: Path, resumed: Path, steps: int) -> None:
    for policy in POLICIES:
        rows = [json.loads(line) for line in (resumed / "metrics" / f"{policy}.jsonl").read_text().splitlines()
                if line.strip()]
        assert [row["step"] for row in rows if row.get("kind") == "train"] == list(range(1, steps + 1)), policy
        weights = [run / "policies" / policy / "final" / "model.safetensors" for run in (reference, resumed)]
        assert weights[0].read_bytes() == weights[1].read_bytes(), f"{policy}: resumed weights differ"


@pytest.mark.parametrize("tiny_regime_2_steps", ["xgrpo", "prp-peer", "opd", "opd-sgt", "byte-kd"], indirect=True)
def test_a_regime_resumed_at_step_1_ends_with_the_uninterrupted_runs_weights(tiny_regime_2_steps, request, tmp_path):
    """XGRPO (the peers' advantages of each step), PRP with the peer denominator (the peers' rows and traces), OPD
    (the peers' judgements of the learner's own rollouts, through nested exchanges), opd-sgt (those judgements, the
    rescues and their per-prompt budget, its saved state), byte-kd (judgements with next-byte distributions, with
    SGT's rescue and its budget): 2 steps, the second resumed."""
    reference, done = tiny_regime_2_steps
    assert_ok(done)
    name = request.node.callspec.params["tiny_regime_2_steps"]
    resumed = tmp_path / "resumed"
    resumed_from_step_1(reference, resumed, 2, keeps_state=name in ("opd-sgt", "byte-kd"))
    assert_same_bytes(reference, resumed, 2)


@pytest.mark.parametrize("regime", ["sgt", "standalone"])
def test_sgt_and_its_standalone_baseline_resumed_at_step_1_end_with_the_uninterrupted_runs_weights(
        sgt_3_steps, regime, tmp_path):
    """SGT (its rescue count, the regime's state, and the peers' successes of each step) and standalone GRPO (TRL's
    own resume): 3 steps, the last two resumed; the references are the shared SGT run and its ``--baseline``."""
    sgt_run, done = sgt_3_steps
    assert_ok(done)
    reference = sgt_run if regime == "sgt" else sgt_run.with_name(f"{sgt_run.name}-standalone")
    resumed = tmp_path / "resumed"
    resumed_from_step_1(reference, resumed, 3, keeps_state=regime == "sgt")
    assert_same_bytes(reference, resumed, 3)
