"""Mutual on-policy distillation (regimes/opd): the maths by its effect on a gradient, across two real tokenizers and
through a whole lock-step step of two policies over a real SEE, every figure computed by hand beside it.

- On a small vocabulary the per-token advantage is the single-sample estimate of the reverse KL's gradient: through
  TRL 1.16's own loss, ``d loss / d θ = λ Σ_t (log π_θ − log π_T)(y_t) ∇ log π_θ(y_t)`` for each sample, and the
  average over every sample (enumerated) is the exact gradient of ``Σ_t KL(π_θ,t ‖ π_T,t)``.
- Across GPT-2's BPE and Mistral's SentencePiece the signal of a text span is ``log π_T(span) − log π_θ(span)``
  (THL's conservation), and a peer's trace of text it did not generate is its true conditional log-probability (a
  tiny model's direct forward pass).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
import torch

from mutualrl.regimes.core.judgements import aligned_judgements, judge_rollouts
from mutualrl.regimes.opd.maths import (
    distillation_signal,
    opd_advantages,
    row_weights,
    success_rates,
    teacher_weights,
    teaching_peers,
)
from mutualrl.see.records import RolloutBatch
from test_regimes_seam import FakeTrainer, padded, pool_of, step_of

NAN = float("nan")


# -- the gate, by hand ------------------------------------------------------------------------------------------------
def test_success_rates_gate_and_teachers_by_hand():
    own = torch.tensor([[0.0, 0.0, 1.0, NAN], [1.0, 1.0, 1.0, 1.0], [NAN, NAN, NAN, NAN]])  # [P=3, K=4]
    assert success_rates(own, 0.8).tolist()[:2] == [pytest.approx(1 / 3), 1.0]  # NaN: not scored, left out
    assert np.isnan(success_rates(own, 0.8)[2].item())
    peers = torch.tensor([[[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]],  # p0: 0.5 and 0.75 > 1/3: both teach
                          [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]],  # p1: 1.0 is not above the learner's 1.0
                          [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]])  # p2: the learner unscored: no gate
    rates = success_rates(peers, 0.8)  # [P, M-1]
    teaching = teaching_peers(success_rates(own, 0.8), rates, "competence")
    assert teaching.tolist() == [[True, True], [False, False], [False, False]]
    assert teacher_weights(teaching, rates, "best").tolist() == [[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    assert teacher_weights(teaching, rates, "mean").tolist() == [[0.5, 0.5], [0.0, 0.0], [0.0, 0.0]]
    always = teaching_peers(success_rates(own, 0.8), rates, "always")
    assert always.all() and teacher_weights(always, rates, "best").tolist() == [[0, 1], [1, 0], [1, 0]]  # ties: first
    assert row_weights(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), 2).tolist() == [[1, 0], [1, 0], [0, 1], [0, 1]]


def test_the_signal_is_peer_minus_own_on_reached_tokens_only():
    own = torch.tensor([[-0.5, -1.0, -2.0, -9.0]])  # [B=1, T=4]; the last token is padding
    peer = torch.tensor([[[-1.5, -0.25, -7.0, float("-inf")], [-0.5, -3.0, -1.0, -1.0]]])  # [1, M-1=2, 4]
    valid = torch.tensor([[[True, True, False, False], [True, True, True, False]]])
    best = distillation_signal(own, peer, valid, torch.tensor([[1.0, 0.0]]))
    assert best.tolist() == [[-1.0, 0.75, 0.0, 0.0]]  # an unreached token gets an exact 0 (even under -inf)
    mean = distillation_signal(own, peer, valid, torch.tensor([[0.5, 0.5]]))
    assert mean.tolist() == [[-0.5, -0.625, 0.5, 0.0]]
    # signal: sequence, each reached token carries its peer's summed delta over the reached tokens: peer 0 -1.0 + 0.75,
    # peer 1 0.0 - 2.0 + 1.0
    whole = distillation_signal(own, peer, valid, torch.tensor([[0.5, 0.5]]), sequence=True)
    assert whole.tolist() == [[-0.625, -0.625, -0.5, 0.0]]
    mask = torch.tensor([[1, 1, 1, 0]])
    assert opd_advantages(torch.tensor([2.0]), best, mask, 0.1, True).tolist() == [[pytest.approx(1.9),
                                                                                       pytest.approx(2.075), 2.0, 0.0]]
    assert opd_advantages(torch.tensor([2.0]), best, mask, 0.1, False).tolist() == [[pytest.approx(-0.1),
                                                                                        pytest.approx(0.075), 0.0, 0.0]]


# -- the gradient: the reverse KL's single-sample estimate, through TRL's loss -----------------------------------------
V, T, LAM = 3, 2, 0.7
THETA = torch.tensor([[0.3, -0.2, 1.1], [-0.4, 0.9, 0.0]], dtype=torch.float64)  # the learner's logits per position
TEACHER = torch.log_softmax(torch.tensor([[1.0, 0.2, -0.5], [0.1, 0.1, 1.3]], dtype=torch.float64), -1)


def trl_loss_gradient(trainer, monkeypatch, sample: tuple[int, ...], theta: torch.Tensor) -> torch.Tensor:
    """``d loss / d θ`` of TRL's loss (``loss_type: grpo``, one row) on ``sample`` with OPD's advantages: the
    forward's log-probs are ``log softmax(θ)`` at the sample's tokens (a position-wise policy over V tokens)."""
    from trl import GRPOTrainer

    theta = theta.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1)  # [T, V]
    tokens = torch.tensor(sample)
    own = logp[torch.arange(T), tokens][None].float()  # [1, T] with its graph

    def forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        return own, torch.zeros_like(own), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    peer = TEACHER[torch.arange(T), tokens][None, None].float()  # [1, 1, T]
    signal = distillation_signal(own.detach(), peer, torch.ones(1, 1, T, dtype=torch.bool), torch.ones(1, 1))
    mask = torch.ones(1, T, dtype=torch.long)
    batch = {"prompt_ids": torch.full((1, 2), 5), "prompt_mask": torch.ones(1, 2, dtype=torch.long),
             "completion_ids": tokens[None], "completion_mask": mask, "num_items_in_batch": torch.tensor(T),
             "advantages": opd_advantages(torch.zeros(1), signal, mask, LAM, reward_term=False)}  # [1, T]
    trainer.compute_loss(trainer.model, batch).backward()
    return theta.grad * T  # TRL's grpo loss is the token mean: times T, the sum over tokens


@pytest.mark.slow  # builds a tiny trainer: over 2 s
def test_per_token_advantage_is_the_reverse_kl_gradient_estimate_on_a_small_vocabulary(grad_trainer, monkeypatch):
    p = torch.softmax(THETA, -1)  # [T, V]
    expected = torch.zeros(T, V, dtype=torch.float64)
    for sample in itertools.product(range(V), repeat=T):
        got = trl_loss_gradient(grad_trainer, monkeypatch, sample, THETA).double()
        # by hand: λ Σ_t (log p − log q)(y_t) (e_{y_t} − p_t), the score function of a softmax
        hand = torch.zeros(T, V, dtype=torch.float64)
        for t, y in enumerate(sample):
            hand[t] = LAM * (torch.log(p[t, y]) - TEACHER[t, y]) * (torch.nn.functional.one_hot(torch.tensor(y), V) - p[t])
        assert torch.allclose(got, hand, atol=1e-5), sample
        expected += torch.prod(p[torch.arange(T), torch.tensor(sample)]) * got
    # the expectation over every sample: the exact gradient of λ Σ_t KL(p_t ‖ q_t) = λ p (log p − log q − KL)
    kl = (p * (torch.log(p) - TEACHER)).sum(-1, keepdim=True)  # [T, 1]
    exact = LAM * p * (torch.log(p) - TEACHER - kl)
    assert torch.allclose(expected, exact, atol=1e-5)
    assert exact.abs().max() > 0.05  # a real gradient, not a vanishing one
    # and a descent step on the estimate lowers the reverse KL
    stepped = torch.softmax(THETA - 0.5 * exact / LAM, -1)
    assert (stepped * (torch.log(stepped) - TEACHER)).sum() < kl.sum()


@pytest.fixture(scope="module")
def grad_trainer(tmp_path_factory):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from mutualrl.assets.tokenizers import load_tokenizer
    from mutualrl.config import load_run_config
    from mutualrl.regimes.core.adapter import RegimeAdapter
    from mutualrl.training.trainer import MutualGRPOTrainer
    from tiny_models import build_tiny_lm

    folder = tmp_path_factory.mktemp("opd")
    args = GRPOConfig(output_dir=str(folder / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=4, max_steps=1, report_to=[], save_strategy="no",
                      disable_tqdm=True, seed=7, loss_type="grpo", beta=0.0)
    config = load_run_config("tiny", regime="standalone", check_grpo=False).config
    rows = [{"prompt": "1+1=", "answer": "2", "prompt_id": "p", "task": "t"}] * 4
    built = MutualGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(build_tiny_lm("mistral-sp", folder / "m")),
                              reward_funcs=lambda **_: [0.0], args=args, train_dataset=Dataset.from_list(rows),
                              processing_class=load_tokenizer("mistral-sp"), policy_name="tiny-sp",
                              regime=RegimeAdapter(config, "tiny-sp", exchange=None))
    built.current_gradient_accumulation_steps = 1
    return built


# -- across two real tokenizers ----------------------------------------------------------------------------------------
TEXT = " 12 - 5 = 7"  # GPT-2: " 12", " -", " 5", " =", " 7" (+ EOS); Mistral SP: ▁ 1 2 | ▁- | ▁ 5 | ▁= | ▁ 7 (+ EOS)


def own_table(tokenizer, texts, finished=True, trace=False):
    """The learner's own published records of ``texts`` (one prompt, K = len(texts)), with spans, as publication builds
    them (THL's decode)."""
    from mutualrl.thl import batch_decode_with_spans

    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if finished else [])
           for t in texts]
    decoded = batch_decode_with_spans(tokenizer, ids)
    return RolloutBatch(prompt_id=["p0"] * len(texts), sample_index=list(range(len(texts))),
                        prompt_text=["q"] * len(texts), response_text=[d.text for d in decoded], response_token_ids=ids,
                        response_token_spans=[d.spans for d in decoded], reward=np.zeros(len(texts), np.float32),
                        finished=[finished] * len(texts),
                        behaviour_logps=[[-1.0] * len(row) for row in ids] if trace else None).to_table(), ids


