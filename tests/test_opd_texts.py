"""OPD's ``signal: sequence`` compares texts, however the learner split them, by enumeration through TRL's loss.

The learner writes ``"12"`` as one token or as ``"1" "2"`` (a non-canonical split with mass), the peer one digit a
token and equal to the learner on every text (tests/bytekd_worlds.py). With each side's log-probability of the text
summed over its tokenizations (the covers), the expected gradient over the learner's 40 sequences is 0; with the
learner's log-prob of the tokens it sampled (the old signal) it is not: that objective gains the entropy of the
tokenization given the text.

``signal: unit`` keeps that limit (docs/regimes.md, OPD): where the learner writes ``"12"`` as ``"1" "2"``, a split
the peer shares token for token, each token carries its own log-ratio, and the row's signal sums to ``log p_j(x) −
log π_θ(y)``: the split's probability against the text's, ``−log P_θ(y | x)`` for a peer equal on texts, not 0.
"""

from __future__ import annotations

import pytest
import torch
from bytekd_worlds import ByteChainModel, TableModel, brute_texts
from test_opd_loss_types import token_logps
from test_regimes_opd import grad_trainer  # noqa: F401 - a fixture

from mutualrl.regimes.core.byte_covers import find_covers, text_logp
from mutualrl.regimes.core.distillation import distillation_signal, signal_row_scale, text_signal
from mutualrl.regimes.opd.maths import opd_advantages

LAM = 0.5


def own_text_logp(model: TableModel, tokens) -> torch.Tensor:
    text = model.text_of(tokens)
    covers = find_covers(text, model.token_pieces, model.forward(), given=tokens)
    return text_logp(covers, text, model.token_pieces, True)


