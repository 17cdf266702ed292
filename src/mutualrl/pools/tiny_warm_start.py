"""Warm start of the tiny pool's models: config, data, the two-phase recipe, greedy checks.

Each tiny model learns *both* synthetic-arith families first (phase 1, true answers), then
a short phase 2 teaches it a habit on the families other than its strong one: it answers
them with a non-answer (``?``). The skill is still in the weights, but the model no longer
emits it: greedy and sampled accuracy on its weak family are ~0, so on those prompts all K
of its own rollouts fail and GRPO alone gets no signal (zero advantage), while a peer's
verified success is a demonstration that needs only a small change to take. This is the
situation SGT is for (paper Sec. "Regime 3": the learner's whole group fails, a peer
succeeds); docs/pools.md records why a weak skill learnt from scratch was out of a CPU
run's reach (measured) and what this design measures.

The loss is a sampled softmax (the task's tokens plus random negatives with the usual
log-correction): the 50k/32k vocabularies dwarf the models and a full softmax made a step
~20x dearer. Everything is seeded and single-threaded, so a build is reproducible; it runs under
:data:`BUILD_ENV` so that it is the same on every x86-64 CPU (:mod:`mutualrl.pools.tiny` starts the build).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.errors import AssetError
from mutualrl.padding import pad_token_rows
from mutualrl.pools.greedy import generate_greedy

#: Bump when the warm-start *code* changes in a way that changes the models.
WARM_START_VERSION = 2
WARM_START_FILE = "warm_start.json"
#: The environment a build runs in: kernels that do not depend on the CPU. Built with the CPU's own kernels, the same
#: recipe gave another model under torch's AVX2 kernels than under its AVX-512 ones, and MKL's matrix products depend
#: on the CPU too (benchmarks/tiny_determinism.py). ATen's ``default`` kernels are its baseline x86-64 code, MKL's
#: ``COMPATIBLE`` branch gives the same results on any x86 CPU (MKL's conditional numerical reproducibility), and one
#: thread fixes the order of every sum. torch reads these at its first operation, so a build needs a fresh process.
BUILD_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1",
             "MKL_NUM_THREADS": "1"}

ProgressFn = Callable[[int, int, float], None]  # (step, total_steps, loss)


@dataclass(frozen=True)
class TinyModelSpec:
    """How one tiny model is built and warm-started (every field enters the cache hash)."""

    name: str
    tokenizer: str  # a named offline tokenizer (mutualrl.assets.tokenizers)
    architecture: str  # "gpt2" | "llama"
    strong_family: str  # synthetic-arith family it keeps; the others become its blind spot
    other_family_share: float = 0.5  # phase 1: share of examples from the other families (true answers)
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2  # head_dim 32: vLLM's CPU attention needs head_dim >= 32 (was 4 heads, head_dim 16)
    max_positions: int = 256
    steps: int = 1600  # phase 1: learn every family (1600 since 2 heads: with 800 tiny-sp learnt `add` to 0.77)
    blind_spot_steps: int = 60  # phase 2: the other families answered with `blind_spot_answer`
    blind_spot_share: float = 0.5  # phase 2: share of blind-spot examples (the rest: strong family, true answers)
    blind_spot_learning_rate: float = 5e-4  # phase 2: constant learning rate
    blind_spot_answer: str = "?"  # the habit: a non-answer the verifier scores 0
    batch_size: int = 128
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 30
    final_lr_fraction: float = 0.3  # the schedule decays linearly to this share of the peak, not to 0
    sampled_negatives: int = 2048
    seed: int = 0
    description: str = ""

    def total_steps(self) -> int:
        return self.steps + self.blind_spot_steps

    def recipe_hash(self) -> str:
        """A short digest of the recipe (what the model is meant to be; :func:`build_key` adds what builds it)."""
        from mutualrl.tasks import synthetic

        payload = {
            "spec": dataclasses.asdict(self),
            "version": WARM_START_VERSION,
            "task": {
                "split_seed": synthetic.SPLIT_SEED,
                "test_fraction": synthetic.TEST_FRACTION,
                "templates": {n: f.template for n, f in synthetic.FAMILIES.items()},
            },
        }
        payload["spec"].pop("description")
        blob = json.dumps(payload, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:10]


def build_versions() -> dict[str, str]:
    """The versions of the libraries that determine the built bytes (read from their metadata; nothing is
    imported): part of the cache key, and what the recorded digests hold for (:mod:`mutualrl.pools.tiny_digests`)."""
    import importlib.metadata

    return {d: importlib.metadata.version(d) for d in ("torch", "transformers")}


def build_key(spec: TinyModelSpec) -> str:
    """A short digest of everything that determines the built bytes: the recipe, the build environment and
    :func:`build_versions`."""
    blob = json.dumps({"recipe": spec.recipe_hash(), "env": BUILD_ENV, "versions": build_versions()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def weights_digest(folder: Path) -> str:
    """sha256 of a built model's weights file."""
    from mutualrl.config.recorded_code import file_hash

    return file_hash(folder / "model.safetensors")