def rollouts_of(n, k):
    from mutualrl.regimes.core.trainer_interface import StepRollouts

    ids = [f"p{i // k}" for i in range(n)]
    return StepRollouts(step=0, num_generations=k, prompt_ids_local=ids, sample_index_local=[i % k for i in range(n)],
                        prompt_texts_local=["q"] * n, lengths_local=np.zeros(n, np.int64),
                        rewards_local=torch.zeros(n), prompt_ids_global=ids, rewards_global=torch.zeros(n),
                        lengths_global=torch.zeros(n), process_index=0, num_processes=1)


class ScoringTrainer(FakeTrainer):
    """A judge whose log-prob of its i-th token is ``-(i + 1)`` (EOS included): hand-computable traces."""

    def score_completions(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, batch_size=None):
        return -torch.arange(1, completion_ids.shape[1] + 1, dtype=torch.float32).expand(completion_ids.shape).clone()


@pytest.mark.slow  # THL's first decode and retokenization of two vocabularies: over 2 s
def test_the_signal_of_a_span_is_its_log_prob_under_both_across_two_real_tokenizers(thl_tokenizers):
    """Judge Mistral SP scores the GPT-2 learner's text: its trace, moved onto the learner's tokens, conserves each
    word's log-probability, so each span's signal is log π_T(span) − log π_θ(span), by hand."""
    learner, judge = padded(thl_tokenizers["gpt2"]), padded(thl_tokenizers["mistral-sp"])
    own, _ = own_table(learner, [TEXT])
    output = {"prompt_ids": torch.tensor([[5, 6]]), "prompt_mask": torch.ones(1, 2, dtype=torch.long)}
    judged = judge_rollouts(ScoringTrainer(judge), output, rollouts_of(1, 1), {"tiny-bpe": own}, ["tiny-bpe"])
    table = judged.records["tiny-bpe"].to_table()
    from mutualrl.thl import retokenize

    ids = table.column("response_token_ids").to_pylist()[0]
    assert ids == retokenize(judge, [TEXT])[0].ids + [judge.eos_token_id] and len(ids) == 10  # 9 pieces + EOS
    assert table.column("behaviour_logps").to_pylist()[0] == pytest.approx([-1.0 * i for i in range(1, 11)])
    aligned = aligned_judgements(own, {"tiny-sp": table}, ["tiny-sp"], rollouts_of(1, 1), 6)
    # the judge's tokens per word: " 12" 3 (-1 -2 -3), " -" 1 (-4), " 5" 2 (-5 -6), " =" 1 (-7), " 7" 2 (-8 -9);
    # EOS -10 onto the learner's EOS
    assert aligned.values[0, 0].tolist() == [-6.0, -4.0, -11.0, -7.0, -17.0, -10.0]
    assert aligned.valid.all() and aligned.matched.all()
    own_logps = torch.tensor([[-0.5, -1.0, -1.5, -2.0, -2.5, -3.0]])  # the learner's, one per own token
    signal = distillation_signal(own_logps, aligned.values, aligned.valid, torch.ones(1, 1))
    assert signal.tolist() == [[-5.5, -3.0, -9.5, -5.0, -14.5, -7.0]]
    assert signal.sum().item() == pytest.approx(-55.0 - (-10.5))  # the whole text: log π_T − log π_θ


