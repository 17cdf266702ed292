"""F-TIS's KL over texts (``regime.prp.kl_over: texts``), by enumeration over small worlds (tests/bytekd_worlds.py).

The table model writes ``"12"`` as one token or as ``"1" "2"`` (a non-canonical split with mass); the byte-chain
model writes one byte a token and gives every text the table model's probability. Each side's probability of each
byte of a text given the bytes before is summed over every tokenization (the covers), so the per-byte log-ratios of
two models equal on texts are 0 whichever split was sampled, on the generator's side (it publishes its own with its
records) and on the learner's (its retokenization of the text). Against an unequal learner each figure is the exact
one of brute-force sums over the models' complete sequences.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from bytekd_worlds import ByteChainModel, TableModel, brute_next_bytes, brute_texts

from mutualrl.regimes.core import cover_scoring
from mutualrl.regimes.core.cover_scoring import CoverLimits
from mutualrl.regimes.core.next_bytes import END
from mutualrl.regimes.core.peer_responses import LearnerResponses
from mutualrl.regimes.core.pooled_rows import PooledStep
from mutualrl.regimes.core.publication import text_byte_records
from mutualrl.regimes.core.written_bytes import text_byte_logps
from mutualrl.regimes.prp.maths import KL_ESTIMATORS, text_kl, written_log_ratios

EXACT = CoverLimits(0.0, 0)
DEFAULT_LIMITS = CoverLimits(1e-4, 8)  # regime.prp.cover_floor and max_covers's defaults
PIECES = [b"1", b"2", b"12", b""]


def table(seed: int = 1) -> TableModel:
    model = TableModel(list(PIECES), depth=3, seed=seed)
    model.theta = model.theta.double()  # float64 throughout: the covers against the brute sums to 1e-9
    return model


def canonical(model: TableModel, text: bytes) -> list[int]:
    """The table model's canonical tokens of ``text``: longest match first (``"12"`` one token)."""
    out, at = [], 0
    while at < len(text):
        step = next(n for n in (2, 1) if text[at:at + n] in model.pieces[:model.eos])
        out.append(model.pieces.index(text[at:at + step]))
        at += step
    return out


def byte_values(model, tokens, finished: bool = True) -> torch.Tensor:
    """The model's log-prob of each byte of the text ``tokens`` write, then of its end (the covers, exact)."""
    text = model.text_of(tokens)
    values, dropped = text_byte_logps(text, tokens, finished, model.token_pieces, model.forward(), EXACT)
    assert dropped == 0.0
    return values


_BRUTE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {prefix: log q [258]}


def brute_q(model, prefix: bytes) -> torch.Tensor:
    """``log q(· | prefix)`` ``[258]`` by summing the model's complete sequences (tests/bytekd_worlds.py), every
    prefix's at once per model (the sums of one pass over its sequences)."""
    if model not in _BRUTE:
        joint: dict[bytes, torch.Tensor] = {}
        for tokens, logp in model.sequences():
            text = model.text_of(tokens)
            for o in range(len(text) + 1):
                row = joint.setdefault(text[:o], torch.full((258,), float("-inf"), dtype=torch.float64))
                symbol = text[o] if o < len(text) else END
                row[symbol] = torch.logaddexp(row[symbol], logp.double().detach())
        _BRUTE[model] = {prefix: row - torch.logsumexp(row, 0) for prefix, row in joint.items()}
    return _BRUTE[model][prefix]


