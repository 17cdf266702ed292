"""The per-source ``used_share``: the peer rows whose weighted advantage is nonzero (what moves the gradient), not the
rows merely present in the batch; HACPO's counted at the loss over every parameter update of a generation. By hand,
and against autograd where a gradient decides."""

from __future__ import annotations

import math

import pytest
import torch
from test_prp_corrections import ScoredTrainer
from test_regimes_seam import padded, peer_then_learner, pool_of

from mutualrl.regimes.hacpo.maths import MAX_ABS_LOG_RATIO, moving_rows
from mutualrl.regimes.prp.maths import source_diagnostics

LOG_W = torch.log(torch.tensor([[0.5, 2.0, 5.0, 20.0]] * 4))  # [4, 4] the same peer row four times
MASK = torch.ones(4, 4, dtype=torch.long)  # [4, 4]


# -- PRP: by hand ---------------------------------------------------------------------------------------------------
def test_prp_a_kept_row_of_advantage_0_is_not_used():
    """Rows kept [T, T, T, F], advantages [0, .7, -.7, .7] under F-TIS's weights min(w, 2) (all > 0): row 0 is kept
    but its weighted advantage min(w, 2)·0 is 0 on every token; row 3 keeps no weight (F-TIS dropped it). Used: rows
    1 and 2 only (before: rows 0, 1, 2, the rows with a weight)."""
    kept = torch.tensor([True, True, True, False])  # [4]
    advantages = torch.tensor([0.0, 0.7, -0.7, 0.7])  # [4]
    rows = source_diagnostics(LOG_W, MASK, "ftis", "token", 2.0, 10.0, kept, advantages)
    assert rows["used"].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert rows["filtered"].tolist() == [0.0, 0.0, 0.0, 4.0]  # what keeps no weight is unchanged by the advantage


def test_prp_without_a_correction_a_row_moves_where_its_advantage_is_nonzero():
    """No correction: no weight (1), so a scored row moves where A != 0, whatever w (TRL's clip is not modelled)."""
    rows = source_diagnostics(LOG_W, MASK, "none", "token", 2.0, 10.0, torch.ones(4, dtype=torch.bool),
                              torch.tensor([0.0, 1.0, -1.0, 0.0]))
    assert rows["used"].tolist() == [0.0, 1.0, 1.0, 0.0]


def test_prp_a_weight_that_underflows_in_the_losss_dtype_moves_nothing():
    """TIS at sequence level: W = exp(Σ log w) = exp(4·(-40)) = e^-160, 0 in float32 (the loss's weight) but not in
    float64: the row is used only where the loss's own weight is nonzero."""
    log_w = torch.full((1, 4), -40.0)  # [1, 4]
    mask = torch.ones(1, 4, dtype=torch.long)  # [1, 4]
    kept, advantage = torch.tensor([True]), torch.tensor([1.0])
    assert torch.exp(torch.tensor(-160.0)) == 0 and torch.exp(torch.tensor(-160.0, dtype=torch.float64)) > 0
    float32 = source_diagnostics(log_w, mask, "tis", "sequence", 2.0, 10.0, kept, advantage)
    float64 = source_diagnostics(log_w.double(), mask, "tis", "sequence", 2.0, 10.0, kept, advantage)
    assert float32["used"].tolist() == [0.0] and float64["used"].tolist() == [1.0]