@pytest.mark.slow  # THL's first decode of a vocabulary: over 2 s
def test_a_judgement_of_other_text_is_not_used():
    from mutualrl.assets.tokenizers import load_tokenizer

    learner = padded(load_tokenizer("gpt2"))
    own, _ = own_table(learner, [TEXT, " 3"])
    other, _ = own_table(learner, [TEXT, " 4"], trace=True)  # the second judgement is of another text under the same keys
    aligned = aligned_judgements(own, {"j": other}, ["j"], rollouts_of(2, 2), 6)
    assert aligned.matched.tolist() == [[True], [False]] and not aligned.valid[1].any()


@pytest.mark.slow  # builds a tiny trainer: over 2 s
def test_a_peer_trace_of_text_it_did_not_generate_is_its_true_conditional_log_prob(grad_trainer, thl_tokenizers):
    """The judge (a tiny Mistral-SP model, through the trainer's own scoring) on the GPT-2 learner's text: its
    published trace is log_softmax of its direct forward pass over its prompt + its tokens of the text."""
    judge = grad_trainer
    tokenizer = judge.processing_class
    own, _ = own_table(padded(thl_tokenizers["gpt2"]), [TEXT, " 40 + 2 = 42"])
    prompt = tokenizer("What is 12 - 5?", add_special_tokens=False)["input_ids"]
    output = {"prompt_ids": torch.tensor([prompt, prompt]), "prompt_mask": torch.ones(2, len(prompt), dtype=torch.long)}
    table = judge_rollouts(judge, output, rollouts_of(2, 2), {"tiny-bpe": own}, ["tiny-bpe"]).records["tiny-bpe"]
    table = table.to_table()
    model = judge.model.eval()
    for row in range(2):
        ids = table.column("response_token_ids").to_pylist()[row]
        assert tokenizer.decode(ids, skip_special_tokens=True).strip() == own.column("response_text")[row].as_py().strip()
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0].double()  # [P + n, V]
        direct = torch.log_softmax(logits, -1)[len(prompt) - 1: -1].gather(1, torch.tensor(ids)[:, None])[:, 0]
        assert table.column("behaviour_logps").to_pylist()[row] == pytest.approx(direct.tolist(), abs=1e-5)