def brute_values(model, text: bytes) -> torch.Tensor:
    """The same by summing the model's complete sequences: ``log q(x_o | x_{<o})``, then ``log q(END | x)``."""
    return torch.stack([brute_q(model, text[:o])[text[o] if o < len(text) else END] for o in range(len(text) + 1)])


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_learner_equal_on_texts_is_at_zero_whichever_split_the_generator_sampled():
    generator = table()
    learner = ByteChainModel(generator, b"12")
    split = [lp for tokens, lp in generator.sequences() if tokens[:2] == (0, 1)]
    assert float(torch.stack(split).exp().sum()) > 0.02  # "12" written "1" "2": a non-canonical split with mass
    for tokens, _ in generator.sequences():
        text = generator.text_of(tokens)
        delta = written_log_ratios(byte_values(learner, learner.tokens_of(text)), byte_values(generator, tokens))
        assert delta.abs().max() < 1e-6, (tokens, delta)
        for estimator in KL_ESTIMATORS:
            assert abs(float(text_kl([delta], torch.tensor([len(text) + 1]), estimator)[0])) < 1e-6
    # the sampled tokens' log-probs compare splits: on the non-canonical row they differ by the split's own share
    token_ratio = float(generator.logps(())[0] + generator.logps((0,))[1]) - float(
        learner.logps(())[0] + learner.logps((0,))[1])
    assert abs(token_ratio) > 0.1


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_learner_that_splits_otherwise_is_at_zero_against_a_generator_equal_on_texts():
    """The learner's side: its canonical tokens of ``"12"`` are one token, the generator wrote one byte a token."""
    learner = table(seed=3)
    generator = ByteChainModel(learner, b"12")
    for text in brute_texts(learner):
        delta = written_log_ratios(byte_values(learner, canonical(learner, text)),
                                   byte_values(generator, generator.tokens_of(text)))
        assert delta.abs().max() < 1e-6, (text, delta)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_each_byte_is_the_exact_conditional_and_the_row_sums_to_the_texts_log_ratio():
    generator, learner = table(seed=1), table(seed=2)
    p_gen, p_learner = brute_texts(generator), brute_texts(learner)
    assert torch.allclose(brute_q(generator, b"1"), brute_next_bytes(generator, b"1"), atol=1e-12)
    for tokens, _ in generator.sequences():
        text = generator.text_of(tokens)
        gen, own = byte_values(generator, tokens), byte_values(learner, canonical(learner, text))
        assert torch.allclose(gen, brute_values(generator, text), atol=1e-9)
        assert torch.allclose(own, brute_values(learner, text), atol=1e-9)
        assert torch.allclose(gen, byte_values(generator, canonical(generator, text)), atol=1e-12)  # not the split's
        delta = written_log_ratios(own, gen)
        assert float(delta.sum()) == pytest.approx(float(p_gen[text] - p_learner[text]), abs=1e-9)
        length = torch.tensor([len(canonical(learner, text)) + 1])
        assert float(text_kl([delta], length, "mean-log-ratio")[0]) == pytest.approx(
            float(delta.sum()) / int(length[0]), abs=1e-12)


def test_the_default_estimates_the_per_byte_kl_at_the_generators_prefixes_exactly():
    """``E_{x~gen}[rlogr-sum] = Σ_prefix P_gen(prefix) KL(q_θ(·|prefix) ‖ q_gen(·|prefix))``, and ``E[Σ_o δ_o]`` the
    texts' ``KL(p_gen ‖ p_θ)``: the estimate depends on the text alone, so the expectation is over texts."""
    generator, learner = table(seed=1), table(seed=2)
    p_gen, p_learner = brute_texts(generator), brute_texts(learner)
    expected = {"rlogr-sum": 0.0, "log-ratio": 0.0}
    for text, logp in p_gen.items():
        delta = written_log_ratios(byte_values(learner, canonical(learner, text)),
                                   byte_values(generator, canonical(generator, text)))
        expected["rlogr-sum"] += float(logp.exp()) * float(text_kl([delta], torch.tensor([1]), "rlogr-sum")[0])
        expected["log-ratio"] += float(logp.exp()) * float(delta.sum())
    prefixes = {text[:o] for text in p_gen for o in range(len(text) + 1)}
    by_prefix = 0.0
    for prefix in prefixes:
        reach = sum(float(lp.exp()) for text, lp in p_gen.items() if text.startswith(prefix))
        q_gen, q_learner = brute_q(generator, prefix), brute_q(learner, prefix)
        seen = torch.isfinite(q_learner)
        by_prefix += reach * float((q_learner[seen].exp() * (q_learner[seen] - q_gen[seen])).sum())
    forward_kl = sum(float(lp.exp()) * float(lp - p_learner[text]) for text, lp in p_gen.items())
    assert expected["rlogr-sum"] == pytest.approx(by_prefix, abs=1e-9) and by_prefix > 0.05
    assert expected["log-ratio"] == pytest.approx(forward_kl, abs=1e-9)


