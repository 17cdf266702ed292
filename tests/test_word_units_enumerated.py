"""Comparison units over whole texts, by exact enumeration: splits the other tests do not cover, and the units' limit.

A world is a distribution over a few texts (each a tuple of words, then EOS) and two tokenizers that split each word
their own way (the text is pre-tokenized by word, as a BPE's pre-tokenizer does). Each policy is the text distribution
seen through its tokenizer: ``π(y_k | y_<k)`` = the mass of the texts whose tokens start with ``y_≤k`` over that of
``y_<k``, so a peer built from the learner's text distribution is equal to it word for word. The peer's log-probs of
its own tokens reach the learner's through THL and EOS on EOS, as ``aligned_judgements`` moves them, and the comparison
units through ``comparison_groups``.

- 3-vs-1, 2-vs-2 at different boundaries (``"x" "yz"`` against ``"xy" "z"``) and a peer token across two units
  (``"b c"``; ``"你好"``, two units under THL's ``auto`` units), random text distributions: OPD's
  expected gradient (``−Σ_t A_t ∇log π_θ(y_t)``, TRL's at the snapshot, ``test_opd_word_units`` checks it through
  TRL's loss per sample) is the exact gradient of the word-level reverse KL with word prefixes held fixed (the units a
  peer token straddles compared as one word), 0 for an equal peer; F-TIS's ``E_gen[rlogr-sum]`` is that KL at the
  generator's word prefixes.
- The limit (docs/regimes.md, OPD "Across tokenizers"): where a word's end is decided by the next token (``" 1"``
  then ``" 12"`` are both words), a unit's log-prob is that of its tokens, the mass of every word they begin; the two
  tokenizers' tokens begin different sets of words (the peer writes ``" 12"`` in one token, so its ``" 1"`` is the
  word ``" 1"`` alone). An equal peer then gives a nonzero expected signal and F-TIS figure, and PRP's per-word
  weight is no longer 1 in expectation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mutualrl.regimes.core.word_units import comparison_groups
from mutualrl.regimes.opd.maths import distillation_signal, opd_advantages
from mutualrl.regimes.prp.maths import correction_weights, sequence_kl
from mutualrl.thl import align_logprobs

LAM = 0.7
EOS = "</s>"


def letters(word: str) -> list[str]:
    """One token per character, a leading space kept on the first: ``" 12"`` → ``" 1"``, ``"2"``."""
    head = 2 if word.startswith(" ") else 1
    return [word[:head]] + list(word[head:])


def by_word(split):
    """A text's tokens (from its tuple of words), each word split on its own by ``split``."""
    return lambda words: [t for word in words for t in split(word)]