# -- a whole lock-step step of two policies over a real SEE --------------------------------------------------------
def both_steps(adapters, batches):
    """Each policy's ``process_step`` at once (lock-step: each waits for the other's round and judgements)."""
    results, errors = {}, []

    def run(name):
        try:
            results[name] = adapters[name].process_step(*batches[name])
        except BaseException as err:  # pragma: no cover - shown by the assert below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(name,)) for name in adapters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


@pytest.mark.slow  # two policies' THL set-up and a real SEE round trip: over 2 s
@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_a_lock_step_step_judges_the_peer_and_adds_its_signal_where_it_is_the_more_competent(thl_tokenizers,
                                                                                             tmp_path, lam):
    adapters = pool_of(tmp_path, thl_tokenizers, "opd", lam=lam)
    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    # prompt p0: the learner fails all, the peer solves one of two: the peer teaches; p1: the learner solves one,
    # the peer none: no teacher
    learner_batch = step_of(learner.trainer.processing_class, [" 2", " 7", " 4", " 9"], [0.0, 0.0, 1.0, 0.0])
    peer_batch = step_of(peer.trainer.processing_class, [" 4", " 5", " 3", " 3"], [1.0, 0.0, 0.0, 0.0])
    learner_batch[0]["advantages"] = torch.tensor([0.25, -0.25, 0.75, -0.75])
    out = both_steps(adapters, {"tiny-bpe": learner_batch, "tiny-sp": peer_batch})
    advantages = out["tiny-bpe"]["advantages"]
    recorded = learner.trainer.recorded
    assert recorded[("train", "opd/gate_rate")] == [0.5] and recorded[("train", "opd/judged_share")] == [1.0]
    assert recorded[("train", "opd/judged_rows")] == [4.0] and ("train", "mutual/judge_s") in recorded
    # the rows the peer's judgement changed (the summary's and the report's used share): p0's two of four at λ > 0
    assert recorded[("train", "opd/from/tiny-sp/used_share")] == [0.0 if lam == 0 else 0.5]
    if lam == 0:
        assert advantages.tolist() == [0.25, -0.25, 0.75, -0.75]  # TRL's own [B] advantages, untouched
        return
    # Every log-prob is the fake's -0.5 per token. " 2": GPT-2 one token, Mistral SP two (▁, 2): the judge's -1.0
    # on it; EOS on EOS: -0.5 both. δ = [-0.5, 0] on p0's rows (the learner's completions are [digit, EOS]), times
    # the row factor that makes TRL's reduction a constant one (grpo: |y| / L = 2 / max_completion_length).
    trainer = learner.trainer
    assert trainer.loss_type == "grpo"
    s = 2 / trainer.max_completion_length
    assert advantages.tolist() == [[pytest.approx(0.25 - lam * 0.5 * s), 0.25],
                                   [pytest.approx(-0.25 - lam * 0.5 * s), -0.25], [0.75, 0.75], [-0.75, -0.75]]
    assert recorded[("train", "opd/reverse_kl")] == [pytest.approx(0.25)]  # (0.5 + 0) / 2 per token
    assert recorded[("train", "opd/teacher_logp")] == [pytest.approx(-0.75)]
    # and the other way round: the learner teaches the peer p1 (it solved one of two, the peer none)
    assert peer.trainer.recorded[("train", "opd/gate_rate")] == [0.5]
    # `see inspect` shows the judgements: each policy's 4 rollouts judged by the other, at the fake's -0.5 per token
    from mutualrl.ops.exchange_inspect import inspect_exchange

    report = inspect_exchange(tmp_path)
    assert report.ok and [(e["learner"], e["judge"], e["steps"], e["records"]) for e in report.judgements] == [
        ("tiny-bpe", "tiny-sp", 1, 4), ("tiny-sp", "tiny-bpe", 1, 4)]
    assert all(e["tokens"] > 0 and e["judge_logp_mean"] == pytest.approx(-0.5) for e in report.judgements)
    assert any(f.path.startswith("_judgements/tiny-bpe/step-000000/tiny-sp/") for f in report.files)