def test_a_cut_row_compares_its_own_bytes_and_a_missing_one_is_infinitely_far():
    generator, learner = table(seed=1), table(seed=2)
    gen = byte_values(generator, (2, 0))  # "121" and its end
    cut = byte_values(learner, (2,), finished=False)  # the learner's row holds "12" only
    delta = written_log_ratios(cut, gen)
    assert len(delta) == 2 and torch.allclose(delta, gen[:2] - brute_values(learner, b"121")[:2], atol=1e-9)
    assert written_log_ratios(byte_values(learner, (2, 0, 0)), gen) is None  # a generator's shorter text
    kl = text_kl([None, delta], torch.tensor([3, 1]))
    assert math.isinf(float(kl[0])) and float(kl[1]) > 0


class TableTrainer:
    """What the enumeration reads of a trainer, over a world's model (test-only): its vocabulary's bytes, its EOS
    and ``completion_logits`` (each sequence's next-token log-probs after each prefix)."""

    def __init__(self, world):
        self.world = world
        width = len(world.pieces)
        self.model = SimpleNamespace(config=SimpleNamespace(vocab_size=width))
        self.processing_class = SimpleNamespace(eos_token_id=world.eos, pad_token_id=world.eos)
        self.eos_token_ids = [world.eos]
        self.accelerator = SimpleNamespace(num_processes=1)  # one rank: the enumeration's forwards are its own
        self.metrics: dict[str, float] = {}
        cover_scoring._PIECES[(id(self.processing_class), width)] = world.token_pieces

    def record_metrics(self, values) -> None:
        self.metrics.update(values)

    def completion_logits(self, model, prompt_ids, prompt_mask, ids, mask) -> torch.Tensor:
        out = torch.zeros((ids.shape[0], ids.shape[1], len(self.world.pieces)))  # [N, W, V]
        for row in range(ids.shape[0]):
            n = int(mask[row].sum()) - 1
            history = tuple(int(v) for v in ids[row, :n])
            out[row, :n + 1] = torch.stack([self.world.logps(history[:p]).float() for p in range(n + 1)])
        return out


def published(world, rows: list[tuple[int, ...]], limits: CoverLimits = DEFAULT_LIMITS,
              metrics: dict | None = None) -> list[np.ndarray | None]:
    """The generator's records' ``text_byte_logps`` of its rows (every one finished) under ``limits``, as a peer reads
    them; what the generator logs goes into ``metrics``."""
    width = max(len(tokens) for tokens in rows) + 1
    ids = torch.full((len(rows), width), world.eos)  # [N, C]
    for i, tokens in enumerate(rows):
        ids[i, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    output = {"completion_ids": ids, "prompt_ids": torch.zeros((len(rows), 1), dtype=torch.long),
              "prompt_mask": torch.ones((len(rows), 1), dtype=torch.long)}
    lengths = np.array([len(tokens) + 1 for tokens in rows])
    texts = [world.text_of(tokens).decode() for tokens in rows]
    trainer = TableTrainer(world)
    values = text_byte_records(output, lengths, texts, trainer, limits)
    if metrics is not None:
        metrics.update(trainer.metrics)
    return [None if v is None else np.asarray(v, np.float32) for v in values]


def filter_rows(learner, generator, rows, advantages, tokens_of, kl_bound: float,
                limits: CoverLimits = DEFAULT_LIMITS, metrics: dict | None = None) -> torch.Tensor:
    """PRP's F-TIS filter (``PRPAdapter.rows_kept``) over the generator's ``rows``, the learner ``learner``, both
    sides' enumerations under ``limits`` (``regime.prp.cover_floor`` / ``max_covers``); both sides' metrics go into
    ``metrics``."""
    from mutualrl.config import load_run_config
    from mutualrl.regimes.prp.adapter import PRPAdapter

    config = load_run_config("tiny", regime="prp", check_grpo=False).config
    config.regime.prp = replace(config.regime.prp, correction="ftis", kl_bound=kl_bound, cover_floor=limits.floor,
                                max_covers=limits.max_states)
    adapter = PRPAdapter(config, "tiny-bpe", exchange=None)
    assert adapter.text_byte_limits == limits and "text_byte_logps" in adapter.peer_columns
    adapter.trainer = TableTrainer(learner)
    texts = [generator.text_of(tokens) for tokens in rows]
    ids = [tokens_of(text) + [learner.eos] for text in texts]
    width, n = max(map(len, ids)), len(rows)
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])  # [N, T]
    batch = {"prompt_ids": torch.zeros((n + 1, 1), dtype=torch.long),
             "prompt_mask": torch.ones((n + 1, 1), dtype=torch.long),
             "advantages": torch.tensor([0.0, *advantages])}
    step = PooledStep(batch=batch, n_local=1, width=width, sources=[("tiny-sp", i) for i in range(n)],
                      responses=LearnerResponses([t.decode() for t in texts], [True] * n, ids, []),
                      peer_mask=mask, scored=torch.ones(n, dtype=torch.bool),
                      snapshot=torch.zeros((n + 1, width)), peer_traces=torch.zeros((n, width)), behaviour=None)
    kept = adapter.rows_kept(step, published(generator, rows, limits, metrics))
    if metrics is not None:
        metrics.update(adapter.text_divergence)
    return kept


