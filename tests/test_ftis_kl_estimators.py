"""F-TIS's filter figure (``regime.prp.kl_estimator``) against the exact divergences it estimates.

Exact expectations, no sampling: a tiny autoregressive categorical model (a vocabulary of 3, answers of 3 tokens, 27
sequences) is enumerated, every sequence's estimate is weighted by its probability under the generator (the peer that
sampled it), and the sum is compared with the divergence computed from the two models' full distributions by a
separate loop over prefixes. Equalities hold to float64 rounding (1e-12).

Two pairs of models: tokens drawn independently of their prefix (the sequence's divergences are then the sum of the
per-token ones), and a Markov chain (each token's distribution depends on the one before), where the per-token sum of
``KL(π_θ ‖ π_gen)`` at the generator's prefixes and the sequence's ``KL(π_θ ‖ π_gen)`` differ.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from mutualrl.regimes.prp.maths import KL_ESTIMATORS, ftis_kept, sequence_kl

V, L = 3, 3
INDEPENDENT = ([0.7, 0.2, 0.1], [[0.7, 0.2, 0.1]] * 3), ([0.2, 0.5, 0.3], [[0.2, 0.5, 0.3]] * 3)
MARKOV = (([0.6, 0.3, 0.1], [[0.8, 0.1, 0.1], [0.2, 0.6, 0.2], [0.3, 0.3, 0.4]]),
          ([0.3, 0.4, 0.3], [[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]))


def conditional(model, prefix: tuple[int, ...]) -> list[float]:
    """A model's distribution of the next token after ``prefix``: (first token's, transition rows by the last)."""
    first, rows = model
    return first if not prefix else rows[prefix[-1]]


def enumerated(theta, gen) -> dict[str, float]:
    """``E_gen[estimator]`` of every setting, exactly: Σ over the 27 sequences of ``π_gen(y) · estimate(y)``."""
    sequences = list(itertools.product(range(V), repeat=L))
    learner = torch.tensor([[math.log(conditional(theta, y[:t])[y[t]]) for t in range(L)] for y in sequences],
                           dtype=torch.float64)  # [27, L]
    generator = torch.tensor([[math.log(conditional(gen, y[:t])[y[t]]) for t in range(L)] for y in sequences],
                             dtype=torch.float64)  # [27, L]
    p_gen = generator.sum(dim=1).exp()  # [27]
    mask = torch.ones(len(sequences), L, dtype=torch.long)  # [27, L]
    assert float(p_gen.sum()) == pytest.approx(1.0, abs=1e-12)
    return {name: float((p_gen * sequence_kl(learner, generator, mask, name)).sum()) for name in KL_ESTIMATORS}


def exact(theta, gen) -> dict[str, float]:
    """The divergences from the full distributions: the sequences' KL both ways, and Σ_t over the generator's
    prefixes of the per-token KL(θ ‖ gen), χ²(gen ‖ θ) = Σ gen²/θ − 1 and KL(gen ‖ θ)."""
    out = dict.fromkeys(("reverse_by_prefix", "chi2_by_prefix", "forward_by_prefix", "seq_reverse", "seq_forward"),
                        0.0)
    for t in range(L):
        for prefix in itertools.product(range(V), repeat=t):
            reach = math.prod(conditional(gen, prefix[:s])[prefix[s]] for s in range(t))
            a, b = conditional(theta, prefix), conditional(gen, prefix)
            out["reverse_by_prefix"] += reach * sum(x * math.log(x / y) for x, y in zip(a, b))
            out["chi2_by_prefix"] += reach * (sum(y * y / x for x, y in zip(a, b)) - 1.0)
            out["forward_by_prefix"] += reach * sum(y * math.log(y / x) for x, y in zip(a, b))
    for y in itertools.product(range(V), repeat=L):
        p_theta = math.prod(conditional(theta, y[:t])[y[t]] for t in range(L))
        p_gen = math.prod(conditional(gen, y[:t])[y[t]] for t in range(L))
        out["seq_reverse"] += p_theta * math.log(p_theta / p_gen)
        out["seq_forward"] += p_gen * math.log(p_gen / p_theta)
    return out


def test_on_independent_tokens_the_default_is_unbiased_for_the_sequences_kl_theta_gen():
    """θ = [.7, .2, .1], gen = [.2, .5, .3] per token, 3 tokens: KL(θ ‖ gen) of the sequences = 3 · 0.58381 =
    1.75144, and E_gen[rlogr-sum] = 1.75144; E_gen[k3-sum] = 3 · (χ²(gen ‖ θ) − KL(gen ‖ θ)) = 3 · (1.20714 −
    0.53718) = 2.00990, not that divergence; E_gen[mean-log-ratio] = KL(gen ‖ θ) / 3 = 1.61153 / 3 = 0.53718."""
    got, want = enumerated(*INDEPENDENT), exact(*INDEPENDENT)
    assert got["rlogr-sum"] == pytest.approx(want["seq_reverse"], abs=1e-12)
    assert got["rlogr-sum"] == pytest.approx(1.7514441081, abs=1e-9)
    assert got["k3-sum"] == pytest.approx(want["chi2_by_prefix"] - want["seq_forward"], abs=1e-12)
    assert got["k3-sum"] == pytest.approx(2.0098991949, abs=1e-9)
    assert got["mean-log-ratio"] == pytest.approx(want["seq_forward"] / L, abs=1e-12)
    assert abs(got["k3-sum"] - want["seq_reverse"]) > 0.25 and abs(got["mean-log-ratio"] - want["seq_reverse"]) > 1


def test_on_a_markov_chain_each_estimator_is_its_divergence_at_the_generators_prefixes():
    """Tokens that depend on the one before: E_gen[rlogr-sum] = Σ_t E_{prefix ~ gen} KL(θ ‖ gen) = 0.46346, which is
    F-TIS's KL(π_θ ‖ π_gen) per token on the generator's samples but not the sequences' KL(θ ‖ gen), 0.52597 (that
    needs the sequence ratio Π r_t, whose variance grows exponentially with length); E_gen[k3-sum] = Σ_t E χ²(gen ‖ θ)
    − KL(gen ‖ θ) = 1.13438 − 0.48594 = 0.64844; E_gen[Σ δ] is the sequences' KL(gen ‖ θ) exactly (0.48594, chain
    rule on the generator's own samples), mean-log-ratio that over 3."""
    got, want = enumerated(*MARKOV), exact(*MARKOV)
    assert got["rlogr-sum"] == pytest.approx(want["reverse_by_prefix"], abs=1e-12)
    assert got["rlogr-sum"] == pytest.approx(0.4634578545, abs=1e-9)
    assert want["seq_reverse"] == pytest.approx(0.5259682975, abs=1e-9)
    assert got["k3-sum"] == pytest.approx(want["chi2_by_prefix"] - want["forward_by_prefix"], abs=1e-12)
    assert want["forward_by_prefix"] == pytest.approx(want["seq_forward"], abs=1e-12)
    assert got["mean-log-ratio"] == pytest.approx(want["seq_forward"] / L, abs=1e-12)