# -- the judgements' exchange: the SEE's rules --------------------------------------------------------------------
def test_a_judge_that_failed_ends_the_wait_for_its_judgements_at_once(tmp_path):
    import time

    from mutualrl.regimes.core.judgements import JudgementChannel
    from mutualrl.see import PeerFailedError
    from mutualrl.see.exchange import ExperienceExchange

    learner, judge = (ExperienceExchange(tmp_path, "run", name, policies=["a", "b"], barrier_timeout_s=30.0,
                                         poll_interval_s=0.01) for name in ("a", "b"))
    judge.mark_policy_failed("out of memory", step=0)  # its marker is in the main exchange
    started = time.monotonic()
    with pytest.raises(PeerFailedError, match="policy 'b'.*out of memory"):
        JudgementChannel(learner, ["b"]).read(0, ["b"])
    assert time.monotonic() - started < 5


def test_a_resumed_run_rolls_the_judgements_back_with_the_exchange(tmp_path):
    from mutualrl.launch.rundir.resume import EXCHANGE_ENTRY_RE
    from mutualrl.ops.exchange_rollback import rollback_exchange
    from mutualrl.see.files import JUDGEMENTS_DIR, judgements_root, step_dir

    for root in (tmp_path, judgements_root(tmp_path, "a"), judgements_root(tmp_path, "b")):
        for step in (1, 2, 3):
            (step_dir(root, step) / "x").mkdir(parents=True)
    assert rollback_exchange(tmp_path, 2) == 2  # the exchange's own step folders 2 and 3
    for root in (tmp_path, judgements_root(tmp_path, "a"), judgements_root(tmp_path, "b")):
        assert sorted(p.name for p in root.iterdir() if p.name.startswith("step-")) == ["step-000001"]
    assert EXCHANGE_ENTRY_RE.match(JUDGEMENTS_DIR)  # an exchange in a see.dir outside the run: cleared with it