ROWS = [(0, 1), (2,), (0,), (1, 2), (2, 0, 1)]  # "12" written "1" "2", "12", "1", "212", "1212"


def test_the_filter_keeps_every_row_of_a_peer_equal_on_texts_even_at_a_tiny_bound():
    generator = table()
    learner = ByteChainModel(generator, b"12")
    kept = filter_rows(learner, generator, ROWS, [-1.0] * len(ROWS), learner.tokens_of, kl_bound=1e-5)
    assert kept.tolist() == [True] * len(ROWS)


def test_the_filter_drops_the_rows_whose_text_level_kl_reaches_the_bound():
    generator, learner = table(seed=1), table(seed=2)
    exact = []
    for tokens in ROWS:
        text = generator.text_of(tokens)
        delta = brute_values(generator, text) - brute_values(learner, text)
        exact.append(float(text_kl([delta], torch.tensor([1]))[0]))
    advantages = [-1.0, -1.0, 1.0, -1.0, 0.0]
    negative = sorted(kl for kl, a in zip(exact, advantages, strict=True) if a <= 0)
    bound = (negative[0] + negative[-1]) / 2  # between the nearest and the farthest row the filter can drop
    kept = filter_rows(learner, generator, ROWS, advantages, lambda text: canonical(learner, text), bound)
    assert kept.tolist() == [a > 0 or kl < bound for a, kl in zip(advantages, exact, strict=True)]
    assert negative[-1] - negative[0] > 0.1 and not all(kept.tolist()) and any(kept[[0, 1, 3, 4]].tolist())


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_the_enumerations_limits_are_the_regimes_settings_on_both_sides():
    """A generator that spreads "abab" over its 7 tokenizations, a learner equal to it on texts that writes a byte a
    token (one tokenization). Exact (``cover_floor`` and ``max_covers`` 0), the filter keeps every row at a tiny
    bound; with ``max_covers: 1`` the generator's published values lose the mass of the tokenizations it drops (the
    learner's lose none), so the rows read as divergent and are dropped: the settings reach the generator's side, and
    each side logs the share it dropped. The generator itself as the learner (retokenized "ab" "ab"): its side drops
    mass under ``max_covers: 1`` and none exact."""
    from mutualrl.regimes.prp.spec import PRPSettings

    assert CoverLimits.of(PRPSettings()) == DEFAULT_LIMITS
    generator = TableModel([b"a", b"b", b"ab", b"ba", b"aba", b"bab", b""], depth=4, seed=3, scale=0.1)
    learner = ByteChainModel(generator, b"ab")
    rows = [(0, 1, 0, 1), (2, 2), (4, 1)]  # "abab" three ways
    assert {generator.text_of(tokens) for tokens in rows} == {b"abab"}
    by_limits = {}
    for limits in (EXACT, CoverLimits(0.0, 1)):
        metrics: dict = {}
        kept = filter_rows(learner, generator, rows, [-1.0] * 3, learner.tokens_of, 1e-4, limits, metrics)
        by_limits[limits] = kept.tolist(), metrics["mutual/text_bytes_cover_dropped"], metrics["ftis_cover_dropped"]
    assert by_limits[EXACT][:2] == ([True] * 3, 0.0)
    assert by_limits[CoverLimits(0.0, 1)][0] == [False] * 3 and by_limits[CoverLimits(0.0, 1)][1] > 0.05
    assert all(float(by_limits[limits][2]) == 0.0 for limits in by_limits)  # the learner drops nothing
    # the learner's side: the generator itself as the learner, its own canonical split "ab" "ab" retokenized
    for limits in (EXACT, CoverLimits(0.0, 1)):
        metrics = {}
        kept = filter_rows(generator, generator, rows, [-1.0] * 3, lambda text: [2, 2], 1e-4, limits, metrics)
        by_limits[limits] = kept.tolist(), float(metrics["ftis_cover_dropped"])
    assert by_limits[EXACT] == ([True] * 3, 0.0) and by_limits[CoverLimits(0.0, 1)][1] > 0.05


