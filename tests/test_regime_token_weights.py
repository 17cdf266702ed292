"""The seam's per-token weight hook (``RegimeAdapter.token_weights``): the trainer multiplies TRL's per-token policy
loss by it, in one place (``training.trainer.weighted_advantages``), and without weights the loss is TRL's own."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.config import load_run_config
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.trainer_interface import TOKEN_WEIGHTS
from mutualrl.training.trainer import MutualGRPOTrainer, weighted_advantages
from tiny_models import build_tiny_lm


def test_weighted_advantages_by_hand():
    advantages = torch.tensor([1.0, -2.0])  # [B]
    weights = torch.tensor([[1.0, 0.5, 0.0], [2.0, 1.0, 1.0]])  # [B, T]
    assert torch.equal(weighted_advantages(advantages, weights, "r"),
                       torch.tensor([[1.0, 0.5, 0.0], [-4.0, -2.0, -2.0]]))
    # TRL's [B, T] advantages (a subclass's) are weighted token by token.
    per_token = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])  # [B, T]
    assert torch.equal(weighted_advantages(per_token, weights, "r"), torch.tensor([[1.0, 1.0, 0.0], [2.0, 1.0, 1.0]]))


@pytest.mark.parametrize("weights, problem", [
    (torch.tensor([[1.0, -0.5]]), "finite and >= 0"),
    (torch.tensor([[1.0, float("nan")]]), "finite and >= 0"),
    (torch.tensor([[1.0, float("inf")]]), "finite and >= 0"),
    (torch.ones(2, 2), r"\[B, T\] with B = 1; got \(2, 2\)"),
    (torch.ones(2), r"\[B, T\] with B = 1; got \(2,\)"),
])
def test_weights_the_loss_cannot_take_are_refused_naming_the_regime(weights, problem):
    with pytest.raises(ValueError, match=f"regime 'variant': token weights must be {problem}"):
        weighted_advantages(torch.tensor([1.0]), weights, "variant")


class WeightsFromBatch(RegimeAdapter):
    """The base adapter: its token_weights are the batch's TOKEN_WEIGHTS rows."""


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tw")
    model_dir = build_tiny_lm("gpt2", folder / "model")
    tokenizer = load_tokenizer("gpt2")
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "prompt_id": f"p{a}-{b}", "task": "t"}
            for a in range(4) for b in range(4)]
    args = GRPOConfig(output_dir=str(folder / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=3, max_steps=1, report_to=[], save_strategy="no",
                      disable_tqdm=True, seed=7, loss_type="grpo", beta=0.0)
    config = load_run_config("tiny", regime="standalone", check_grpo=False).config
    trainer = MutualGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=lambda **_: [0.0],
                                args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                                policy_name="tiny-bpe", regime=WeightsFromBatch(config, "tiny-bpe", exchange=None))
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def _batch() -> dict[str, torch.Tensor]:
    return {"prompt_ids": torch.tensor([[5, 6], [7, 8]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
            "completion_ids": torch.tensor([[9, 10, 11], [12, 13, 14]]),
            "completion_mask": torch.ones(2, 3, dtype=torch.long), "advantages": torch.tensor([1.0, -2.0])}


def test_without_weights_or_with_ones_the_loss_is_trls_bit_for_bit(trainer):
    plain = trainer.compute_loss(trainer.model, _batch())
    trl_own = super(MutualGRPOTrainer, trainer).compute_loss(trainer.model, _batch())
    ones = trainer.compute_loss(trainer.model, {**_batch(), TOKEN_WEIGHTS: torch.ones(2, 3)})
    assert torch.equal(plain, trl_own) and torch.equal(ones, trl_own)


def test_weights_multiply_the_per_token_policy_loss(trainer):
    """On-policy (no old log-probs: TRL's ratio is exactly 1), beta 0, loss_type grpo: the loss is
    mean_b(sum_t -A_b w_bt / T). A = [1, -2], w = [[1, .5, 0], [2, 1, 1]]:
    row 0: -(1 + .5 + 0) / 3 = -0.5; row 1: 2 (2 + 1 + 1) / 3 = 8/3; mean (−0.5 + 8/3) / 2 = 13/12."""
    weights = torch.tensor([[1.0, 0.5, 0.0], [2.0, 1.0, 1.0]])  # [B, T]
    loss = trainer.compute_loss(trainer.model, {**_batch(), TOKEN_WEIGHTS: weights})
    assert loss.item() == pytest.approx(13 / 12, abs=1e-6)
    unweighted = trainer.compute_loss(trainer.model, _batch())
    assert unweighted.item() == pytest.approx((-1.0 + 2.0) / 2, abs=1e-6)
