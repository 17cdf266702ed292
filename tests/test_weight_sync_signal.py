"""``mutual/weight_sync_logp_gap`` on every vLLM step, whatever ``vllm_importance_sampling_correction`` says
(training/weight_sync.py): from TRL's old log-probs where the batch has them, else from the loss's own forward;
nothing without vLLM; one warning in the run log when the gap grows past its bound.

A real MutualGRPOTrainer on a tiny model (as tests/test_regime_token_weights.py builds it), its batches made by
hand: vLLM's ``sampling_per_token_logps`` stand in for an engine's."""

from __future__ import annotations

import logging

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.config import load_run_config
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.training.trainer import MutualGRPOTrainer
from mutualrl.training.weight_sync import GAP_KEY, WARN_GAP, WeightSyncWatch, logp_gap
from tiny_models import build_tiny_lm


@pytest.fixture()
def trainer(tmp_path):
    model_dir = build_tiny_lm("gpt2", tmp_path / "model")
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "prompt_id": f"p{a}-{b}", "task": "t"}
            for a in range(4) for b in range(4)]
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=3, max_steps=1, report_to=[], save_strategy="no",
                      disable_tqdm=True, seed=7, loss_type="grpo", beta=0.0)
    config = load_run_config("tiny", regime="standalone", check_grpo=False).config
    made = MutualGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=lambda **_: [0.0],
                             args=args, train_dataset=Dataset.from_list(rows), processing_class=load_tokenizer("gpt2"),
                             policy_name="tiny-bpe", regime=RegimeAdapter(config, "tiny-bpe", exchange=None))
    made.current_gradient_accumulation_steps = 1
    return made


def batch() -> dict[str, torch.Tensor]:
    """Two rows of TRL's batch, the second completion one token shorter (its last column masked)."""
    return {"prompt_ids": torch.tensor([[5, 6], [7, 8]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
            "completion_ids": torch.tensor([[9, 10, 11], [12, 13, 0]]),
            "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]), "advantages": torch.tensor([1.0, -2.0])}


def current_logps(trainer, rows: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return trainer.score_completions(trainer.model, rows["prompt_ids"], rows["prompt_mask"],
                                         rows["completion_ids"], rows["completion_mask"])  # [B, C]


def gaps(trainer) -> list[float]:
    return list(trainer._metrics["train"].get(GAP_KEY, []))


def test_without_old_logps_the_gap_comes_from_the_loss_forward(trainer):
    """The correction off, generation and update aligned: TRL scores no old log-probs; the loss's forward is them."""
    rows = batch()
    sampling = current_logps(trainer, rows) + torch.tensor([[0.2, -0.2, 0.2], [0.2, float("nan"), 9.0]])
    trainer.measure_weight_sync(sampling, rows["completion_mask"], None)
    assert gaps(trainer) == []  # nothing to compare with yet
    trainer.model.train()
    trainer.compute_loss(trainer.model, {**rows, "sampling_per_token_logps": sampling})
    # four tokens scored by both (the NaN one left out, the masked 9.0 too), each 0.2 apart
    assert gaps(trainer) == pytest.approx([0.2], abs=1e-4)


def test_with_old_logps_the_gap_is_of_the_learners_own_rows(trainer):
    """Old log-probs present (TRL's or a regime's snapshot, ``[B+N, T]``, own rows first): read at once, the
    appended rows left out, and the loss records nothing more."""
    rows = batch()
    sampling = torch.full((2, 3), -1.0)
    old = torch.cat([torch.full((2, 3), -1.5), torch.full((2, 3), -9.0)])  # 2 own rows + 2 appended
    old = torch.cat([old, torch.zeros(4, 2)], dim=1)  # widened to the peer rows' width
    trainer.measure_weight_sync(sampling, rows["completion_mask"], old)
    assert gaps(trainer) == pytest.approx([0.5])
    trainer.model.train()
    trainer.compute_loss(trainer.model, {**rows, "sampling_per_token_logps": sampling,
                                         "old_per_token_logps": old[:2, :3]})
    assert gaps(trainer) == pytest.approx([0.5])


def test_no_vllm_no_gap(trainer):
    rows = batch()
    trainer.measure_weight_sync(None, rows["completion_mask"], None)
    trainer.model.train()
    trainer.compute_loss(trainer.model, rows)
    assert gaps(trainer) == []


def test_every_training_generation_measures_it(trainer, monkeypatch):
    """The hook in ``_generate_and_score_completions``: TRL's batch with vLLM's log-probs, the regime's step after."""
    rows = batch()
    sampling = current_logps(trainer, rows) - 0.3
    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions",
                        lambda self, inputs: {**rows, "sampling_per_token_logps": sampling})
    monkeypatch.setattr(trainer, "_take_step_rollouts", lambda: None)
    monkeypatch.setattr(trainer, "watch_signal", lambda rollouts: None)
    monkeypatch.setattr(trainer.regime, "process_step", lambda output, rollouts: output)
    trainer.model.train()
    inputs = trainer._generate_and_score_completions([])
    trainer.compute_loss(trainer.model, inputs)
    assert gaps(trainer) == pytest.approx([0.3], abs=1e-4)


def test_the_watch_warns_once_when_the_gap_grows(trainer, caplog):
    watch = WeightSyncWatch("p")
    assert [watch.observe(g, s) for s, g in enumerate([0.01, 0.05, float("nan"), 0.08])] == [None] * 4
    note = watch.observe(0.25, 4)
    assert note is not None and "0.250" in note and "step 4" in note and GAP_KEY in note
    assert watch.observe(0.5, 5) is None  # once
    noisy = WeightSyncWatch("p")  # a first gap of 0.06 (bf16 numerics): the bound is 4 x that
    assert [noisy.observe(g, 0) for g in (0.06, 0.2)] == [None, None] and noisy.observe(0.25, 1) is not None
    trainer.weight_sync = None
    with caplog.at_level(logging.WARNING, logger="mutualrl.worker"):
        for gap in (0.0, WARN_GAP * 2, WARN_GAP * 3):
            trainer.record_weight_sync(gap)
    assert len([r for r in caplog.records if GAP_KEY in r.getMessage()]) == 1


def test_logp_gap_is_token_weighted():
    share = logp_gap(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.0]]), torch.tensor([[1, 0]]))
    assert (share.numerator, share.denominator, float(share)) == (0.5, 1.0, 0.5)
    assert torch.isnan(torch.tensor(float(logp_gap(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2)))))