def make_config(spec: TinyModelSpec, tokenizer: Any) -> Any:
    """A transformers config for ``spec`` sized to the tokenizer's vocabulary (tied embeddings)."""
    from transformers import GPT2Config, LlamaConfig

    common = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": True,  # the embedding matrix is most of the model
    }
    if spec.architecture == "gpt2":
        return GPT2Config(
            n_embd=spec.hidden_size, n_layer=spec.num_layers, n_head=spec.num_heads,
            n_positions=spec.max_positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common,
        )
    if spec.architecture == "llama":
        return LlamaConfig(
            hidden_size=spec.hidden_size, intermediate_size=2 * spec.hidden_size,
            num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
            num_key_value_heads=spec.num_heads, max_position_embeddings=spec.max_positions, **common,
        )
    raise ValueError(f"unknown tiny architecture {spec.architecture!r}")


def prepare_tokenizer(name: str) -> Any:
    """A private copy of a named tokenizer with a pad token (EOS, as TRL would set it)."""
    import copy

    from mutualrl.assets.tokenizers import load_tokenizer

    tokenizer = copy.deepcopy(load_tokenizer(name))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encode_example(tokenizer: Any, prompt: str, answer: str) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids + EOS): the prompt exactly as TRL and validation tokenize it."""
    prompt_ids = list(tokenizer(prompt)["input_ids"])
    full = list(tokenizer(prompt + answer)["input_ids"])
    if full[: len(prompt_ids)] != prompt_ids:
        raise AssetError(f"tokenizer {tokenizer.name_or_path}: {prompt!r} tokenizes differently inside {prompt + answer!r}")
    return prompt_ids, full[len(prompt_ids):] + [tokenizer.eos_token_id]


def _body(model: Any) -> Any:
    return model.transformer if hasattr(model, "transformer") else model.model


def _collate(items: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[Any, Any, Any]:
    """(ids, mask, labels) of prompt + completion rows, right-padded; labels -100 except on completion tokens."""
    ids, mask = pad_token_rows([p + c for p, c in items], pad_id)
    labels, _ = pad_token_rows([[-100] * len(p) + c for p, c in items], -100)
    return ids, mask, labels


def sampled_softmax_loss(model: Any, batch: tuple[Any, Any, Any], candidates: Any, others: Any, negatives: int,
                         generator: Any) -> Any:
    """Next-token NLL on completion tokens, with the softmax over ``candidates`` + sampled ``others``.

    The sampled negatives' logits get the usual log-correction (each stands for
    ``len(others) / n_sampled`` tokens), so the loss estimates the full-vocabulary softmax
    and training pushes the untouched vocabulary down as a full softmax would.
    """
    import math

    import torch
    import torch.nn.functional as F

    ids, mask, labels = batch
    hidden = _body(model)(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    keep = targets != -100
    weight = model.get_output_embeddings().weight
    noise = torch.unique(others[torch.randint(0, len(others), (negatives,), generator=generator)])
    h = hidden[keep]
    logits = torch.cat([h @ weight[candidates].T, h @ weight[noise].T + math.log(len(others) / len(noise))], dim=1)
    return F.cross_entropy(logits, torch.searchsorted(candidates, targets[keep]))


def greedy_answers(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int = 4,
                   batch_size: int = 256) -> list[str]:
    """Greedy completions of text prompts, generated and decoded as held-out validation does."""
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    return generate_greedy(model, tokenizer, ids, max_new_tokens=max_new_tokens, batch_size=batch_size)


def family_accuracies(model: Any, tokenizer: Any, split: str, limit_per_family: int | None = None) -> dict[str, float]:
    """Greedy reward@1 of ``model`` on each synthetic-arith family of ``split``."""
    from mutualrl.tasks.synthetic import FAMILY_NAMES, SyntheticArithTask, family_split

    task = SyntheticArithTask()
    result = {}
    for fam in FAMILY_NAMES:
        examples = family_split(fam, split)[:limit_per_family]
        completions = greedy_answers(model, tokenizer, [e.prompt for e in examples])
        result[fam] = sum(task.score(c, e.answer) for c, e in zip(completions, examples, strict=True)) / len(examples)
    return result


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    """Warm starts run on one thread: reproducible sums, and two builds can share two cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def sampled_accuracies(model: Any, tokenizer: Any, split: str, k: int = 4, limit_per_family: int | None = 100,
                       seed: int = 0) -> dict[str, dict[str, float]]:
    """Per family: accuracy of one sample at T=1 and pass@k, as GRPO's rollouts would see it.

    ``pass@k`` near 0 means a group of k rollouts almost always fails entirely: zero
    advantage everywhere, so GRPO alone cannot move that family.
    """
    import torch

    from mutualrl.tasks.synthetic import FAMILY_NAMES, SyntheticArithTask, family_split

    task = SyntheticArithTask()
    result = {}
    model.eval()
    for fam in FAMILY_NAMES:
        examples = family_split(fam, split)[:limit_per_family]
        ids = torch.tensor([tokenizer(e.prompt)["input_ids"] for e in examples])  # one length per family
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 top_k=0, top_p=1.0, num_return_sequences=k, max_new_tokens=4,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        texts = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
        hits = [task.score(texts[i * k + j], e.answer) for i, e in enumerate(examples) for j in range(k)]
        result[fam] = {"sample": sum(hits) / len(hits),
                       f"pass@{k}": sum(max(hits[i * k:(i + 1) * k]) for i in range(len(examples))) / len(examples)}
    return result