# -- PRP: a whole step through the fake trainer ------------------------------------------------------------------------
def _prp_ftis_step(tmp_path, thl_tokenizers, peer_rewards):
    """One PRP + F-TIS step of tiny-bpe with a peer identical to it (sequence KL 0: F-TIS keeps every row), both with
    GPT-2's tokenizer; returns (batch, recorded)."""
    same = {"gpt2": thl_tokenizers["gpt2"], "mistral-sp": thl_tokenizers["gpt2"]}
    adapters = pool_of(tmp_path, same, "prp", correction="ftis", kl_over="tokens")  # the traces' KL: no model here
    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    learner.bind(ScoredTrainer(padded(thl_tokenizers["gpt2"])))
    peer.bind(ScoredTrainer(padded(thl_tokenizers["gpt2"])))
    merged = peer_then_learner(learner, peer, [" 4", " 5", " 4", " 3"], peer_rewards)
    return merged, {key: values[-1] for (_, key), values in learner.trainer.recorded.items()}


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_prp_ftis_a_peer_whose_groups_are_all_equal_is_kept_but_not_used(thl_tokenizers, tmp_path):
    """Peer rewards [1, 1 | 1, 0] (K = 2 per prompt): F-TIS's per-source advantages are [0, 0 | +a, -a]. Every row
    is kept (KL 0 < g: filtered 0), but the first prompt's two rows have advantage 0: used 2 of 4 (before: 4 of 4)."""
    merged, recorded = _prp_ftis_step(tmp_path, thl_tokenizers, [1.0, 1.0, 1.0, 0.0])
    advantages = merged["advantages"][4:]  # [4] the peer rows'
    assert advantages[:2].eq(0).all() and advantages[2:].ne(0).all()
    assert recorded["prp/from/tiny-sp/filtered_share"] == 0.0
    assert recorded["prp/from/tiny-sp/used_share"] == 0.5


# -- HACPO: by hand ---------------------------------------------------------------------------------------------------
def test_hacpo_moving_rows_by_hand():
    """s = [0.9, 0.5, 0.95, 0.85, e^-10, 1], A = [1, 1, 0, -1, 1, 1], omega 1, band [0.8, 1]: row 1 is below the band
    (weight 0), row 2 has A = 0. Without the band (the "no Clip" ablation) row 1 moves, and row 4, at the clamp of
    |log s| (sequence_log_ratio's), does not: the clamp's gradient is 0 (checked by autograd)."""
    log_s = torch.log(torch.tensor([0.9, 0.5, 0.95, 0.85, 1.0, 1.0]))  # [6]
    log_s[4] = -MAX_ABS_LOG_RATIO
    advantages = torch.tensor([1.0, 1.0, 0.0, -1.0, 1.0, 1.0])  # [6]
    omega = torch.ones(6)  # [6]
    assert moving_rows(log_s, advantages, omega, 1.0, 0.8).tolist() == [True, False, False, True, False, True]
    no_band = moving_rows(log_s, advantages, omega, 1.0, 0.0, math.inf)
    assert no_band.tolist() == [True, True, False, True, False, True]
    from mutualrl.regimes.hacpo.maths import cross_agent_objective, sequence_log_ratio

    raw = torch.tensor([[-12.0], [-0.2]], requires_grad=True)  # [2, 1] one token, log s -12 (clamped) and -0.2
    clamped = sequence_log_ratio(raw, torch.zeros(2, 1), torch.ones(2, 1))  # [2]
    cross_agent_objective(clamped, torch.ones(2), torch.ones(2), 1.0, 0.0, math.inf).sum().backward()
    assert (raw.grad[:, 0] != 0).tolist() == moving_rows(clamped.detach(), torch.ones(2), torch.ones(2), 1.0, 0.0,
                                                         math.inf).tolist() == [False, True]


