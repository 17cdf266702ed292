"""The success anchor (regimes/core/success_anchor.py, SGT's ``anchor_lam``): which prompts it holds, by hand, and its
gradient through TRL 1.16's loss on 3-token texts of a 4-token vocabulary: ``α (π − e_y)`` on the logits row each
token of the solved rollout reads (an NLL on the learner's own answer), nothing on an unsolved one."""

from __future__ import annotations

import pytest
import torch
from test_regimes_bytekd import THETA, theta_logps
from test_regimes_opd import grad_trainer  # noqa: F401 - a fixture

from mutualrl.regimes.core.success_anchor import anchored_advantages, anchored_rollouts, solved_prompts

ALPHA = 0.35


def test_the_solved_prompts_and_their_advantages_by_hand():
    nan = float("nan")
    rewards = torch.tensor([[1.0, 0.9, 1.0], [1.0, 0.5, 1.0], [1.0, nan, 1.0], [nan, nan, nan], [0.8, 1.0, 1.0]])
    assert solved_prompts(rewards, 0.8).tolist() == [True, False, True, False, False]  # 0.8 is not above 0.8
    advantages = torch.tensor([0.0, 0.0, 0.0, -0.5, 0.7, -0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.1, -0.2])
    lifted = anchored_rollouts(rewards, 0.8)  # [5, 3]: the unscored rollout of a solved prompt is not verified
    assert lifted.tolist() == [[True] * 3, [False] * 3, [True, False, True], [False] * 3, [False] * 3]
    got = anchored_advantages(advantages, lifted, ALPHA)
    assert torch.allclose(got, advantages + ALPHA * torch.tensor([1.0] * 3 + [0.0] * 3 + [1.0, 0.0, 1.0] + [0.0] * 6))
    assert torch.equal(anchored_advantages(advantages, lifted, 0.0), advantages)
    with pytest.raises(ValueError, match=r"\[P\*K\] = \[15\]"):
        anchored_advantages(advantages[:-1], lifted, ALPHA)


def trl_gradient(trainer, monkeypatch, sample, advantage: float) -> torch.Tensor:
    """``d loss / d THETA`` of TRL's whole loss (grpo, one row of ``sample`` at ``advantage``), times T."""
    from trl import GRPOTrainer

    theta = THETA.clone().requires_grad_(True)

    def forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps = torch.stack([theta_logps(theta, row) for row in input_ids[:, -logits_to_keep:]])  # [B, T]
        return logps, torch.zeros_like(logps), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    batch = {"prompt_ids": torch.full((1, 2), 5), "prompt_mask": torch.ones(1, 2, dtype=torch.long),
             "completion_ids": torch.tensor([sample]), "completion_mask": torch.ones(1, 3, dtype=torch.long),
             "num_items_in_batch": torch.tensor(3), "advantages": torch.tensor([advantage])}
    trainer.compute_loss(trainer.model, batch).backward()
    return theta.grad * 3


@pytest.mark.slow  # builds a tiny trainer (test_regimes_opd's) and runs TRL's loss 16 times
def test_the_anchor_through_trls_loss_is_the_nll_of_the_solved_answer(grad_trainer, monkeypatch):
    for sample in [(a, (a + d) % 4, (a + 2 * d) % 4) for a in range(4) for d in (1, 3)]:  # each token twice per place
        rows = (0, *(1 + y for y in sample[:-1]))  # the logits row each token reads
        hand = torch.zeros_like(THETA)
        for row, y in zip(rows, sample, strict=True):
            hand[row] += ALPHA * (torch.softmax(THETA[row], -1) - torch.eye(4)[y])
        solved = anchored_advantages(torch.zeros(1), torch.tensor([[True]]), ALPHA)  # [1]: GRPO's 0, anchored
        assert torch.allclose(trl_gradient(grad_trainer, monkeypatch, sample, float(solved[0])), hand, atol=1e-6)
        unsolved = anchored_advantages(torch.zeros(1), torch.tensor([[False]]), ALPHA)
        assert trl_gradient(grad_trainer, monkeypatch, sample, float(unsolved[0])).abs().max() == 0


def test_sgts_adapter_anchors_this_steps_solved_prompts():
    """SGT's adapter with ``anchor_lam``: the rows of the prompts all of whose rollouts scored above 0.8 this step
    get α on TRL's advantages (K = 2, three prompts: solved, mixed, failed); with α = 0 the batch is untouched."""
    from types import SimpleNamespace

    from mutualrl.config import load_run_config
    from mutualrl.regimes.sgt.adapter import SGTAdapter

    rollouts = SimpleNamespace(num_generations=2, rewards_local=torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]))
    advantages = torch.tensor([0.0, 0.0, 0.5, -0.5, 0.0, 0.0])
    for alpha, lift in ((ALPHA, [ALPHA, ALPHA, 0, 0, 0, 0]), (0.0, [0] * 6)):
        config = load_run_config("tiny", overrides=[f"regime.sgt.anchor_lam={alpha}"], regime="sgt",
                                 check_grpo=False).config
        adapter = SGTAdapter(config, "tiny-sp", exchange=None)
        output, metrics = adapter._anchor({"advantages": advantages.clone()}, {}, rollouts)
        assert torch.allclose(output["advantages"], advantages + torch.tensor(lift, dtype=torch.float32))
        assert ("anchored_rate" in metrics) == (alpha > 0)