def answer_probabilities(model: Any, tokenizer: Any, split: str = "train") -> dict[str, dict[str, float]]:
    """Per family: the mean and largest probability, over ``split``'s prompts, that a sample begins with the right
    answer's tokens (teacher-forced, EOS left out: an upper bound on a sample the verifier scores 1).

    A blind spot is closed to the model's own samples when this is far below one over the number of samples a run
    draws on that family (a 400-step run of the recipe draws about 6,400): then GRPO alone never sees a success.
    """
    import math

    import torch

    from mutualrl.tasks.synthetic import FAMILY_NAMES, family_split

    model.eval()
    result = {}
    for fam in FAMILY_NAMES:
        by_shape: dict[tuple[int, int], list[list[int]]] = {}  # (prompt, answer) lengths -> rows, one forward each
        for example in family_split(fam, split):
            prompt, answer = encode_example(tokenizer, example.prompt, example.answer)
            by_shape.setdefault((len(prompt), len(answer) - 1), []).append(prompt + answer[:-1])  # EOS left out
        probs = []
        for (prompt_len, _), rows in by_shape.items():
            ids = torch.tensor(rows)  # [N, P + A]
            with torch.no_grad():
                logp = model(input_ids=ids).logits[:, prompt_len - 1:-1].log_softmax(-1)  # [N, A, V]
            answer_logp = logp.gather(2, ids[:, prompt_len:, None]).squeeze(2).sum(1)  # [N]
            probs += [math.exp(x) for x in answer_logp.tolist()]
        result[fam] = {"mean": sum(probs) / len(probs), "max": max(probs)}
    return result


def _phase_batches(spec: TinyModelSpec, tokenizer: Any) -> tuple[Any, Any, list, list, list]:
    """Encoded examples: strong family, other families (true answers), other families (blind-spot answer)."""
    import torch

    from mutualrl.tasks.synthetic import FAMILY_NAMES, family_split

    own = [encode_example(tokenizer, e.prompt, e.answer) for e in family_split(spec.strong_family, "train")]
    other_examples = [e for f in FAMILY_NAMES if f != spec.strong_family for e in family_split(f, "train")]
    other = [encode_example(tokenizer, e.prompt, e.answer) for e in other_examples]
    habit = [encode_example(tokenizer, e.prompt, spec.blind_spot_answer) for e in other_examples]
    vocab_in_task = sorted({t for p, c in own + other + habit for t in p + c} | {tokenizer.pad_token_id})
    candidates = torch.tensor(vocab_in_task, dtype=torch.long)
    is_candidate = torch.zeros(len(tokenizer), dtype=torch.bool)
    is_candidate[candidates] = True
    return candidates, torch.nonzero(~is_candidate).squeeze(1), own, other, habit