def trl_gradient(trainer, monkeypatch, model, tokens, own_text, judge_text) -> torch.Tensor:
    from trl import GRPOTrainer

    theta = model.theta.clone().requires_grad_(True)
    n = len(tokens) + 1
    mask = torch.ones(1, n, dtype=torch.long)

    def forward(self, _model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps = token_logps(model, tokens, theta)[None]  # [1, n]
        return logps, torch.zeros_like(logps), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    monkeypatch.setattr(trainer, "loss_type", "grpo")
    scale = signal_row_scale("grpo", mask, trainer.max_completion_length, n, 1)  # [1] |y| / L
    signal = text_signal(own_text.reshape(1), judge_text.reshape(1, 1), torch.ones(1, 1, n, dtype=torch.bool),
                         torch.ones(1, 1)) * scale[:, None]
    batch = {"prompt_ids": torch.zeros((1, 1), dtype=torch.long), "prompt_mask": torch.ones((1, 1), dtype=torch.long),
             "completion_ids": torch.tensor([[*tokens, model.eos]]), "completion_mask": mask,
             "num_items_in_batch": mask.sum(),
             "advantages": opd_advantages(torch.zeros(1), signal, mask, LAM, reward_term=False)}
    trainer.compute_loss(trainer.model, batch).backward()
    return theta.grad


@pytest.mark.slow  # the tiny trainer of test_regimes_opd; TRL's loss on the learner's 40 sequences, twice
def test_the_sequence_signal_over_texts_is_zero_for_a_peer_equal_on_texts_however_the_learner_split(grad_trainer,
                                                                                                   monkeypatch):
    model = TableModel([b"1", b"2", b"12", b""], depth=3, seed=1)
    peer = brute_texts(ByteChainModel(model, b"12").reference)  # the peer's text probabilities: the learner's
    texts = brute_texts(model)
    split = sum(lp.exp() for tokens, lp in model.sequences() if tokens[:2] == (0, 1))  # "12" written "1" "2"
    assert float(split) > 0.02  # a non-canonical split with real mass
    exact, naive = torch.zeros_like(model.theta), torch.zeros_like(model.theta)
    for tokens, logp in model.sequences():
        text = model.text_of(tokens)
        own = own_text_logp(model, tokens)
        assert abs(float(own) - float(texts[text])) < 1e-5  # the covers' text probability
        weight = logp.exp().detach()
        exact += weight * trl_gradient(grad_trainer, monkeypatch, model, tokens, own, peer[text].detach())
        naive += weight * trl_gradient(grad_trainer, monkeypatch, model, tokens, logp.detach(), peer[text].detach())
    assert exact.abs().max() < 1e-6
    assert naive.abs().max() > 1e-3  # the learner's own tokens' log-prob: not 0


def test_unit_scores_a_non_canonical_split_by_its_own_probability_and_sequence_by_the_texts():
    """The learner writes ``"12"`` as ``"1" "2"``; the peer (one digit a token, equal to the learner on every text)
    splits it alike, so ``unit`` compares token for token and sums to ``log p_j(x) − log π_θ(y)`` = ``−log P_θ(y |
    x)`` > 0; ``sequence`` compares the texts: 0."""
    model = TableModel([b"1", b"2", b"12", b""], depth=3, seed=1)
    peer = ByteChainModel(model, b"12")
    tokens = (0, 1)  # "1" "2": the learner's non-canonical split of "12"
    text = model.text_of(tokens)
    assert text == b"12" and peer.tokens_of(text) == [0, 1]  # the peer's tokens are the learner's: per-token units
    own = token_logps(model, tokens).detach()[None]  # [1, 3] the learner's tokens and EOS
    history = peer.tokens_of(text)
    judged = torch.stack([peer.logps(tuple(history[:t]))[v] for t, v in enumerate([*history, peer.eos])])  # [3]
    valid, weights = torch.ones(1, 1, 3, dtype=torch.bool), torch.ones(1, 1)
    unit = distillation_signal(own, judged.float()[None, None], valid, weights)  # [1, 3]
    texts = brute_texts(model)
    assert abs(float(judged.sum()) - float(texts[text])) < 1e-5  # the peer is the learner on texts
    deficit = float(texts[text]) - float(own.sum())  # −log P_θ("1" "2" | "12"): the split's share of the text
    assert deficit > 0.05 and abs(float(unit.sum()) - deficit) < 1e-5
    assert unit.abs().max() > 1e-2
    sequence = text_signal(own_text_logp(model, tokens).detach().reshape(1), judged.sum().float().reshape(1, 1),
                           valid, weights)  # [1, 3]
    assert sequence.abs().max() < 1e-6


def segmentations(text: bytes, pieces: list[bytes]):
    """Every tokenization of ``text`` into the non-empty ``pieces`` (their ids)."""
    if not text:
        yield ()
        return
    for v, piece in enumerate(pieces):
        if piece and text.startswith(piece):
            for rest in segmentations(text[len(piece):], pieces):
                yield (v, *rest)


def test_the_sequence_signals_limits_are_the_regimes_settings_and_zero_keeps_every_tokenization(monkeypatch):
    """A model spreading its mass over the 24 tokenizations of "ababab": at the limits' defaults (1e-4, 8 a prefix)
    the text's log-probability loses a share of its mass (the signal of a peer equal on texts would not be 0); with
    both 0 it is the sum over every tokenization. OPD's ``cover_floor`` / ``max_covers`` reach the learner's scoring
    and the judges', and the judges log the share dropped."""
    from types import SimpleNamespace

    from mutualrl.regimes.core import cover_scoring, judgements
    from mutualrl.regimes.core.cover_scoring import CoverLimits
    from mutualrl.regimes.opd.adapter import OPDAdapter
    from mutualrl.regimes.opd.spec import OPDSettings

    model = TableModel([b"a", b"b", b"ab", b"ba", b"aba", b"bab", b""], depth=6, seed=3, scale=0.1)
    text = b"ababab"
    splits = list(segmentations(text, model.pieces))
    brute = torch.logsumexp(torch.stack([model.sequence_logp(split) for split in splits]), 0)
    by_limits = {}
    for limits in (CoverLimits(1e-4, 8), CoverLimits(0.0, 0)):
        covers = find_covers(text, model.token_pieces, model.forward(), splits[0], limits.floor, limits.max_states)
        by_limits[limits] = (float(text_logp(covers, text, model.token_pieces, True)), covers.dropped)
    assert len(splits) == 24
    assert by_limits[CoverLimits(0.0, 0)] == (pytest.approx(float(brute), abs=1e-5), 0.0)
    assert float(brute) - by_limits[CoverLimits(1e-4, 8)][0] > 0.05 and by_limits[CoverLimits(1e-4, 8)][1] > 0.05

    adapter = OPDAdapter.__new__(OPDAdapter)
    adapter.config = SimpleNamespace(regime=SimpleNamespace(opd=OPDSettings(signal="sequence", cover_floor=0.0,
                                                                            max_covers=0)))
    assert adapter.text_limits == CoverLimits(0.0, 0)
    adapter.config.regime.opd = OPDSettings(signal="unit")
    assert adapter.text_limits is None  # the judges publish no text log-probabilities
    seen, recorded = [], {}

    def scoring(trainer, model, prompt_ids, prompt_mask, texts, given, finished, limits):
        seen.append(limits)
        return torch.zeros(len(texts)), 0.25

    monkeypatch.setattr(cover_scoring, "text_logps", scoring)
    judge = SimpleNamespace(processing_class=SimpleNamespace(eos_token_id=9), model=None,
                            record_metrics=recorded.update)
    responses = SimpleNamespace(ids=[[1, 9]], finished=[True], texts=["ab"])
    judgements._over_texts(judge, responses, torch.zeros(1, 1), torch.ones(1, 1), 0, None, CoverLimits(0.0, 0))
    assert seen == [CoverLimits(0.0, 0)] and recorded == {"mutual/text_cover_dropped": 0.25}
