"""PRP's importance-weight corrections of peer rows (none, TIS, F-TIS; token or sequence level) and the per-source
diagnostics, by hand on small tensors and through a whole PRP step over a real SEE with fake trainers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from mutualrl.regimes.core.grpo import group_advantages
from mutualrl.regimes.core.importance import normalised_ess
from mutualrl.regimes.prp.maths import (
    correction_weights,
    corrected_log_weights,
    ftis_kept,
    per_source_advantages,
    resolved_grouping,
    sequence_kl,
    source_diagnostics,
)
from mutualrl.regimes.core.trainer_interface import TOKEN_WEIGHTS
from test_regimes_seam import FakeTrainer, padded, peer_then_learner, pool_of

W = torch.tensor([[0.5, 2.0, 5.0, 20.0]])  # [1, 4] importance weights w = snapshot / peer
LOG_W = torch.log(W)  # [1, 4]
MASK = torch.ones(1, 4, dtype=torch.long)  # [1, 4]


def test_tis_and_ftis_cap_and_tis_drop_drops_then_caps_by_hand():
    """C = 3, D = 10. TIS and F-TIS: min(w, 3) = [.5, 2, 3, 3], truncated [5, 20] (F-TIS filters whole samples by
    advantage and KL, not here). TIS with the drop line: 20 > 10 dropped (0), 5 capped at 3."""
    for correction in ("tis", "ftis"):
        capped, truncated, dropped = corrected_log_weights(LOG_W, correction, 3.0, 10.0)
        assert torch.allclose(capped.exp(), torch.tensor([[0.5, 2.0, 3.0, 3.0]]))
        assert truncated.tolist() == [[False, False, True, True]] and not dropped.any()
    drop, truncated, dropped = corrected_log_weights(LOG_W, "tis-drop", 3.0, 10.0)
    assert torch.allclose(drop.exp(), torch.tensor([[0.5, 2.0, 3.0, 0.0]]))
    assert truncated.tolist() == [[False, False, True, False]] and dropped.tolist() == [[False, False, False, True]]
    none, truncated, dropped = corrected_log_weights(LOG_W, "none", 3.0, 10.0)
    assert torch.equal(none, LOG_W) and not truncated.any() and not dropped.any()


def test_the_loss_weight_is_t_of_w():
    """The PPO ratio of a corrected peer row divides by the learner's snapshot (1 at generation), so the weight is
    T(w) itself: TIS [.5, 2, 3, 3], with the drop line [.5, 2, 3, 0] (tests/test_sharing_gradients.py: through TRL)."""
    assert torch.allclose(correction_weights(LOG_W, MASK, "tis", "token", 3.0, 10.0),
                          torch.tensor([[0.5, 2.0, 3.0, 3.0]]))
    assert torch.allclose(correction_weights(LOG_W, MASK, "tis-drop", "token", 3.0, 10.0),
                          torch.tensor([[0.5, 2.0, 3.0, 0.0]]))


def test_sequence_level_weighs_a_response_by_the_product_of_its_token_weights():
    """Row 0: w = [2, 2] -> W = 4 > C = 3: TIS weight 3 on both tokens; row 1: w = [.5, 3] -> W = 1.5: weight 1.5.
    With the drop line D = 3.5: row 0 (W = 4) dropped. Row 1's padded last token (mask 0) keeps weight 1."""
    log_w = torch.log(torch.tensor([[2.0, 2.0, 1.0], [0.5, 3.0, 7.0]]))  # [2, 3]
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])  # [2, 3]
    tis = correction_weights(log_w, mask, "tis", "sequence", 3.0, 10.0)
    assert torch.allclose(tis, torch.tensor([[3.0, 3.0, 1.0], [1.5, 1.5, 1.0]]))
    drop = correction_weights(log_w, mask, "tis-drop", "sequence", 3.0, 3.5)
    assert torch.allclose(drop, torch.tensor([[0.0, 0.0, 1.0], [1.5, 1.5, 1.0]]))


