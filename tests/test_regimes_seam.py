"""The typed seam trainer -> regime (regimes/core/trainer_interface.py): a fake that satisfies TrainerView runs a regime's whole
step (publish, read peers over a real SEE, transform, log, prune, SGT's loss), the declared hooks, and the one
peer-row helper (retokenize, EOS, truncate) against the per-regime code it replaced."""

from __future__ import annotations

import copy
import inspect
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import torch

from mutualrl.config import load_run_config
from mutualrl.padding import pad_token_rows
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.peer_responses import learner_responses, peer_rows
from mutualrl.regimes.prp.adapter import PRPAdapter
from mutualrl.regimes.core.registry import get_regime
from mutualrl.regimes.core.trainer_interface import GRPOBatch, StepRollouts, TrainerView
from mutualrl.regimes.sgt.adapter import SGTAdapter
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.thl import retokenize
from mutualrl.training.adapters import adapter_class

POLICIES = ("tiny-bpe", "tiny-sp")  # the tiny pool's names: GPT-2 BPE and Mistral SentencePiece
VOCAB = {"tiny-bpe": "gpt2", "tiny-sp": "mistral-sp"}


class FakeRanks:
    """One rank: the collectives are the identity."""

    is_main_process = True
    num_processes = 1
    device = torch.device("cpu")

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def gather(self, tensor):
        return tensor


class FakeTrainer:
    """Exactly TrainerView, nothing of TRL: log-probs are a constant -0.5 per token."""

    def __init__(self, tokenizer, max_completion_length=8):
        self.args = SimpleNamespace(seed=7, steps_per_generation=1, num_iterations=1, gradient_accumulation_steps=1,
                                    delta=None)
        self.state = SimpleNamespace(max_steps=3, global_step=0, log_history=[])
        self.accelerator = FakeRanks()
        self.model = torch.nn.Linear(1, 1)
        self.processing_class = tokenizer
        self.eos_token_ids = [tokenizer.eos_token_id]
        self.max_completion_length = max_completion_length
        self.current_gradient_accumulation_steps = 1
        self.scale_rewards = "group"
        self.epsilon_low = 0.2
        self.epsilon_high = 0.2
        self.loss_type = "grpo"
        self.importance_sampling_level = "token"
        self.beta = 0.0
        self.policy_logps = None
        self.recorded: dict[tuple[str, str], list[float]] = defaultdict(list)

    def record_metrics(self, values, mode="train"):
        for key, value in values.items():
            self.recorded[(mode, key)].append(float(value))

    def score_completions(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, batch_size=None):
        return torch.full(completion_ids.shape, -0.5, requires_grad=torch.is_grad_enabled())  # [B, C]

    def score_reference(self, prompt_ids, prompt_mask, completion_ids, completion_mask):
        return torch.zeros(completion_ids.shape)  # [B, C]

    def completion_logits(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask):
        """Uniform next-token logits ``[B, C, V]`` (every token equally likely)."""
        return torch.zeros((*completion_ids.shape, len(self.processing_class)))

    def aggregate_loss(self, per_token_loss, mask, inputs):
        """TRL's ``loss_type: grpo`` of one micro-batch: the mean over rows of each row's token mean."""
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


PROMPTS = ("1+3=", "2+2=")
K = 2


def step_of(tokenizer, texts, rewards):
    """TRL's batch and StepRollouts of one step: 2 prompts x K=2 rollouts ``texts`` with ``rewards``."""
    prompt_rows = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS for _ in range(K)]
    completion_rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(len(r) for r in prompt_rows)
    prompt_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in prompt_rows])  # [4, P]
    prompt_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in prompt_rows])  # [4, P]
    completion_ids, completion_mask = pad_token_rows(completion_rows, tokenizer.pad_token_id)  # [4, C]
    output = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": torch.zeros(len(texts))}
    ids = [f"p{i}" for i in range(len(PROMPTS)) for _ in range(K)]
    reward = torch.tensor(rewards, dtype=torch.float32)  # [4]
    rollouts = StepRollouts(
        step=0, num_generations=K, prompt_ids_local=ids, sample_index_local=[0, 1] * len(PROMPTS),
        prompt_texts_local=[p for p in PROMPTS for _ in range(K)],
        lengths_local=np.array([len(r) for r in completion_rows]), rewards_local=reward, prompt_ids_global=ids, rewards_global=reward,
        lengths_global=torch.tensor([float(len(r)) for r in completion_rows]), process_index=0, num_processes=1)
    return output, rollouts


