"""Per-source diagnostics of HACPO and SGT, and TIS on HACPO's own ratio s."""

from __future__ import annotations

import math

import pytest
import torch
from test_prp_corrections import scored_step
from test_regimes_seam import peer_then_learner, pool_of

from mutualrl.regimes.hacpo.adapter import COEFFICIENT
from mutualrl.regimes.hacpo.maths import correction_bounds, cross_agent_weight, cross_row_outcome

# Four peer rows: s = 0.9, 0.5, 1.2, 0.85; omega = 1.5, 1, 1, 0.5 (as tests/test_regimes_hacpo.py).
S = torch.tensor([0.9, 0.5, 1.2, 0.85])
OMEGA = torch.tensor([1.5, 1.0, 1.0, 0.5])


# -- HACPO + TIS: pure maths, by hand --------------------------------------------------
def test_tis_on_s_caps_the_ratio_before_the_exponent():
    # No band (the paper's "no Clip"), alpha 1, C = 1: w = omega * min(s, 1)^2 -> 1.215, 0.25, 1 (1.2 capped: not
    # 1.44), 0.36125; only row 2 is truncated.
    weight = cross_agent_weight(S.log(), OMEGA, 1.0, 0.0, math.inf, truncation_bound=1.0)
    torch.testing.assert_close(weight, torch.tensor([1.215, 0.25, 1.0, 0.36125]))
    kept, truncated = cross_row_outcome(S.log(), 0.0, math.inf, truncation_bound=1.0)
    assert kept.tolist() == [True] * 4 and truncated.tolist() == [False, False, True, False]


def test_hacpo_refuses_prps_filters():
    from mutualrl.config import load_run_config
    from mutualrl.config.typed import ConfigError

    for correction in ("ftis", "tis-drop"):
        with pytest.raises(ConfigError, match="correction.*HACPO takes 'none' or 'tis'"):
            load_run_config("tiny", regime="hacpo", overrides=[f"regime.hacpo.correction={correction}",
                                                              "regime.hacpo.correction_level=sequence"],
                            check_grpo=False)


@pytest.mark.parametrize("lower,upper", [(0.8, 1.0), (0.0, math.inf)])
def test_bound_infinity_is_todays_hacpo(lower, upper):
    today = cross_agent_weight(S.log(), OMEGA, 1.0, lower, upper)
    assert torch.equal(cross_agent_weight(S.log(), OMEGA, 1.0, lower, upper, math.inf), today)
    assert correction_bounds("none", 3.0) == math.inf and correction_bounds("tis", 3.0) == 3.0


def test_with_the_band_a_cap_of_1_or_more_never_binds():
    """The band's top is 1, so s <= 1 on every kept row: TIS with C >= 1 changes nothing."""
    today = cross_agent_weight(S.log(), OMEGA, 2.0, 0.8)
    assert torch.equal(cross_agent_weight(S.log(), OMEGA, 2.0, 0.8, 1.0, 1.0), today)


def test_hacpo_accepts_a_correction_at_sequence_level_only():
    from mutualrl.config import load_run_config
    from mutualrl.config.typed import ConfigError

    config = load_run_config("tiny", regime="hacpo", overrides=["regime.hacpo.correction=tis",
                                                                "regime.hacpo.correction_level=sequence"],
                             check_grpo=False).config
    assert config.regime.hacpo.correction == "tis"
    with pytest.raises(ConfigError, match="correction_level.*sequence"):
        load_run_config("tiny", regime="hacpo", overrides=["regime.hacpo.correction=tis"], check_grpo=False)


# -- HACPO's per-source diagnostics through the fake trainer -----------------------------------
def _hacpo_step(tmp_path, thl_tokenizers, peer_shift, **settings):
    """One HACPO step of tiny-bpe with the peer tiny-sp, both with GPT-2's tokenizer; returns (learner, batch,
    recorded)."""
    return scored_step(tmp_path, thl_tokenizers, "hacpo", peer_shift, [" 4", " 5 6", " 4", " 3 3 7"], **settings)