def test_rlogr_sum_by_hand_and_what_it_keeps():
    """δ = log π_gen − log π_θ = [4.1, 0, 0, 0] (one token the learner finds e^4.1 times less likely): r = e^-4.1 =
    0.016573, r log r − r + 1 = 0.91548 (kept at g = 50 whatever A), where k3-sum gives e^4.1 − 5.1 = 55.240 (a sample
    with A <= 0 dropped). δ = [−5, −5, pad]: r = e^5, each term 5e^5 − e^5 + 1 = 594.65, 1189.3 (dropped where
    A <= 0); k3-sum 2(e^-5 + 4) = 8.0135 (kept)."""
    learner = torch.tensor([[-5.0, -1.0, -1.0, -1.0], [-1.0, -1.0, -9.0, 0.0]])  # [2, 4]
    generator = torch.tensor([[-0.9, -1.0, -1.0, -1.0], [-6.0, -6.0, 3.0, 0.0]])  # [2, 4]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])  # [2, 4]
    default = sequence_kl(learner, generator, mask)
    r = math.exp(-4.1)
    assert default.tolist() == pytest.approx([r * math.log(r) - r + 1, 2 * (4 * math.exp(5.0) + 1)], rel=1e-6)
    assert default.tolist() == pytest.approx([0.91548, 1189.3], abs=1e-1)
    k3 = sequence_kl(learner, generator, mask, "k3-sum")
    assert k3.tolist() == pytest.approx([math.exp(4.1) - 5.1, 2 * (math.exp(-5.0) + 4)], rel=1e-6)
    negative = torch.tensor([-1.0, -1.0])  # [2]
    assert ftis_kept(negative, default, 50.0).tolist() == [True, False]
    assert ftis_kept(negative, k3, 50.0).tolist() == [False, True]


def test_the_default_setting_is_rlogr_sum_and_the_recipe_uses_it():
    from mutualrl.config import load_run_config

    assert load_run_config("tiny", regime="prp", check_grpo=False).config.regime.prp.kl_estimator == "rlogr-sum"
    assert load_run_config("prp-ftis-2qwen").config.regime.prp.kl_estimator == "rlogr-sum"