# -- HACPO: over every update of a generation, through the fake trainer ------------------------------------------------
def _micro_batch(batch, rows):
    """TRL's split: the rows ``rows`` of every per-row tensor of ``batch`` (8 rows)."""
    index = torch.tensor(rows)  # [b]
    return {key: value[index] if isinstance(value, torch.Tensor) and value.dim() and value.size(0) == 8 else value
            for key, value in batch.items()}


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_hacpo_used_share_counts_every_update_of_the_generation(thl_tokenizers, tmp_path):
    """tests/test_regimes_hacpo.py's step (every advantage nonzero; s = 1 at the snapshot), the learner's forward moved
    per peer row so that s = 0.882, 0.779, 0.846, 0.807, with
    2 micro-batches per generation and num_iterations 2: four updates, band lower bounds 0.8, 0.825, 0.85, 0.875.
    Micro-batch a holds peer rows 0, 1 and b rows 2, 3; the updates see a, b, a, b. Moving: update 0 row 0 (row 1 is
    below 0.8), update 1 row 2 (row 3, 0.807 < 0.825), update 2 row 0, update 3 none (0.846 < 0.875): 3 of the 8
    (row, pass) pairs, 0.375 (the first update's band alone said 0.75). Each count is the rows autograd moves."""
    adapters = pool_of(tmp_path, thl_tokenizers, "hacpo")
    learner, peer = adapters["tiny-sp"], adapters["tiny-bpe"]
    learner.trainer.args.steps_per_generation, learner.trainer.args.num_iterations = 2, 2
    merged = peer_then_learner(learner, peer, [" hello world", " 45", " 4", " 4 5 6"], [1.0, 0.0, 1.0, 0.0])
    recorded = learner.trainer.recorded
    assert recorded[("train", "hacpo/cross_kept")] == [1.0] and merged["advantages"][4:].ne(0).all()
    shift = torch.log(torch.tensor([1.0] * 4 + [0.882, 0.779, 0.846, 0.807]))  # [8] log s of each row's forward
    merged["shift"] = shift
    first, second = _micro_batch(merged, [0, 1, 4, 5]), _micro_batch(merged, [2, 3, 6, 7])
    moved_by_autograd = []
    for update, batch in enumerate((first, second, first, second)):
        assert ("train", "hacpo/from/tiny-bpe/used_share") not in recorded  # logged after the last pass only
        learner.trainer.state.global_step = update
        logps = (batch["old_per_token_logps"] + batch["shift"][:, None]).requires_grad_(True)  # [4, T] TRL's forward
        learner.trainer.policy_logps = logps
        learner.extra_loss(learner.trainer.model, batch).backward()
        moved_by_autograd.append(int((logps.grad[2:] != 0).any(dim=1).sum()))  # the peer rows that moved
    assert moved_by_autograd == [1, 1, 1, 0]
    share = recorded[("train", "hacpo/from/tiny-bpe/used_share")]
    assert share == [0.375] and learner.loss_use is None
    learner.extra_loss(learner.trainer.model, first)  # a fifth pass belongs to no generation: nothing more is logged
    assert recorded[("train", "hacpo/from/tiny-bpe/used_share")] == [0.375]


# -- F-TIS's sequence KL estimator, a named setting --------------------------------------------------------------------
def test_ftis_kl_estimators_by_hand():
    """A 4-token answer, δ = log π_gen − log π_θ = [4.1, 0, 0, 0]: k3-sum = e^4.1 − 4.1 − 1 = 55.240 (>= g = 50: a
    sample with A <= 0 is dropped); mean-log-ratio = 4.1 / 4 = 1.025 (kept). δ = [−1, −1, pad]: k3-sum 2(e^-1 + 1 − 1)
    = 0.7358, mean −1 (a learner more confident than the generator; the pad token is left out of both)."""
    from mutualrl.regimes.prp.maths import ftis_kept, sequence_kl

    learner = torch.tensor([[-5.0, -1.0, -1.0, -1.0], [-1.0, -1.0, -9.0, 0.0]])  # [2, 4]
    generator = torch.tensor([[-0.9, -1.0, -1.0, -1.0], [-2.0, -2.0, 3.0, 0.0]])  # [2, 4]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])  # [2, 4]
    k3 = sequence_kl(learner, generator, mask, "k3-sum")  # the default is rlogr-sum: test_ftis_kl_estimators.py
    assert k3.tolist() == pytest.approx([math.exp(4.1) - 5.1, 2 * math.exp(-1.0)], rel=1e-6)
    mean = sequence_kl(learner, generator, mask, "mean-log-ratio")
    assert mean.tolist() == pytest.approx([1.025, -1.0], rel=1e-6)
    negative = torch.tensor([-1.0, -1.0])  # [2]
    assert ftis_kept(negative, k3, 50.0).tolist() == [False, True]
    assert ftis_kept(negative, mean, 50.0).tolist() == [True, True]
    with pytest.raises(ValueError, match="kl_estimator"):
        sequence_kl(learner, generator, mask, "k1")