def _used_after_the_update(learner, merged):
    """The ``used_share`` HACPO logs at the loss, after the generation's one pass (the fake's steps_per_generation
    and num_iterations are 1), the policy still at its snapshot."""
    learner.trainer.policy_logps = merged["old_per_token_logps"].clone().requires_grad_(True)  # [8, T]
    learner.extra_loss(learner.trainer.model, merged)
    return learner.trainer.recorded[("train", "hacpo/from/tiny-sp/used_share")][-1]


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_hacpo_a_peer_that_is_the_learner_itself_has_ess_1_and_log_ratio_0(thl_tokenizers, tmp_path):
    learner, merged, recorded = _hacpo_step(tmp_path, thl_tokenizers, None)
    assert recorded["hacpo/from/tiny-sp/ess"] == pytest.approx(1.0, abs=1e-9)
    assert recorded["hacpo/from/tiny-sp/log_ratio_mean"] == pytest.approx(0.0, abs=1e-6)
    assert recorded["hacpo/from/tiny-sp/log_ratio_max"] == pytest.approx(0.0, abs=1e-6)
    assert recorded["hacpo/from/tiny-sp/truncated_share"] == 0.0
    assert recorded["hacpo/from/tiny-sp/filtered_share"] == 0.0  # s = 1 is inside the band [0.8, 1]
    assert "hacpo/from/tiny-sp/used_share" not in recorded  # counted at the loss, not when the batch is built
    assert (merged["advantages"][4:] != 0).all() and _used_after_the_update(learner, merged) == 1.0


def _distant(ids):
    """The peer's log-probs: the learner's - 4 on odd token ids, + 1 on even ones (log w = +4 or -1 per token)."""
    return torch.where(ids % 2 == 1, -4.0, 1.0)  # [B, C]


def _expected_s(merged):
    """Each peer row's s by hand: the mean of its tokens' log w (+4 on odd ids, -1 on even ones)."""
    ids, mask = merged["completion_ids"][4:], merged["completion_mask"][4:].bool()  # [4, T] the peer rows
    log_w = torch.where(ids % 2 == 1, 4.0, -1.0).double()  # [4, T]
    return torch.exp((log_w * mask).sum(dim=1) / mask.sum(dim=1))  # [4]


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_hacpo_a_distant_peer_has_a_low_ess_and_the_shares_it_should(thl_tokenizers, tmp_path):
    learner, merged, recorded = _hacpo_step(tmp_path, thl_tokenizers, _distant)
    s = _expected_s(merged)
    assert (s > 1).any() and (s < 0.8).any()  # rows on both sides of the band [0.8, 1]
    ess = (s.sum() ** 2 / (4 * (s * s).sum())).item()
    assert recorded["hacpo/from/tiny-sp/ess_raw"] == pytest.approx(ess, rel=1e-5) and ess < 0.6
    kept = (s >= 0.8) & (s <= 1.0)  # [4]
    weights = merged[COEFFICIENT][4:].double() * s ** 2 * kept  # [4] Eq. 50's gradient weights at the first update
    loss_ess = (weights.sum() ** 2 / (4 * (weights * weights).sum())).item() if kept.any() else math.nan
    assert recorded["hacpo/from/tiny-sp/ess"] == pytest.approx(loss_ess, rel=1e-5, nan_ok=True)
    assert recorded["hacpo/from/tiny-sp/log_ratio_max"] == pytest.approx(s.log().max().item(), abs=1e-5)
    assert recorded["hacpo/from/tiny-sp/log_ratio_mean"] == pytest.approx(s.log().mean().item(), abs=1e-5)
    inside = int(((s >= 0.8) & (s <= 1.0)).sum())
    assert recorded["hacpo/from/tiny-sp/filtered_share"] == pytest.approx(1 - inside / 4)
    assert (merged["advantages"][4:] != 0).all()  # every peer row inside the band moves the gradient
    assert _used_after_the_update(learner, merged) == pytest.approx(inside / 4)
    assert recorded["hacpo/from/tiny-sp/truncated_share"] == 0.0 and recorded["hacpo/cross_kept"] == inside / 4


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_hacpo_without_the_band_tis_truncates_the_rows_above_c(thl_tokenizers, tmp_path):
    learner, merged, recorded = _hacpo_step(tmp_path, thl_tokenizers, _distant, cross_clip="false", correction="tis",
                                   correction_level="sequence", truncation_bound=3.0)
    s = _expected_s(merged)
    above = int((s > 3.0).sum())
    assert 0 < above < 4
    assert recorded["hacpo/from/tiny-sp/truncated_share"] == pytest.approx(above / 4)
    assert recorded["hacpo/from/tiny-sp/filtered_share"] == 0
    # The gradient weight of a peer row: omega * min(s, 3)^2 (alpha 1): -d loss / d logp summed over the row's tokens,
    # times the 4 own rows whose standalone mean it is (the fake's mean over 8 rows, scaled by 8/4), over the advantage
    # (rows of advantage 0 say nothing).
    omega = merged[COEFFICIENT][4:].double()  # [4]
    logps = merged["old_per_token_logps"].clone().requires_grad_(True)  # [8, T] the snapshot, as TRL's forward
    learner.trainer.policy_logps = logps
    learner.extra_loss(learner.trainer.model, merged).backward()
    advantages = merged["advantages"][4:].double()  # [4]
    moved = advantages != 0
    weights = -logps.grad[4:].double().sum(dim=1) * 4 / torch.where(moved, advantages, 1.0)  # [4]
    torch.testing.assert_close(weights[moved], (omega * torch.clamp(s, max=3.0) ** 2)[moved], rtol=1e-4, atol=1e-6)
    assert learner.trainer.recorded[("train", "hacpo/from/tiny-sp/used_share")] == [moved.double().mean().item()]


