"""OPD's signals under each TRL loss type it accepts, by enumeration over rows of unequal length.

A learner over ``{a, b, EOS}`` writes 0 to 2 tokens then its EOS (rows of 1 to 3 tokens), a teacher over the same
vocabulary (the tokens match one for one). A batch of two rows is every pair of the 7 sequences; through TRL 1.16's
``compute_loss`` with OPD's advantages (reward term off), the expected gradient is, under grpo, sapo, dr_grpo, dapo
and cispo alike, ``λ / L`` times (``L`` = ``max_completion_length``; under cispo also its weight at ratio 1,
``min(1, epsilon_high)``, as TRL's own advantages):

- ``signal: sequence``: ``∇ KL(π_θ(y) ‖ π_T(y))`` over whole sequences;
- ``signal: unit``: ``Σ_h P_θ(h) ∇ KL(π_θ(· | h) ‖ π_T(· | h))`` over every prefix ``h`` (the per-token reverse KL
  summed along the sequence, the prefix's distribution held: GKD's on-policy objective, unnormalised).

Without the row factor, grpo's division of each row by its own length misses both. bnpo, vespo and luspo are
refused in one line.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from bytekd_worlds import TableModel
from test_regimes_opd import grad_trainer  # noqa: F401 - a fixture

from mutualrl.regimes.core.distillation import distillation_signal, signal_row_scale
from mutualrl.regimes.opd.maths import opd_advantages

LAM = 0.8
LOSS_TYPES = ("grpo", "sapo", "dr_grpo", "dapo", "cispo")


def world() -> tuple[TableModel, TableModel]:
    return TableModel([b"a", b"b", b""], depth=2, seed=3), TableModel([b"a", b"b", b""], depth=2, seed=11)


def token_logps(model: TableModel, tokens: tuple[int, ...], theta=None) -> torch.Tensor:
    """``[len + 1]``: the model's log-prob of each token of ``tokens`` and its EOS."""
    full = (*tokens, model.eos)
    return torch.stack([model.logps(full[:t], theta)[full[t]] for t in range(len(full))])


def trl_gradient(trainer, monkeypatch, learner, teacher, rows, loss_type, sequence, scaled=True) -> torch.Tensor:
    """``d loss / d θ`` of TRL's loss on a batch of ``rows`` (learner token sequences, each + EOS), OPD's advantages."""
    from trl import GRPOTrainer

    theta = learner.theta.clone().requires_grad_(True)
    width = max(len(r) for r in rows) + 1
    ids = torch.full((len(rows), width), learner.eos)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    own = torch.zeros((len(rows), width))
    peer = torch.zeros((len(rows), 1, width))
    for i, row in enumerate(rows):
        n = len(row) + 1
        ids[i, :n], mask[i, :n] = torch.tensor([*row, learner.eos]), 1
        own[i, :n], peer[i, 0, :n] = token_logps(learner, row).detach(), token_logps(teacher, row).detach()

    def forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps = torch.zeros((len(rows), width))
        out = logps.clone()
        for i, row in enumerate(rows):
            out = out.index_put((torch.tensor([i]), torch.arange(len(row) + 1)),
                                token_logps(learner, row, theta))
        return out, torch.zeros_like(out), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    monkeypatch.setattr(trainer, "loss_type", loss_type)
    signal = distillation_signal(own, peer, mask.bool()[:, None], torch.ones(len(rows), 1), sequence=sequence)
    if scaled:
        scale = signal_row_scale(loss_type, mask, trainer.max_completion_length, float(mask.sum()), 1)  # [B]
        signal = signal * scale[:, None]
    batch = {"prompt_ids": torch.zeros((len(rows), 1), dtype=torch.long),
             "prompt_mask": torch.ones((len(rows), 1), dtype=torch.long), "completion_ids": ids,
             "completion_mask": mask, "num_items_in_batch": mask.sum(),
             "advantages": opd_advantages(torch.zeros(len(rows)), signal, mask, LAM, reward_term=False)}
    trainer.compute_loss(trainer.model, batch).backward()
    return theta.grad