def warm_start(spec: TinyModelSpec, out_dir: Path, progress: ProgressFn | None = None,
               steps: int | None = None) -> dict[str, Any]:
    """Build ``spec``'s model, warm-start it in two phases, save model + tokenizer + report into ``out_dir``.

    Phase 1 (``spec.steps``, linear warm-up then decay to ``final_lr_fraction``): every family
    with its true answers, ``other_family_share`` of the examples from the non-strong ones.
    Phase 2 (``spec.blind_spot_steps`` at a constant ``blind_spot_learning_rate``): the
    non-strong families answered with ``blind_spot_answer``, the strong one with true answers.
    ``steps`` overrides the total (tests build reduced models; phase 2 keeps its share of it).
    Returns the report written to ``warm_start.json``.
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    total = spec.total_steps() if steps is None else steps
    phase2 = max(1, round(total * spec.blind_spot_steps / spec.total_steps())) if spec.blind_spot_steps else 0
    phase1 = total - phase2
    started = time.perf_counter()
    tokenizer = prepare_tokenizer(spec.tokenizer)
    with _single_thread():
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_config(make_config(spec, tokenizer))
        candidates, others, own, other, habit = _phase_batches(spec, tokenizer)
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=spec.weight_decay)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: min(1.0, (s + 1) / spec.warmup_steps)
            * (1.0 - (1.0 - spec.final_lr_fraction) * min(s, phase1 - 1) / max(1, phase1 - 1))
        )
        rng = random.Random(spec.seed)
        noise = torch.Generator().manual_seed(spec.seed)
        model.train()
        loss_value = float("nan")
        latent: dict[str, float] = {}
        for step in range(total):
            if step == phase1:
                latent = family_accuracies(model, tokenizer, "test")
                model.train()
                for group in optimizer.param_groups:
                    group["lr"] = spec.blind_spot_learning_rate
                schedule = None
            share, pool = (spec.other_family_share, other) if step < phase1 else (spec.blind_spot_share, habit)
            items = [rng.choice(pool) if rng.random() < share else rng.choice(own) for _ in range(spec.batch_size)]
            loss = sampled_softmax_loss(model, _collate(items, tokenizer.pad_token_id), candidates, others,
                                        spec.sampled_negatives, noise)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if schedule is not None:
                schedule.step()
            loss_value = float(loss.detach())
            if progress is not None:
                progress(step + 1, total, loss_value)
        train_seconds = time.perf_counter() - started
        test_acc = family_accuracies(model, tokenizer, "test")
        sampled = sampled_accuracies(model, tokenizer, "test")
        outside = _mass_outside(model, tokenizer, candidates)
        answer_probability = answer_probabilities(model, tokenizer, "train")
    report = _save(model, tokenizer, out_dir) | {
        "name": spec.name,
        "recipe": dataclasses.asdict(spec) | {"steps": phase1, "blind_spot_steps": phase2},
        "recipe_hash": spec.recipe_hash(),
        "warm_start_version": WARM_START_VERSION,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": loss_value,
        "test_accuracy_before_blind_spot": latent or None,
        "test_accuracy": test_acc,
        "test_sampled_accuracy": sampled,
        "prob_mass_outside_task_vocab": outside,
        "train_answer_probability": answer_probability,
        "train_seconds": round(train_seconds, 2),
        "total_seconds": round(time.perf_counter() - started, 2),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (out_dir / WARM_START_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _save(model: Any, tokenizer: Any, out_dir: Path) -> dict[str, Any]:
    """Save model and tokenizer; the weights' digest and the build environment, for the report."""
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"sha256": weights_digest(out_dir), "build_env": {k: os.environ.get(k) for k in BUILD_ENV}}


def _mass_outside(model: Any, tokenizer: Any, candidates: Any) -> float:
    """Mean probability the model puts outside the task's tokens at the first answer position."""
    import torch

    from mutualrl.tasks.synthetic import FAMILY_NAMES, family_split

    prompts = [e.prompt for f in FAMILY_NAMES for e in family_split(f, "test")[:50]]
    ids = torch.tensor([tokenizer(p)["input_ids"] for p in prompts])  # every prompt has the same length
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids).logits[:, -1], dim=-1)
    return float(1.0 - probs[:, candidates].sum(-1).mean())