@pytest.mark.parametrize("setting", ["see.max_staleness=1", "see.on_peer_failure=continue",
                                     "see.replay_consumption={tmp}"])
def test_off_lock_step_is_refused_when_the_recipe_is_read(setting, tmp_path):
    """OPD's spec says lock-step only; each see field declares its lock-step value: the recipe is refused naming the
    field (a --dry-run, before any model loads), in one line."""
    from mutualrl.config import ConfigError, load_run_config

    setting = setting.format(tmp=tmp_path)
    with pytest.raises(ConfigError) as refused:
        load_run_config("tiny", regime="opd", overrides=[setting], check_grpo=False)
    message = str(refused.value)
    assert setting.split("=")[0] + ":" in message and "lock-step only" in message and "\n" not in message
    assert load_run_config("tiny", regime="sgt", overrides=[setting], check_grpo=False).config.regime.name == "sgt"


def test_off_lock_step_is_refused_by_the_adapter_too(tmp_path):
    """A config built around the recipe's check (the Python API with a changed dataclass) meets the same rule where
    the regime binds: derived from the spec, not from OPD's adapter."""
    from mutualrl.assets.tokenizers import load_tokenizer
    from mutualrl.config import load_run_config
    from mutualrl.errors import UsageError
    from mutualrl.regimes.opd.adapter import OPDAdapter
    from mutualrl.see.exchange import ExperienceExchange

    config = load_run_config("tiny", regime="opd", check_grpo=False).config
    config = replace(config, see=replace(config.see, max_staleness=1))
    exchange = ExperienceExchange(tmp_path, "run", "tiny-bpe", policies=["tiny-bpe", "tiny-sp"])
    with pytest.raises(UsageError, match="lock-step only"):
        OPDAdapter(config, "tiny-bpe", exchange).bind(FakeTrainer(padded(load_tokenizer("gpt2"))))