# -- SGT: the share of each peer's samples used, and the learner's log-prob of its rescues -----------------
def test_sgt_source_use_by_hand():
    from mutualrl.regimes.core.rescue import choose_rescues
    from mutualrl.regimes.sgt.maths import sgt_gate, source_use

    # 3 prompts, K = 2, peers a and b. The learner failed p0 and p1; a solved p0 (one sample), b solved p1;
    # b's second sample of p2 is not scored. Shortest selection: p0 takes a's, p1 takes b's.
    learner = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    peers = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 1.0]], [[1.0, 1.0], [0.0, math.nan]]])
    gate = sgt_gate(learner, peers)
    chosen = choose_rescues(peers, gate.gated, 0.8, None, "shortest", torch.ones_like(peers))  # [P, 2]
    used = source_use(gate, chosen, peers, ["a", "b"])
    # a: 1 of its 6 scored samples; b: 1 of its 5 scored.
    assert used["from/a/used_share"] == pytest.approx(1 / 6) and used["from/b/used_share"] == pytest.approx(1 / 5)
    assert (used["from/a/used_share"].numerator, used["from/b/used_share"].denominator) == (1.0, 5.0)


def test_sgt_source_use_over_two_ranks_is_the_whole_batchs():
    """Each rank holds some prompts; the shares of two ranks, reduced as record_metrics reduces them, are the share of
    all the prompts together (the keys are the same on every rank: one per peer, every step)."""
    from mutualrl.regimes.core.rescue import choose_rescues
    from mutualrl.regimes.sgt.maths import sgt_gate, source_use
    from mutualrl.training.trl_metrics import combine, parts

    learner = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    peers = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 1.0]], [[1.0, 1.0], [0.0, math.nan]]])

    def use(rows):
        gate = sgt_gate(learner[rows], peers[rows])
        chosen = choose_rescues(peers[rows], gate.gated, 0.8, None, "shortest", torch.ones_like(peers[rows]))
        return source_use(gate, chosen, peers[rows], ["a", "b"])

    whole, first, second = use(slice(0, 3)), use(slice(0, 2)), use(slice(2, 3))
    assert first.keys() == second.keys() == whole.keys()
    assert combine([parts(first), parts(second)]) == pytest.approx(dict(whole))


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_sgt_logs_each_peers_used_share_and_rescue_log_prob(thl_tokenizers, tmp_path):
    adapters = pool_of(tmp_path, thl_tokenizers, "sgt")
    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    out = peer_then_learner(learner, peer, [" 5", " 4", " 4", " 3"], [0.0, 1.0, 1.0, 0.0])
    recorded = learner.trainer.recorded
    assert recorded[("train", "sgt/from/tiny-sp/used_share")] == [0.25]  # 1 of the peer's 4 samples
    assert out["sgt_source"].tolist() == [0, -1, -1, -1]
    learner.extra_loss(learner.trainer.model, out)
    rescue_tokens = int(out["sgt_completion_mask"][0].sum())
    # The fake scores -0.5 per token: the rescue's sequence log-prob is -0.5 x its tokens, as sgt/rescue_logp.
    assert recorded[("train", "sgt/from/tiny-sp/rescue_logp")] == [pytest.approx(-0.5 * rescue_tokens)]
    assert recorded[("train", "sgt/from/tiny-sp/rescue_logp")] == recorded[("train", "sgt/rescue_logp")]
