"""K samples per prompt from one prefill (benchmarks/survey_sampling.py) and the survey's pool arithmetic."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from mutualrl.pools.greedy import generate_greedy
from tiny_models import build_tiny_lm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from survey_sampling import mixed_groups, pass_at_k, sample_completions  # noqa: E402 - the survey's helper


@pytest.fixture(scope="module")
def model_and_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_lm("gpt2", tmp_path_factory.mktemp("lm"), seed=3)
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_cold_sampling_equals_greedy_on_left_padded_batches(model_and_tokenizer) -> None:
    model, tok = model_and_tokenizer
    prompts = [tok(t)["input_ids"] for t in ("1+2+3=", "a much longer prompt than the others, 9+9=", "7-")]
    greedy = generate_greedy(model, tok, prompts, max_new_tokens=6, batch_size=3)
    cold = sample_completions(model, tok, prompts, k=3, temperature=1e-4, max_new_tokens=6, batch_size=3, seed=0)
    assert [group for group in cold] == [[g] * 3 for g in greedy]
    both = sample_completions(model, tok, prompts, k=2, temperature=1.0, max_new_tokens=6, batch_size=2, seed=0,
                              with_greedy=True)
    assert [group[0] for group in both] == greedy and all(len(group) == 3 for group in both)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_samples_are_seeded_varied_and_leave_the_global_rng_alone(model_and_tokenizer) -> None:
    model, tok = model_and_tokenizer
    prompts = [tok("3+4=")["input_ids"], tok("a b c")["input_ids"]]
    state = torch.random.get_rng_state()
    a = sample_completions(model, tok, prompts, k=8, temperature=2.0, max_new_tokens=5, batch_size=2, seed=7)
    assert torch.equal(state, torch.random.get_rng_state())
    b = sample_completions(model, tok, prompts, k=8, temperature=2.0, max_new_tokens=5, batch_size=2, seed=7)
    c = sample_completions(model, tok, prompts, k=8, temperature=2.0, max_new_tokens=5, batch_size=2, seed=8)
    assert [len(g) for g in a] == [8, 8]
    assert len(set(a[0])) > 1  # a random tiny model at T=2 does not repeat itself 8 times
    assert a == b and a != c


def test_pass_at_k_and_mixed_groups_by_hand() -> None:
    scores = [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0]]
    assert pass_at_k(scores) == 3 / 4
    assert mixed_groups(scores) == 2 / 4
    assert pass_at_k([]) == 0.0


def test_survey_pool_numbers_by_hand() -> None:
    from real_pool_survey import pool_numbers

    per_a = {"p1": {"greedy": 1, "samples": [1, 1, 0, 1]}, "p2": {"greedy": 0, "samples": [0, 0, 0, 0]},
             "p3": {"greedy": 0, "samples": [0, 0, 0, 0]}, "p4": {"greedy": 1, "samples": [0, 1, 0, 0]}}
    per_b = {"p1": {"greedy": 0, "samples": [0, 0, 0, 0]}, "p2": {"greedy": 1, "samples": [0, 1, 0, 0]},
             "p3": {"greedy": 0, "samples": [0, 0, 0, 0]}, "p4": {"greedy": 1, "samples": [1, 1, 1, 1]}}
    models = {"a": {"tasks": {"t": {"per_prompt": per_a}}}, "b": {"tasks": {"t": {"per_prompt": per_b}}}}
    out = pool_numbers(models, "t")
    assert out["n"] == 4 and out["mean_single"] == 4 / 8
    assert out["any"] == 3 / 4 and out["exactly_one"] == 2 / 4
    # a fails p2, p3; b solves p2 greedily -> 1/2. b fails p1, p3; a solves p1 -> 1/2.
    assert out["pairs"]["a<-b"]["peer_solves_given_learner_fails"] == 0.5
    assert out["pairs"]["b<-a"]["peer_solves_given_learner_fails"] == 0.5
    # Gate: learner's K all fail and the peer has a success. a<-b: p2 only. b<-a: p1 only (p4: b succeeds).
    assert out["pairs"]["a<-b"]["sgt_gate_rate"] == 1 / 4
    assert out["pairs"]["b<-a"]["sgt_gate_rate"] == 1 / 4