def source_gradients(learner: TableModel, teacher: TableModel) -> tuple[torch.Tensor, torch.Tensor]:
    """``∇ KL(π_θ(y) ‖ π_T(y))`` over sequences and ``Σ_h P_θ(h) ∇ KL(π_θ(· | h) ‖ π_T(· | h))`` (prefix held)."""
    theta = learner.theta.clone().double().requires_grad_(True)
    sequence = sum(lp.exp() * (lp - teacher.sequences()[k][1].double())
                   for k, (_, lp) in enumerate(learner.sequences(theta)))
    (whole,) = torch.autograd.grad(sequence, theta)
    theta = learner.theta.clone().double().requires_grad_(True)
    per_token = torch.zeros((), dtype=torch.float64)
    for n in range(learner.depth):  # at the depth both write their EOS alone: KL 0, no gradient
        for history in itertools.product(range(learner.eos), repeat=n):
            reach = token_logps(learner, history)[:-1].sum().double().exp()  # P_θ(h), held
            own, theirs = learner.logps(history, theta), teacher.logps(history).double()
            support = torch.isfinite(own)
            per_token = per_token + reach * (own.exp() * (own - theirs))[support].sum()
    (unit,) = torch.autograd.grad(per_token, theta)
    return whole.float(), unit.float()


def expected(trainer, monkeypatch, learner, teacher, loss_type, sequence, scaled=True) -> torch.Tensor:
    sequences = learner.sequences()
    out = torch.zeros_like(learner.theta)
    for (a, la), (b, lb) in itertools.product(sequences, repeat=2):
        out += (la + lb).exp().detach() * trl_gradient(trainer, monkeypatch, learner, teacher, [a, b], loss_type,
                                                       sequence, scaled)
    return out


@pytest.mark.slow  # the tiny trainer of test_regimes_opd; TRL's loss on 49 batches per loss type and signal
def test_both_signals_are_exact_under_each_accepted_loss_type_on_rows_of_unequal_length(grad_trainer, monkeypatch):
    learner, teacher = world()
    whole, unit = source_gradients(learner, teacher)
    length = grad_trainer.max_completion_length
    assert whole.abs().max() > 1e-2 and unit.abs().max() > 1e-2
    for loss_type in LOSS_TYPES:
        for sequence, source in ((True, whole), (False, unit)):
            got = expected(grad_trainer, monkeypatch, learner, teacher, loss_type, sequence)
            cap = min(1.0, grad_trainer.epsilon_high) if loss_type == "cispo" else 1.0  # CISPO's weight at ratio 1
            assert torch.allclose(got, cap * LAM / length * source, atol=1e-5), (loss_type, sequence)
    for sequence, source in ((True, whole), (False, unit)):  # grpo's own division by |y| misses both
        plain = expected(grad_trainer, monkeypatch, learner, teacher, "grpo", sequence, scaled=False)
        assert (plain - LAM / length * source).abs().max() > 1e-3


@pytest.mark.parametrize("loss_type", ["bnpo", "vespo", "luspo"])
@pytest.mark.parametrize("regime", ["opd", "opd-sgt"])
def test_a_loss_type_without_a_known_row_weight_is_refused(regime, loss_type):
    from mutualrl.config import load_run_config
    from mutualrl.config.typed import ConfigError

    with pytest.raises(ConfigError) as err:
        load_run_config("tiny", regime=regime, overrides=[f"grpo.loss_type={loss_type}"], check_grpo=False)
    assert "\n" not in str(err.value) and f"'{loss_type}' under regime {regime}" in str(err.value)
    with pytest.raises(ValueError, match="exact under loss_type"):
        signal_row_scale(loss_type, torch.ones(1, 2), 4, 2.0, 1)
