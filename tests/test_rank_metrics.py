"""Regime metrics over several ranks (regimes/core/rank_metrics.py, training/trl_metrics.py): with each rank holding
part of a step's prompts, the logged row is the whole batch's, as with one rank, not rank 0's share of it.

The step is fixed (rewards, completions, peer records), so two gloo ranks holding two prompts each must record
what one rank holding all four records."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest
import torch

from gloo_ranks import run_on_two_ranks
from mutualrl.config import load_run_config
from mutualrl.padding import pad_token_rows
from mutualrl.regimes.core.importance import ratio_statistics
from mutualrl.regimes.core.rank_metrics import Quantile, Share, Total
from mutualrl.regimes.core.registry import get_regime
from mutualrl.regimes.core.trainer_interface import StepRollouts
from mutualrl.training.adapters import adapter_class
from mutualrl.training.trl_metrics import TRLMetrics, combine, parts
from test_regimes_seam import FakeRanks, FakeTrainer, padded

K = 2
PROMPTS = ("1+3=", "2+2=", "3+3=", "1+1=")
LEARNER_TEXTS = (" 2", " 7", " 5", " 9", " 6", " 1", " 3", " 4")
LEARNER_REWARDS = (0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)  # p0, p1, p3 failed K times; p2 half solved
PEER_TEXTS = (" 4", " 5", " 3", " 4 is it", " 6", " 6", " 8", " 9")
PEER_REWARDS = (1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0)  # the peer solved p0, p1, p2, not p3: SGT gates p0 and p1


class OneRank(FakeRanks):
    process_index = 0


class RankTrainer(TRLMetrics, FakeTrainer):
    """TrainerView's fake with the real ``record_metrics`` (TRL's metric lists, reduced over the ranks)."""

    def __init__(self, tokenizer, accelerator):
        super().__init__(tokenizer)
        self.accelerator = accelerator
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}


def peer_table() -> pa.Table:
    ids = [f"p{i}" for i in range(len(PROMPTS)) for _ in range(K)]
    return pa.table({"prompt_id": ids, "sample_index": [i % K for i in range(len(ids))],
                     "reward": list(PEER_REWARDS), "response_text": list(PEER_TEXTS), "finished": [True] * len(ids),
                     "num_tokens": [len(t.split()) for t in PEER_TEXTS]})


def rank_step(tokenizer, rank: int, ranks: int) -> tuple[dict, StepRollouts]:
    """TRL's batch and StepRollouts of the fixed step as rank ``rank`` of ``ranks`` holds it (its prompts' rows)."""
    rows = len(PROMPTS) * K
    local = range(rank * rows // ranks, (rank + 1) * rows // ranks)
    prompt_rows = [tokenizer(PROMPTS[i // K], add_special_tokens=False)["input_ids"] for i in local]
    completions = [tokenizer(LEARNER_TEXTS[i], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                   for i in local]
    every_completion = [tokenizer(t, add_special_tokens=False)["input_ids"] + [1] for t in LEARNER_TEXTS]
    width = max(len(r) for r in prompt_rows)
    pad = tokenizer.pad_token_id
    prompt_ids = torch.tensor([[pad] * (width - len(r)) + r for r in prompt_rows])  # [B_local, P]
    prompt_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in prompt_rows])  # [B_local, P]
    completion_ids, completion_mask = pad_token_rows(completions, pad)  # [B_local, C] each
    output = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": torch.zeros(len(local))}  # [B_local]
    ids = [f"p{i // K}" for i in range(rows)]
    rewards = torch.tensor(LEARNER_REWARDS, dtype=torch.float32)  # [B_global]
    rollouts = StepRollouts(
        step=0, num_generations=K, prompt_ids_local=[ids[i] for i in local], sample_index_local=[i % K for i in local],
        prompt_texts_local=[PROMPTS[i // K] for i in local], lengths_local=np.array([len(r) for r in completions]),
        rewards_local=rewards[local.start:local.stop], prompt_ids_global=ids,
        rewards_global=rewards, lengths_global=torch.tensor([float(len(r)) for r in every_completion]),
        process_index=rank, num_processes=ranks)
    return output, rollouts


def stepped_adapter(accelerator, tokenizer, regime: str, overrides: tuple[str, ...] = ()):
    """tiny-bpe's adapter of ``regime`` after the fixed step on this rank (logged, with SGT's loss terms), and its
    trainer."""
    config = load_run_config("tiny", regime=regime, overrides=list(overrides), check_grpo=False).config
    spec = get_regime(regime)
    adapter = adapter_class(spec)(config, "tiny-bpe", None, spec=spec)
    trainer = RankTrainer(tokenizer, accelerator)
    adapter.bind(trainer)
    output, rollouts = rank_step(tokenizer, accelerator.process_index, accelerator.num_processes)
    output, metrics = adapter.transform(output, rollouts, {"tiny-sp": peer_table()})
    adapter.log_step(metrics, {})
    adapter.extra_loss(trainer.model, output)
    return adapter, trainer


def logged_step(accelerator, tokenizer, regime: str, overrides: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """The metric lists a step of ``regime`` leaves in TRL's ``_metrics`` (with SGT's loss terms) on this rank."""
    _, trainer = stepped_adapter(accelerator, tokenizer, regime, overrides)
    return {key: list(values) for key, values in trainer._metrics["train"].items()}


REGIMES = {"sgt": (), "prp": ("regime.prp.denominator=learner",), "grpo-randpert": (), "xgrpo": ()}


def same(a: dict[str, list[float]], b: dict[str, list[float]]) -> bool:
    return a.keys() == b.keys() and all(
        len(a[k]) == len(b[k]) and all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-9, abs=1e-12)
                                       for x, y in zip(a[k], b[k], strict=True)) for k in a)


def rescue_counts(accelerator, tokenizer) -> dict[str, int]:
    """SGT's run-wide counts under ``max_rescues_per_prompt`` after the step on this rank: every rank's rescues (rank 0
    holds p0 and p1, both rescued; rank 1 neither), so that any rank may meet p0 next and rank 0 saves them all."""
    adapter, _ = stepped_adapter(accelerator, tokenizer, "sgt", ("regime.sgt.max_rescues_per_prompt=2",))
    return adapter.rescues.rescues_by_prompt


def two_rank_steps(accelerator, tokenizer):
    logged = {regime: logged_step(accelerator, tokenizer, regime, overrides) for regime, overrides in REGIMES.items()}
    return logged, rescue_counts(accelerator, tokenizer)


@pytest.mark.slow
def test_two_ranks_log_the_whole_batch_as_one_rank_does(thl_tokenizers):
    tokenizer = padded(thl_tokenizers["gpt2"])
    one = {regime: logged_step(OneRank(), tokenizer, regime, overrides) for regime, overrides in REGIMES.items()}
    assert one["sgt"]["sgt/gate_rate"] == [0.5] and one["sgt"]["sgt/gated_prompts"] == [2.0]
    assert one["prp"]["prp/peer_rows"] == [8.0]
    assert rescue_counts(OneRank(), tokenizer) == {"p0": 1, "p1": 1}
    both = run_on_two_ranks(two_rank_steps, tokenizer)
    for regime in REGIMES:
        for rank, (logged, _) in enumerate(both):
            assert same(logged[regime], one[regime]), (regime, rank, logged[regime], one[regime])
    assert [counts for _, counts in both] == [{"p0": 1, "p1": 1}] * 2


def test_combine_reduces_each_kind_as_trl_reduces_its_own():
    rank0 = parts({"rate": Share(1, 4), "count": Total(3), "loss": 0.5, "p50": Quantile([1.0, 2.0], 0.5),
                   "rare": 2.0, "empty": Share(0, 0)})
    rank1 = parts({"rate": Share(3, 4), "count": Total(1), "loss": float("nan"), "p50": Quantile([3.0, 4.0, 5.0], 0.5),
                   "empty": Share(0, 0)})
    got = combine([rank0, rank1])
    assert got["rate"] == 0.5 and isinstance(got["rate"], Share)
    assert got["count"] == 4.0
    assert got["loss"] == 0.5  # a rank without a number is left out, as TRL's nanmean
    assert got["p50"] == 3.0
    assert got["rare"] == 2.0  # recorded on one rank: reduced over that rank
    assert math.isnan(got["empty"])
    with pytest.raises(ValueError, match="'loss'"):
        combine([parts({"loss": 1.0}), parts({"loss": Total(1)})])


def test_prp_ratio_statistics_of_two_halves_combine_to_the_whole():
    generator = torch.Generator().manual_seed(3)
    ratios = torch.exp(torch.randn(8, 6, generator=generator))  # [B, T]
    mask = (torch.rand(8, 6, generator=generator) > 0.3).long()  # [B, T]
    ratios[2, 1] = float("nan")
    whole = ratio_statistics(ratios, mask)
    halves = combine([parts(ratio_statistics(ratios[:3], mask[:3])), parts(ratio_statistics(ratios[3:], mask[3:]))])
    assert halves.keys() == whole.keys()
    for key, value in whole.items():
        assert halves[key] == pytest.approx(value, rel=1e-12), key
    assert whole["token_ratio_p99"] != pytest.approx(ratio_statistics(ratios[:3], mask[:3])["token_ratio_p99"])