@pytest.mark.slow  # the real SEE and the bytes of GPT-2's vocabulary: several seconds
def test_through_the_see_a_peer_equal_on_texts_keeps_its_rows_whatever_its_traces(thl_tokenizers, tmp_path):
    """Both policies give every next token the same probability (equal on texts); the peer's traces are 3 nats below
    the learner's, so over its tokens every row of advantage <= 0 is dropped at g = 1 (test_prp_corrections.py). Over
    texts none is: the peer publishes ``text_byte_logps`` through the SEE (checked as a peer's shard is), the learner
    computes its own over GPT-2's tokenizations of each text, and each row keeps ``min(w, C) = 2``."""
    from test_prp_corrections import ScoredTrainer
    from test_regimes_seam import padded, peer_then_learner, pool_of

    from mutualrl.regimes.core.trainer_interface import TOKEN_WEIGHTS

    class TextTrainer(ScoredTrainer):  # a model object that says its logits' width (the enumeration reads it)
        def __init__(self, tokenizer, shift=None):
            super().__init__(tokenizer, shift)
            self.model = SimpleNamespace(config=SimpleNamespace(vocab_size=len(tokenizer)))

    gpt2 = thl_tokenizers["gpt2"]
    adapters = pool_of(tmp_path, {"gpt2": gpt2, "mistral-sp": gpt2}, "prp", correction="ftis", kl_bound=1.0)
    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    tokenizer = padded(gpt2)  # one object: its vocabulary's bytes are built once
    learner.bind(TextTrainer(tokenizer))
    peer.bind(TextTrainer(tokenizer, shift=lambda ids: torch.full(ids.shape, -3.0)))
    merged = peer_then_learner(learner, peer, [" 4", " 5", " 4", " 3"], [1.0, 0.0, 1.0, 0.0])
    advantages, mask = merged["advantages"][4:], merged["completion_mask"][4:].bool()
    assert (advantages <= 0).sum() == 2
    for row in range(4):
        assert torch.allclose(merged[TOKEN_WEIGHTS][4:][row][mask[row]], torch.full((int(mask[row].sum()),), 2.0))
    recorded = {key: values[-1] for (_, key), values in learner.trainer.recorded.items()}
    assert recorded["prp/ftis_text_missing"] == 0.0 and recorded["prp/ftis_cover_dropped"] < 1e-3  # both sides alike
    published = peer.exchange.read(0, "tiny-sp", columns=["response_text", "text_byte_logps"])
    assert [len(v) for v in published.column("text_byte_logps").to_pylist()] == [3, 3, 3, 3]  # 2 bytes and the end