def test_the_kl_estimator_is_a_setting_with_rlogr_sum_by_default():
    from mutualrl.config import load_run_config
    from mutualrl.config.typed import ConfigError

    assert load_run_config("tiny", regime="prp", check_grpo=False).config.regime.prp.kl_estimator == "rlogr-sum"
    chosen = load_run_config("tiny", regime="prp", overrides=["regime.prp.kl_estimator=mean-log-ratio"],
                             check_grpo=False).config
    assert chosen.regime.prp.kl_estimator == "mean-log-ratio"
    with pytest.raises(ConfigError, match="kl_estimator"):
        load_run_config("tiny", regime="prp", overrides=["regime.prp.kl_estimator=k1"], check_grpo=False)


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("estimator,dropped", [("rlogr-sum", True), ("k3-sum", True), ("mean-log-ratio", False)])
def test_the_estimator_decides_which_rows_ftis_keeps(thl_tokenizers, tmp_path, estimator, dropped):
    """The KL of the sampled tokens (``kl_over: tokens``). The peer's log-probs are the learner's − 3 on every token
    (δ = −3), g = 1: rlogr-sum gives each row (3e³ − e³ + 1)·L >= 41.2 > g (r = e³) and k3-sum (e^-3 + 3 − 1)·L >=
    2.05 > g, so its rows with A <= 0 are dropped (weight 0); the mean log-ratio is −3 < g, so every row keeps min(w, 2) = 2 (w = e³) and all four are
    used."""
    from test_prp_corrections import scored_step

    from mutualrl.regimes.core.trainer_interface import TOKEN_WEIGHTS

    _, merged, recorded = scored_step(tmp_path, thl_tokenizers, "prp", lambda ids: torch.full(ids.shape, -3.0),
                                      [" 4", " 5", " 4", " 3"], correction="ftis", kl_bound=1.0,
                                      kl_estimator=estimator, kl_over="tokens")
    advantages, mask = merged["advantages"][4:], merged["completion_mask"][4:].bool()  # [4], [4, T]
    weights = merged[TOKEN_WEIGHTS][4:]  # [4, T]
    negative = advantages <= 0  # [4] the peer's failures (rewards 1, 0, 1, 0: its own groups' means 0.5)
    assert negative.tolist() == [False, True, False, True]
    for row in range(4):
        expected = 0.0 if dropped and negative[row] else 2.0
        assert torch.allclose(weights[row][mask[row]], torch.full((int(mask[row].sum()),), expected))
    assert recorded["prp/from/tiny-sp/used_share"] == (0.5 if dropped else 1.0)


# -- prp-ftis-2qwen's advantage grouping: F-TIS's per-group std --------------------------------------------------------
def test_prp_ftis_2qwen_normalises_each_sources_group_by_its_own_std():
    """F-TIS: Â_i = (r_i − mean) / std over the node's own G samples of the prompt. One source's rewards, prompt 0
    [1, 0], prompt 1 [1, 1]: per group, std(1, 0) = 0.70711 (TRL's unbiased std), Â = ±0.5 / (0.70711 + 1e-4) =
    ±0.70701, prompt 1 all 0. The batch scaling the paper's recipes use would divide by std(1, 0, 1, 1) = 0.5
    instead (±0.99980): the recipe sets group."""
    from mutualrl.config import load_run_config
    from mutualrl.regimes.prp.maths import per_source_advantages, resolved_grouping

    config = load_run_config("prp-ftis-2qwen").config
    settings = config.regime.prp
    assert resolved_grouping(settings.advantage_grouping, settings.correction) == "source"
    pool = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 0.0]]])  # [P=2, M=2, K=2]
    got = per_source_advantages(pool, scale_rewards=config.grpo["scale_rewards"], eps=settings.std_epsilon)
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert got[:, 0].flatten().tolist() == pytest.approx([a, -a, 0.0, 0.0], abs=1e-6)  # source 0: prompts 0, 1
    assert got[:, 1].flatten().tolist() == pytest.approx([0.0, 0.0, a, -a], abs=1e-6)  # source 1
    batch = per_source_advantages(pool, scale_rewards="batch", eps=settings.std_epsilon)
    assert batch[0, 0].tolist() == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001], abs=1e-6)