def test_ftis_filter_and_kl_by_hand():
    """F-TIS keeps A > 0 always, and A <= 0 only below g. KL(π_θ ‖ π_gen) of w = π_θ/π_gen = [.5, 2, 5, 20] (δ = −log
    w), the default rlogr-sum Σ w log w − w + 1: 45.502; k3-sum Σ 1/w + log w − 1: 3.355."""
    learner = torch.zeros(1, 4)  # [1, 4]
    kl = sequence_kl(learner, -LOG_W, MASK)
    assert kl.item() == pytest.approx(float((W * torch.log(W) - W + 1).sum()), rel=1e-6)  # float32 w
    assert kl.item() == pytest.approx(45.5015, abs=1e-4)
    k3 = sequence_kl(learner, -LOG_W, MASK, "k3-sum")
    assert k3.item() == pytest.approx(float((1 / W - 1 + torch.log(W)).sum()), rel=1e-6)
    assert k3.item() == pytest.approx(3.3552, abs=1e-4)
    advantages = torch.tensor([1.0, -1.0, -1.0, 0.0])
    kls = torch.tensor([60.0, 60.0, 10.0, 60.0])
    assert ftis_kept(advantages, kls, 50.0).tolist() == [True, False, True, False]


def test_per_source_advantages_are_each_policys_own_grpo():
    """F-TIS's vertical grouping: each policy's K rewards normalised within themselves (TRL's GRPO per source)."""
    pool = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])  # [P=1, M=2, K=2]
    got = per_source_advantages(pool)
    assert torch.allclose(got[0, 0], group_advantages(pool[:, 0])[0]) and torch.equal(got[0, 1], torch.zeros(2))
    assert resolved_grouping("auto", "ftis") == "source" and resolved_grouping("auto", "tis") == "pool"