class World:
    """``texts``: tuples of words; per side (``"learner"``, ``"peer"``) a text's tokens from its words."""

    def __init__(self, texts: list[tuple[str, ...]], learner_tokens, peer_tokens):
        self.texts = texts
        self.split = {"learner": learner_tokens, "peer": peer_tokens}

    def tokens(self, i: int, side: str) -> tuple[str, ...]:
        return tuple(self.split[side](self.texts[i])) + (EOS,)

    def spans(self, i: int, side: str) -> np.ndarray:
        """int64 ``[n, 2]`` each token's characters; EOS ``(-1, -1)``."""
        ends = np.cumsum([len(t) for t in self.tokens(i, side)[:-1]])  # [n-1]
        return np.concatenate([np.stack([ends - [len(t) for t in self.tokens(i, side)[:-1]], ends], 1),
                               [[-1, -1]]]).astype(np.int64)  # [n, 2]

    def token_logps(self, logits: torch.Tensor, side: str) -> list[torch.Tensor]:
        """Each text's ``[n_i]`` log-probs of its tokens under the text distribution ``softmax(logits)``."""
        log_text = torch.log_softmax(logits, -1)  # [N]
        seqs = [self.tokens(i, side) for i in range(len(self.texts))]

        def mass(prefix: tuple[str, ...]) -> torch.Tensor:
            return torch.logsumexp(log_text[[j for j, s in enumerate(seqs) if s[:len(prefix)] == prefix]], 0)

        return [torch.stack([mass(s[:k + 1]) - mass(s[:k]) for k in range(len(s))]) for s in seqs]  # [n_i] each

    def aligned(self, i: int, peer_logps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The peer's trace on the learner's tokens ``[m]`` (THL; EOS on EOS) and their comparison units ``[m]``."""
        source, target = self.spans(i, "peer"), self.spans(i, "learner")
        result = align_logprobs(["".join(self.texts[i])], [source], [peer_logps.detach().double().numpy()],
                                [target], src_special=[source[:, 0] < 0])
        units = result.target_units[0]  # [m], -1 on the learner's EOS
        assert units[-1] < 0 and (units[:-1] >= 0).all()
        values = torch.tensor(result.values[0], dtype=torch.float64)  # [m]
        values[-1] = float(peer_logps[-1])  # both ended: the peer's EOS on the learner's EOS
        return values, torch.from_numpy(comparison_groups(result.target_comparison_units[0], result.target_copied[0]))

    def word_kl(self, learner: torch.Tensor, peer: torch.Tensor, prefixes: str) -> torch.Tensor:
        """``Σ_k Σ_{w<k} sg[P(w<k)] KL(P_θ(w_k | w<k) ‖ P_T(w_k | w<k))`` over whole words (EOS the last), the
        prefixes' ``P`` the learner's (``prefixes="learner"``) or the peer's."""
        lp, lq = torch.log_softmax(learner, -1), torch.log_softmax(peer, -1)  # [N], [N]
        seqs = [t + (EOS,) for t in self.texts]
        total = torch.zeros((), dtype=torch.float64)
        for prefix in {s[:k] for s in seqs for k in range(len(s))}:
            rows = [j for j, s in enumerate(seqs) if s[:len(prefix)] == prefix]
            nexts = sorted({seqs[j][len(prefix)] for j in rows})
            by_word = [[j for j in rows if seqs[j][len(prefix)] == w] for w in nexts]
            cl = torch.stack([torch.logsumexp(lp[js], 0) for js in by_word]) - torch.logsumexp(lp[rows], 0)
            cq = torch.stack([torch.logsumexp(lq[js], 0) for js in by_word]) - torch.logsumexp(lq[rows], 0)
            weight = torch.logsumexp((lp if prefixes == "learner" else lq)[rows], 0).detach().exp()
            total = total + weight * (cl.exp() * (cl - cq)).sum()
        return total

    def text_kl(self, learner: torch.Tensor, peer: torch.Tensor) -> torch.Tensor:
        """``KL(π_θ ‖ π_T)`` over whole texts, the sequence-level reverse KL."""
        lp, lq = torch.log_softmax(learner, -1), torch.log_softmax(peer, -1)  # [N], [N]
        return (lp.exp() * (lp - lq)).sum()


def opd_expected_gradient(world: World, theta: torch.Tensor, peer: torch.Tensor,
                          sequence: bool = False) -> torch.Tensor:
    """``E_{y ~ π_θ}[−Σ_t A_t ∇log π_θ(y_t)]`` with OPD's advantages (λ, no reward term), exactly."""
    peer_logps = world.token_logps(peer, "peer")
    weights = torch.softmax(theta, -1)  # [N]
    total = torch.zeros_like(theta)
    for i in range(len(world.texts)):
        values, groups = world.aligned(i, peer_logps[i])
        params = theta.clone().requires_grad_(True)
        own = world.token_logps(params, "learner")[i]  # [m] with the graph
        m = len(own)
        signal = distillation_signal(own.detach().float()[None], values.float()[None, None],
                                     torch.ones(1, 1, m, dtype=torch.bool), torch.ones(1, 1),
                                     groups[None, None], sequence)  # [1, m]
        advantages = opd_advantages(torch.zeros(1), signal, torch.ones(1, m), LAM, reward_term=False)  # [1, m]
        (-(advantages[0].double() * own).sum()).backward()
        total += float(weights[i]) * params.grad
    return total


def ftis_expected_divergence(world: World, theta: torch.Tensor, peer: torch.Tensor) -> float:
    """``E_{y ~ π_T}[rlogr-sum]`` per comparison unit over the peer's (the generator's) texts, exactly."""
    own, peer_logps = world.token_logps(theta, "learner"), world.token_logps(peer, "peer")
    weights = torch.softmax(peer, -1)  # [N]
    total = 0.0
    for i in range(len(world.texts)):
        values, groups = world.aligned(i, peer_logps[i])
        mask = torch.ones(1, len(values), dtype=torch.long)
        total += float(weights[i]) * float(sequence_kl(own[i].detach()[None], values[None], mask, "rlogr-sum",
                                                       groups[None]))
    return total


def two_policies(world: World, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random logits of two text distributions ``[N]`` each."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(len(world.texts), generator=g, dtype=torch.float64) for _ in range(2))


AB = "ab"
THREE_LETTER = [(a + b + c, " " + d) for a in AB for b in AB for c in AB for d in AB]  # 16 texts
SPLITS = {
    "3-vs-1": World(THREE_LETTER, by_word(lambda w: [w] if w[0] == " " else list(w)), by_word(lambda w: [w])),
    "2-vs-2": World(THREE_LETTER, by_word(lambda w: [w] if w[0] == " " else [w[0], w[1:]]),
                    by_word(lambda w: [w] if w[0] == " " else [w[:2], w[2:]])),
    # a peer token across two units: "b c" over the space (a multi-word token), "你好" over two CJK characters (each
    # its own unit under THL's "auto" units); the learner's tokens stay inside units
    "across a space": World([(a + b, " " + c) for a in AB for b in AB for c in AB],
                            lambda words: [words[0][0], words[0][1], words[1]],
                            lambda words: [words[0][0], words[0][1] + words[1]]),
    "across CJK characters": World([(a + b, " " + c) for a in "你好" for b in "你好" for c in AB],
                                   by_word(lambda w: [w] if w[0] == " " else list(w)), by_word(lambda w: [w])),
}
COMPARED_AS = {  # the words each world's comparison units are (word_kl reads only the texts): the peer's "b c" joins two
    split: World([("".join(text),) for text in world.texts], None, None) if split == "across a space" else world
    for split, world in SPLITS.items()}
NUMBERS = [" 1", " 12", " 2", " 21"]
PREFIX_WORDS = World([(w,) for w in NUMBERS] + [(w, v) for w in NUMBERS for v in NUMBERS], by_word(letters),
                     by_word(lambda w: [w] if w == " 12" else letters(w)))  # 20 texts; the peer has the token " 12"


def test_the_worlds_policies_are_the_text_distribution_and_their_units_as_intended():
    for world in (*SPLITS.values(), PREFIX_WORDS):
        theta, _ = two_policies(world, 0)
        for side in ("learner", "peer"):
            totals = torch.stack([x.sum() for x in world.token_logps(theta, side)])  # [N]
            assert torch.allclose(totals, torch.log_softmax(theta, -1))
    theta, _ = two_policies(SPLITS["2-vs-2"], 0)
    peer_logps = SPLITS["2-vs-2"].token_logps(theta, "peer")
    values, groups = SPLITS["2-vs-2"].aligned(0, peer_logps[0])  # "aaa" " a": learner a|aa| a|EOS, peer aa|a| a|EOS
    assert groups.tolist() == [0, 0, 2, 3]  # the word spread (same count, other boundaries), " a" copied, EOS its own
    assert float(values[:2].sum()) == pytest.approx(float(peer_logps[0][:2].sum()), abs=1e-6)
    theta, _ = two_policies(PREFIX_WORDS, 0)
    _, groups = PREFIX_WORDS.aligned(1, PREFIX_WORDS.token_logps(theta, "peer")[1])  # " 12": " 1" "2" vs " 12"
    assert groups.tolist() == [0, 0, 2]
    for split in ("across a space", "across CJK characters"):  # the units the peer's token reaches: one comparison
        world = SPLITS[split]
        theta, _ = two_policies(world, 0)
        _, groups = world.aligned(0, world.token_logps(theta, "peer")[0])
        assert groups.tolist() == ([0, 0, 0, 3] if split == "across a space" else [0, 0, 2, 3])


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_opd_per_word_signal_is_the_word_level_reverse_kl_gradient_and_zero_for_an_equal_peer(split):
    world = SPLITS[split]
    theta, other = two_policies(world, 3)
    equal = opd_expected_gradient(world, theta, theta)
    assert float(equal.abs().max()) < 1e-6  # THL's values are float32
    got = opd_expected_gradient(world, theta, other)
    params = theta.clone().requires_grad_(True)
    (LAM * COMPARED_AS[split].word_kl(params, other, "learner")).backward()
    assert torch.allclose(got, params.grad, atol=1e-6)
    assert float(params.grad.norm()) > 0.1


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_ftis_per_word_divergence_is_the_word_level_kl_and_zero_for_an_equal_peer(split):
    world = SPLITS[split]
    theta, other = two_policies(world, 4)
    assert ftis_expected_divergence(world, theta, theta) == pytest.approx(0.0, abs=1e-6)
    exact = float(COMPARED_AS[split].word_kl(theta, other, "peer"))
    assert ftis_expected_divergence(world, theta, other) == pytest.approx(exact, abs=1e-6)
    assert exact > 0.1


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("split", [*sorted(SPLITS), "prefix words"])
def test_opd_sequence_is_the_text_level_reverse_kl_gradient_and_zero_for_an_equal_peer_on_every_split(split):
    """``signal: sequence``: exact on every world, the prefix words included (where per unit it is not)."""
    world = PREFIX_WORDS if split == "prefix words" else SPLITS[split]
    theta, other = two_policies(world, 5)
    equal = opd_expected_gradient(world, theta, theta, sequence=True)
    assert float(equal.abs().max()) < 1e-5  # THL's values are float32, summed over the text
    got = opd_expected_gradient(world, theta, other, sequence=True)
    params = theta.clone().requires_grad_(True)
    (LAM * world.text_kl(params, other)).backward()
    assert torch.allclose(got, params.grad, atol=1e-5)
    assert float(params.grad.norm()) > 0.1
    if split == "prefix words":  # where the per-unit signal is not 0 for the equal peer
        assert float(opd_expected_gradient(world, theta, theta).norm()) > 0.02


def test_where_the_next_token_decides_a_words_end_an_equal_peer_is_not_zero_per_word():
    """The limit docs/regimes.md states: word for word the peer is the learner (the word-level KL and its gradient are
    0), yet the learner's unit ``" 1"`` (its token ``" 1"``: the words ``" 1"`` and ``" 12"``) and the peer's (the
    word ``" 1"`` alone) are different events; the word's end reaches both only in the next token."""
    theta, _ = two_policies(PREFIX_WORDS, 4)
    params = theta.clone().requires_grad_(True)
    PREFIX_WORDS.word_kl(params, theta, "learner").backward()
    assert float(params.grad.abs().max()) < 1e-12
    assert float(opd_expected_gradient(PREFIX_WORDS, theta, theta).norm()) > 0.02  # 0.042
    assert ftis_expected_divergence(PREFIX_WORDS, theta, theta) > 0.05  # 0.086
    # PRP's per-word weight of the first unit: E_gen[w] = Σ over the peer's first units of the learner's mass of the
    # matching unit, 1 + P(" 12") (the learner's " 1" holds " 12" too), where an unbiased weight gives 1
    own, peer = PREFIX_WORDS.token_logps(theta, "learner"), PREFIX_WORDS.token_logps(theta, "peer")
    mass = torch.softmax(theta, -1)  # [N] both sides' (the generator's) text distribution
    first_weight = 0.0
    for i in range(len(PREFIX_WORDS.texts)):
        values, groups = PREFIX_WORDS.aligned(i, peer[i])
        log_w = (own[i].detach() - values)[None]  # [1, m]
        weights = correction_weights(log_w, torch.ones_like(log_w), "tis", "token", math.inf, math.inf, groups[None])
        first_weight += float(mass[i]) * float(weights[0, 0])
    twelve = float(sum(mass[i] for i, text in enumerate(PREFIX_WORDS.texts) if text[0] == " 12"))
    assert first_weight == pytest.approx(1 + twelve, abs=1e-6) and twelve > 0.1  # 1.146
