"""A regime variant is three files: ``tests/prp_tis_variant/`` (spec, maths, adapter) subclasses PRP with capped
per-token importance weights and a setting of its own, reuses PRP's settings, steps and intermediate quantities
through the seam: a step of each tiny policy through a fake trainer, and the CLI's dry run of the variant named by
the registry's environment variable (a user regime trains through the launcher for real in
tests/test_regime_registry.py)."""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import pytest
import torch

from mutualrl.config.loader import OptionSetting, load_run_config
from mutualrl.regimes.core.registry import ENV_VAR, register_regime, unregister_regime
from prp_tis_variant.maths import capped_token_weights
from prp_tis_variant.spec import SPEC, PRPTISSettings

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def variant():
    register_regime(SPEC)
    yield SPEC
    unregister_regime(SPEC.name)


def test_capped_weights_by_hand():
    """w = exp(log w) = [[0.5, 1, 4], [8, 1, 1]], cap 2: min(w, 2) = [[0.5, 1, 2], [2, 1, 1]]. Under the peer
    denominator TRL's ratio already holds w, so the loss weight is min(w, 2) / w = [[1, 1, .5], [.25, 1, 1]]; under
    the learner's it holds 1, so the weight is min(w, 2). Outside the mask (row 1's last token): 1."""
    log_w = torch.log(torch.tensor([[0.5, 1.0, 4.0], [8.0, 1.0, 1.0]]))  # [N, T]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # [N, T]
    peer = capped_token_weights(log_w, log_w, mask, cap=2.0)
    learner = capped_token_weights(log_w, torch.zeros_like(log_w), mask, cap=2.0)
    assert torch.allclose(peer, torch.tensor([[1.0, 1.0, 0.5], [0.25, 1.0, 1.0]]))
    assert torch.allclose(learner, torch.tensor([[0.5, 1.0, 2.0], [2.0, 1.0, 1.0]]))
    assert torch.equal(capped_token_weights(log_w, log_w, mask, cap=math.inf), torch.ones(2, 3))


def test_the_variant_reads_its_own_settings_through_prps_code(variant):
    """``self.settings`` is the variant's dataclass (a PRPSettings subclass); PRP's option --prp-denominator sets the
    variant's field when the variant runs, and PRP's own settings stay as they were."""
    from prp_tis_variant.adapter import PRPTISAdapter

    loaded = load_run_config("tiny", regime=SPEC.name, overrides=["regime.prp_tis_test.weight_cap=1.5"],
                             option_settings=[OptionSetting("--prp-denominator", "regime.prp.denominator", "learner")])
    config = loaded.config
    adapter = PRPTISAdapter(config, "tiny-bpe", exchange=None, spec=SPEC)
    assert isinstance(adapter.settings, PRPTISSettings)
    assert (adapter.settings.weight_cap, adapter.settings.denominator) == (1.5, "learner")
    assert adapter.denominator == "learner" and config.regime.prp.denominator == "peer"
    assert adapter.publishes_traces and "behaviour_logps" in adapter.peer_columns  # needs_traces: the variant's


def test_the_variants_metric_is_named_by_its_spec_alone(variant):
    """The plots' words for the variant's metric come from its spec (no table outside its folder names it); its
    ratio diagnostics, logged under its own name, are a key in words."""
    from mutualrl.evaluation.plot_labels import metric_label

    assert metric_label("prp-tis-test/capped_share") == SPEC.metrics[0][1]
    assert metric_label("prp-tis-test/token_clip_rate").title == "prp-tis-test: token clip rate"
    unregister_regime(SPEC.name)
    assert metric_label("prp-tis-test/capped_share").title == "prp-tis-test: capped share"


@pytest.mark.slow  # over 2 s: a step of THL over two real vocabularies
@pytest.mark.parametrize("learner, peer", [("tiny-bpe", "tiny-sp"), ("tiny-sp", "tiny-bpe")])
def test_the_variant_steps_each_tiny_policy_through_a_fake_trainer(variant, thl_tokenizers, tmp_path, learner, peer):
    """A step of each tiny policy learning from the other, through PRP's code with the variant's hook: its metric
    and PRP's peer rows are logged under the variant's name, and the loss carries the capped weights. (The
    launcher, the workers and the registry's environment variable in them are trained for real in
    tests/test_regime_registry.py; the variant from the variable, by the CLI, in the dry run below.)"""
    from mutualrl.see.exchange import ExperienceExchange
    from prp_tis_variant.adapter import PRPTISAdapter
    from test_regimes_seam import POLICIES, VOCAB, FakeTrainer, padded, peer_then_learner

    config = load_run_config("tiny", regime=SPEC.name, overrides=["regime.prp_tis_test.weight_cap=1.5"],
                             check_grpo=False).config
    adapters = {}
    for name in POLICIES:
        exchange = ExperienceExchange(tmp_path, "run", name, policies=POLICIES, barrier_timeout_s=10.0,
                                      poll_interval_s=0.01)
        adapters[name] = PRPTISAdapter(config, name, exchange, spec=SPEC)
        adapters[name].bind(FakeTrainer(padded(thl_tokenizers[VOCAB[name]])))
    batch = peer_then_learner(adapters[learner], adapters[peer], [" 4", " 5", " 4", " 3"], [1.0, 0.0, 1.0, 0.0])
    recorded = adapters[learner].trainer.recorded
    assert adapters[learner].settings.weight_cap == 1.5
    assert all(0.0 <= share <= 1.0 for share in recorded[("train", "prp-tis-test/capped_share")])
    assert recorded[("train", "prp-tis-test/capped_share")] and recorded[("train", "prp-tis-test/peer_rows")][0] > 0
    assert batch["mutual_token_weights"].shape == batch["completion_ids"].shape  # [8, C]: own rows, then the peer's


def test_the_variant_from_the_environment_plans_the_tiny_pool_through_the_cli(tmp_path):
    from e2e_helpers import TINY, assert_ok, train_command

    env = {**os.environ, ENV_VAR: "prp_tis_variant.spec", "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    run_dir = tmp_path / "run"
    command = train_command(Path("unused"), run_dir)[:4] + ["-o", str(run_dir), *TINY, "--max-steps", "2",
                                                            "--regime", SPEC.name, "--set",
                                                            "regime.prp_tis_test.weight_cap=1.5", "--dry-run"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert_ok(done)
    assert "regime prp-tis-test" in done.stdout and "32 own + 32 peer" in done.stdout  # PRP's pooled rows
    assert not run_dir.exists()