@pytest.mark.parametrize("correction", ["tis", "tis-drop"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_bound_infinity_weighs_by_w_itself(correction, level):
    """C = D = inf: T(w) = w, plain importance sampling under the snapshot's ratio."""
    log_w = torch.log(torch.tensor([[0.5, 2.0, 5.0e3], [1e-4, 3.0, 7.0]]))  # [2, 3]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # [2, 3]
    got = correction_weights(log_w, mask, correction, level, math.inf, math.inf)
    if level == "token":
        assert torch.allclose(got, torch.where(mask.bool(), log_w.exp(), torch.ones_like(log_w)))
    else:
        seq = torch.exp((log_w * mask).sum(dim=1, keepdim=True)).expand_as(log_w)  # [2, 3]
        assert torch.allclose(got, torch.where(mask.bool(), seq, torch.ones_like(log_w)))


def test_ess_by_hand():
    """Kish: (Σw)² / (n Σw²). w = [1, 1, 1, 1]: 1. w = [4, 0, 0, 0]: 16 / (4·16) = 1/4. Raw w = [.5, 2, 5, 20]:
    27.5² / (4 · 429.25) = 0.44042; the loss's TIS weights [.5, 2, 3, 3]: 8.5² / (4 · 22.25) = 0.81180; a row the
    loss drops: its weights are 0, its raw ones stay."""
    assert normalised_ess(4.0, 4.0, 4) == 1.0
    assert normalised_ess(4.0, 16.0, 4) == 0.25
    rows = source_diagnostics(LOG_W, MASK, "tis", "token", 3.0, 10.0, torch.tensor([True]), torch.tensor([1.0]))
    ess = normalised_ess(rows["w_sum"].item(), rows["w_sq_sum"].item(), rows["units"].item())
    assert ess == pytest.approx(27.5 ** 2 / (4 * 429.25))
    loss_ess = normalised_ess(rows["lw_sum"].item(), rows["lw_sq_sum"].item(), rows["units"].item())
    assert loss_ess == pytest.approx(8.5 ** 2 / (4 * 22.25))
    assert rows["truncated"].item() == 2 and rows["log_w_max"].item() == pytest.approx(math.log(20.0))
    dropped = source_diagnostics(LOG_W, MASK, "tis", "token", 3.0, 10.0, torch.tensor([False]), torch.tensor([1.0]))
    assert dropped["lw_sum"].item() == 0 and dropped["w_sum"].item() == pytest.approx(27.5) and not dropped["used"].item()
    assert dropped["filtered"].item() == 4
    assert math.isnan(normalised_ess(0.0, 0.0, 0))


class ScoredTrainer(FakeTrainer):
    """Log-probs that depend on the token: ``-3 - 0.05·(id mod 5)``, plus ``shift(id)`` (a distant peer)."""

    def __init__(self, tokenizer, shift=None):
        super().__init__(tokenizer)
        self.shift = shift

    def score_completions(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, batch_size=None):
        logps = -3.0 - 0.05 * (completion_ids % 5).float()  # [B, C]
        return logps if self.shift is None else logps + self.shift(completion_ids)  # [B, C]


def scored_step(tmp_path, thl_tokenizers, regime, peer_shift, peer_texts, **settings):
    """One ``regime`` step of tiny-bpe with the peer tiny-sp (``peer_texts``, rewards 1, 0, 1, 0), both with GPT-2's
    tokenizer and scored by :class:`ScoredTrainer`; returns (learner, batch, recorded)."""
    same = {"gpt2": thl_tokenizers["gpt2"], "mistral-sp": thl_tokenizers["gpt2"]}
    adapters = pool_of(tmp_path, same, regime, **settings)
    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    learner.bind(ScoredTrainer(padded(thl_tokenizers["gpt2"])))
    peer.bind(ScoredTrainer(padded(thl_tokenizers["gpt2"]), shift=peer_shift))
    merged = peer_then_learner(learner, peer, peer_texts, [1.0, 0.0, 1.0, 0.0])
    return learner, merged, {key: values[-1] for (_, key), values in learner.trainer.recorded.items()}


def _prp_step(tmp_path, thl_tokenizers, peer_shift, **settings):
    """One PRP step of tiny-bpe with the peer tiny-sp, both with GPT-2's tokenizer; returns (batch, recorded)."""
    return scored_step(tmp_path, thl_tokenizers, "prp", peer_shift, [" 4", " 5", " 4", " 3"], **settings)[1:]


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_peer_that_is_the_learner_itself_has_ess_1_and_log_ratio_0(thl_tokenizers, tmp_path):
    merged, recorded = _prp_step(tmp_path, thl_tokenizers, None, correction="tis")
    assert recorded["prp/from/tiny-sp/ess"] == pytest.approx(1.0, abs=1e-9)
    assert recorded["prp/from/tiny-sp/log_ratio_mean"] == pytest.approx(0.0, abs=1e-6)
    assert recorded["prp/from/tiny-sp/log_ratio_max"] == pytest.approx(0.0, abs=1e-6)
    assert recorded["prp/from/tiny-sp/truncated_share"] == 0.0 and recorded["prp/from/tiny-sp/used_share"] == 1.0
    assert torch.allclose(merged[TOKEN_WEIGHTS], torch.ones_like(merged[TOKEN_WEIGHTS]))


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_distant_peer_has_a_low_ess_and_the_truncated_share_it_should(thl_tokenizers, tmp_path):
    """The peer's log-probs are the learner's - 4 on odd token ids and + 1 on even ones (EOS, most tokens here), so
    log w = +4 (w = e⁴ > C = 3: truncated) on the few odd ids and -1 on even ones: the truncated share is the share
    of odd ids among the peer rows' tokens, and the ESS (Kish) follows from the two counts."""
    def shift(ids):
        return torch.where(ids % 2 == 1, -4.0, 1.0)  # [B, C]

    merged, recorded = _prp_step(tmp_path, thl_tokenizers, shift, correction="tis", truncation_bound=3.0)
    peer_ids = merged["completion_ids"][4:][merged["completion_mask"][4:].bool()]  # the peer rows' tokens
    even, odd = int((peer_ids % 2 == 0).sum()), int((peer_ids % 2 == 1).sum())
    assert even > 0 and odd > 0
    high, low = math.exp(4.0), math.exp(-1.0)
    ess = (odd * high + even * low) ** 2 / ((even + odd) * (odd * high ** 2 + even * low ** 2))
    assert ess < 0.5
    assert recorded["prp/from/tiny-sp/truncated_share"] == pytest.approx(odd / (even + odd))
    assert recorded["prp/from/tiny-sp/log_ratio_max"] == pytest.approx(4.0, abs=1e-5)
    assert recorded["prp/from/tiny-sp/log_ratio_mean"] == pytest.approx((4.0 * odd - even) / (even + odd), abs=1e-5)
    weights = merged[TOKEN_WEIGHTS][4:][merged["completion_mask"][4:].bool()]  # min(w, 3)
    assert torch.allclose(weights, torch.where(peer_ids % 2 == 1, 3.0, low))
    assert recorded["prp/from/tiny-sp/ess_raw"] == pytest.approx(ess, rel=1e-5)
    loss_ess = (odd * 3.0 + even * low) ** 2 / ((even + odd) * (odd * 9.0 + even * low ** 2))
    assert recorded["prp/from/tiny-sp/ess"] == pytest.approx(loss_ess, rel=1e-5)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_tis_drop_drops_a_distant_peers_rows_from_the_used_share(thl_tokenizers, tmp_path):
    """Sequence level, D = 10: every peer response has W = Π w_t far above 10 when all its tokens have log w = 3,
    so all are dropped: used share 0, filtered share 1, every peer token weight 0."""
    merged, recorded = _prp_step(tmp_path, thl_tokenizers, lambda ids: torch.full(ids.shape, -3.0),
                                 correction="tis-drop", correction_level="sequence")
    assert recorded["prp/from/tiny-sp/used_share"] == 0.0 and recorded["prp/from/tiny-sp/filtered_share"] == 1.0
    assert not merged[TOKEN_WEIGHTS][4:][merged["completion_mask"][4:].bool()].any()


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_ftis_drops_only_the_negative_advantage_rows_of_a_distant_peer(thl_tokenizers, tmp_path):
    """log w = 3 on every peer token: each row's KL over its tokens (``kl_over: tokens``) is (e^-3 + 3 - 1) per token,
    above g = 1 for every row: the peer rows with advantage <= 0 (its failures: rewards 0 and its own group's mean 0.5) get weight 0, its successes keep
    min(w, C) = C; advantages are the peer's own group's (vertical)."""
    merged, recorded = _prp_step(tmp_path, thl_tokenizers, lambda ids: torch.full(ids.shape, -3.0),
                                 correction="ftis", kl_bound=1.0, truncation_bound=2.0, kl_over="tokens")
    advantages = merged["advantages"][4:]
    mask = merged["completion_mask"][4:].bool()
    weights = merged[TOKEN_WEIGHTS][4:]
    for row in range(4):
        expected = 2.0 if advantages[row] > 0 else 0.0
        assert torch.allclose(weights[row][mask[row]], torch.full((int(mask[row].sum()),), expected))
    assert recorded["prp/from/tiny-sp/used_share"] == pytest.approx(float((advantages > 0).float().mean()))


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_no_correction_adds_no_weights(thl_tokenizers, tmp_path):
    merged, recorded = _prp_step(tmp_path, thl_tokenizers, None)
    assert TOKEN_WEIGHTS not in merged and recorded["prp/from/tiny-sp/ess"] == pytest.approx(1.0)
    assert recorded["prp/from/tiny-sp/ess_raw"] == pytest.approx(1.0)


def test_the_prp_ftis_recipe_plans_on_8_gpus_as_the_corrected_arm():
    """``mutualrl train --pool prp-ftis-2qwen --dry-run --gpus 8`` prints the plan of the paper's corrected PRP arm
    (same placement, batches, commands at the same run folder): only the correction settings differ, and the reward
    scaling F-TIS defines (each node's advantage over the std of its own G samples: ``scale_rewards: group``; the
    paper's recipes scale by the batch's), which changes the planned GRPO settings' hash and nothing else."""
    import io
    import re

    from rich.console import Console

    from mutualrl.config import load_run_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan
    from mutualrl.launch.plan.render import render_plan

    texts = []
    for recipe in ("prp-corrected-2qwen", "prp-ftis-2qwen"):
        config = load_run_config(recipe, overrides=["launch.gpus=8", "launch.gpu_memory_gib=80"]).config
        if recipe == "prp-ftis-2qwen":
            settings = config.regime.prp
            assert (settings.correction, settings.correction_level, settings.truncation_bound, settings.kl_bound,
                    settings.kl_estimator, settings.denominator, settings.advantage_grouping) == (
                "ftis", "token", 2.0, 50.0, "rlogr-sum", "peer", "auto")
        assert config.grpo["scale_rewards"] == ("group" if recipe == "prp-ftis-2qwen" else "batch")
        plan = make_launch_plan(config, Path("/tmp/unused-run"), simulate=True, vllm_available=True, dry_run=True)
        out = io.StringIO()
        render_plan(plan, Console(file=out, width=240))
        texts.append(re.sub(r"MUTUALRL_PLANNED_GRPO_SHA256=[0-9a-f]{64}", "MUTUALRL_PLANNED_GRPO_SHA256=…",
                            out.getvalue()))
    assert texts[0] == texts[1] and "on 8 GPUs" in texts[1]