def peer_then_learner(learner, peer, peer_texts, peer_rewards):
    """The peer publishes one step of ``peer_texts``, then the learner processes its own (rewards 0, 0, 1, 0): the
    batch it trains on."""
    peer_out, peer_step = step_of(peer.trainer.processing_class, peer_texts, peer_rewards)
    peer.publish_records(peer_out, peer_step, {})
    out, rollouts = step_of(learner.trainer.processing_class, [" 2", " 7", " 4", " 9"], [0.0, 0.0, 1.0, 0.0])
    return learner.process_step(out, rollouts)


def padded(tokenizer):
    """A copy with a pad token, as TRL's GRPOTrainer sets one (EOS) where the tokenizer has none."""
    tokenizer = copy.deepcopy(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def pool_of(tmp_path, tokenizers, regime, **settings):
    """One adapter per tiny policy, each bound to a FakeTrainer with its real tokenizer, over one real SEE."""
    overrides = [f"regime.{regime}.{key}={value}" for key, value in settings.items()]
    config = load_run_config("tiny", regime=regime, overrides=overrides, check_grpo=False).config
    spec = get_regime(regime)
    adapters = {}
    for name in POLICIES:
        exchange = ExperienceExchange(tmp_path, "run", name, policies=POLICIES, barrier_timeout_s=10.0,
                                      poll_interval_s=0.01)
        adapter = adapter_class(spec)(config, name, exchange, spec=spec)
        adapter.bind(FakeTrainer(padded(tokenizers[VOCAB[name]])))
        adapters[name] = adapter
    return adapters


def test_the_fake_satisfies_trainer_view(thl_tokenizers):
    assert isinstance(FakeTrainer(thl_tokenizers["gpt2"]), TrainerView)
    assert not isinstance(SimpleNamespace(), TrainerView)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_sgt_runs_a_whole_step_and_its_loss_through_a_fake_trainer(thl_tokenizers, tmp_path):
    adapters = pool_of(tmp_path, thl_tokenizers, "sgt")
    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    # The peer solved prompt p0 (sample 1) which the learner failed K times: SGT's gate fires on p0 only.
    out = peer_then_learner(learner, peer, [" 5", " 4", " 4", " 3"], [0.0, 1.0, 1.0, 0.0])

    tokenizer = learner.trainer.processing_class
    rescue = retokenize(tokenizer, [" 4"])[0].ids + [tokenizer.eos_token_id]  # the peer finished: EOS appended
    weights = out["sgt_weight"]  # [4]
    assert (weights > 0).tolist() == [True, False, False, False]  # max_pairs_per_prompt = 1 row of p0
    assert out["sgt_completion_ids"][0, : len(rescue)].tolist() == rescue
    assert out["sgt_completion_mask"][0].sum() == len(rescue) and out["sgt_completion_mask"][1:].sum() == 0
    recorded = learner.trainer.recorded
    assert recorded[("train", "sgt/rescues")] == [1.0] and ("train", "mutual/transform_s") in recorded
    assert ("train", "mutual/publish_s") in recorded and ("train", "mutual/wait_s") in recorded

    sgt = learner.spec
    assert set(out) <= GRPOBatch.__optional_keys__ | sgt.batch_keys  # every key SGT adds is declared, with its shape
    assert sgt.batch_keys and all(key.startswith("sgt_") for key in sgt.batch_keys)

    loss = learner.extra_loss(learner.trainer.model, out)
    assert loss is not None and loss.requires_grad and torch.isfinite(loss)
    assert recorded[("train", "sgt/nll_term")] == [pytest.approx(loss.item())]


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_prp_pools_the_peer_rows_through_a_fake_trainer(thl_tokenizers, tmp_path):
    adapters = pool_of(tmp_path, thl_tokenizers, "prp", denominator="peer")
    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    merged = peer_then_learner(learner, peer, [" 4", " 5", " 4", " 3"], [1.0, 0.0, 1.0, 0.0])
    assert merged["completion_ids"].shape[0] == 8  # 4 own rows, then the peer's 4
    tokenizer = learner.trainer.processing_class
    expected = [retokenize(tokenizer, [t])[0].ids + [tokenizer.eos_token_id] for t in (" 4", " 5", " 4", " 3")]
    got = [row[mask.bool()].tolist() for row, mask in zip(merged["completion_ids"][4:], merged["completion_mask"][4:])]
    assert got == expected
    assert learner.trainer.recorded[("train", "prp/peer_rows")] == [4.0]
    assert set(merged) <= GRPOBatch.__optional_keys__


BUILTIN = ("standalone", "xgrpo", "sgt", "prp", "grpo-randpert", "hacpo")


@pytest.mark.parametrize("regime", BUILTIN)
def test_every_adapter_types_the_batch_it_takes_and_gives_back(regime):
    """Failed before: the batch crossed the seam as dict[str, Any], and the regimes' overrides were unannotated."""
    cls = adapter_class(get_regime(regime))
    for hook, batch in (("process_step", "output"), ("transform", "output"), ("extra_loss", "inputs"),
                        ("token_weights", "inputs")):
        assert inspect.signature(getattr(cls, hook)).parameters[batch].annotation == "GRPOBatch", (regime, hook)
    assert inspect.signature(cls.transform).return_annotation == "tuple[GRPOBatch, dict[str, float]]"
    assert inspect.signature(cls.process_step).return_annotation == "GRPOBatch"


def test_stale_rounds_are_declared_by_the_regimes_that_implement_them():
    builtin = {name: adapter_class(get_regime(name)) for name in ("standalone", "xgrpo", "sgt", "prp", "grpo-randpert")}
    declared = {name for name, cls in builtin.items() if cls.uses_stale_rounds}
    overridden = {name for name, cls in builtin.items() if cls.transform_stale is not RegimeAdapter.transform_stale}
    assert declared == overridden == {"sgt"}
    assert SGTAdapter.uses_stale_rounds and not PRPAdapter.uses_stale_rounds


class OlderRound:
    """A consumption that always offers the round before this step (bounded staleness, age 1), read from
    ``exchange`` (one rank)."""

    lock_step = False
    active = ["tiny-sp"]
    accelerator = None

    def __init__(self, exchange):
        self.exchange = exchange

    def next_round(self, step):
        from mutualrl.see.lockstep import PeerRound

        return PeerRound(step, step - 1, 1)


class ReadLog:
    """An exchange that records the rounds read."""

    def __init__(self):
        self.reads = []

    def read(self, step, policy, columns=None):
        self.reads.append((step, policy))
        return pa.table({"reward": [1.0]})


@pytest.mark.parametrize("stale", [False, True])
def test_an_older_round_is_read_only_by_a_regime_that_declares_it(thl_tokenizers, stale):
    config = load_run_config("tiny", regime="xgrpo", check_grpo=False).config

    class Declared(RegimeAdapter):
        uses_stale_rounds = stale

        def transform_stale(self, output, rollouts, peers, peer_step):
            return output, {"stale_rows": float(sum(t.num_rows for t in peers.values()))}

    adapter = Declared(config, "tiny-bpe", spec=get_regime("xgrpo"))
    adapter.bind(FakeTrainer(thl_tokenizers["gpt2"]))
    adapter.consumption = OlderRound(ReadLog())
    peer_step, peers = adapter.read_peers({}, SimpleNamespace(step=3), {})
    assert adapter.consumption.exchange.reads == ([(2, "tiny-sp")] if stale else [])
    assert peer_step == (2 if stale else None)
    output, metrics = adapter.apply_regime({}, SimpleNamespace(step=3), peers, peer_step, {})
    assert metrics == ({"stale_rows": 1.0} if stale else {})
    assert adapter.trainer.recorded[("train", "mutual/stale_used")] == [float(stale)]


def test_no_regime_module_types_the_trainer_as_any_nor_writes_trl_metrics():
    from pathlib import Path

    import mutualrl.regimes

    for path in Path(mutualrl.regimes.__file__).parent.rglob("*.py"):
        text = path.read_text()
        assert "_metrics[" not in text and "trainer: Any" not in text and 'trainer: "Any"' not in text, path


# -- the one peer-row helper equals the SGT and PRP code it replaced ---------------------------------------

def old_sgt_rows(tokenizer, texts, finished, max_len):
    """SGT's _attach_rescues before the helper (verbatim loop)."""
    eos = tokenizer.eos_token_id
    sequences = []
    for r, done in zip(retokenize(tokenizer, texts), finished, strict=True):
        ids = list(r.ids)
        if done and eos is not None:
            ids.append(eos)
        sequences.append(ids[:max_len] if max_len else ids)
    return sequences


def old_prp_rows(tokenizer, texts, finished, max_len):
    """PRP's _retokenize before the helper (verbatim loop)."""
    eos = tokenizer.eos_token_id
    retok = retokenize(tokenizer, texts) if texts else []
    ids_out, spans_out = [], []
    for r, done in zip(retok, finished, strict=True):
        ids = list(r.ids)
        spans = np.asarray(r.spans, dtype=np.int64).reshape(-1, 2)
        if done and eos is not None:
            ids.append(eos)
        if max_len and len(ids) > max_len:
            ids = ids[:max_len]
        ids_out.append(ids)
        spans_out.append(spans[: min(len(spans), len(ids))])
    return ids_out, spans_out


TEXTS = [" 12", "The answer is 42.", "", " naïve café ∑ 你好", "7\n", " x" * 20]


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("vocab", ["gpt2", "mistral-sp", "qwen3", "llama3"])
@pytest.mark.parametrize("max_len", [None, 3, 64])
def test_learner_responses_equal_the_old_sgt_and_prp_code(thl_tokenizers, vocab, max_len):
    tokenizer = thl_tokenizers[vocab]
    one = pa.table({"response_text": TEXTS[:3], "finished": [True, False, True]})
    two = pa.table({"response_text": TEXTS[3:], "finished": [False, True, True]})
    sources = [("two", 2), ("one", 0), ("two", 0), ("one", 2), ("one", 1), ("two", 1), ("one", 0)]
    texts = [(one if name == "one" else two).column("response_text")[row].as_py() for name, row in sources]
    finished = [bool((one if name == "one" else two).column("finished")[row].as_py()) for name, row in sources]

    got = learner_responses({"one": one, "two": two}, sources, tokenizer, max_len)
    assert got.texts == texts and got.finished == finished
    assert got.ids == old_sgt_rows(tokenizer, texts, finished, max_len)
    ids, spans = old_prp_rows(tokenizer, texts, finished, max_len)
    assert got.ids == ids
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(got.spans, spans, strict=True))


def test_peer_rows_reads_text_column_wise_in_source_order(thl_tokenizers):
    one = pa.table({"response_text": ["a", "b"], "finished": [True, False]})
    two = pa.table({"response_text": ["c"], "finished": [False]})
    got = peer_rows({"one": one, "two": two}, [("two", 0), ("one", 1), ("one", 0)], ("response_text", "finished"))
    assert got == {"response_text": ["c", "b", "a"], "finished": [False, False, True]}
    empty = learner_responses({"one": one}, [], thl_tokenizers["gpt2"], 4)
    assert (empty.texts, empty.ids, empty.spans) == ([], [], [])
