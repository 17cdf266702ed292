"""The embedded ``tiny`` pool: two small causal LMs with real, different tokenizers.

The first ``mutualrl train`` must show mutual RL working on a laptop with no GPU and no
model hub, so the pool is built here from configs and warm-started on the synthetic task
(:mod:`mutualrl.tasks.synthetic`):

- ``tiny-bpe``: a GPT-2-architecture model on the real GPT-2 byte-level BPE vocabulary,
  warm-started mostly on the ``add`` family;
- ``tiny-sp``: a Llama-architecture model on the real Mistral SentencePiece vocabulary,
  warm-started mostly on the ``sub`` family.

Each sees a small share of the other family, so it knows the format but not the
operation: each solves held-out problems the other cannot, which is what Success-Gated
Transfer needs (paper Sec. "Regime 3": the learner's whole group fails, a peer succeeds).

The warm start is supervised next-token training on the task's ``train`` split only
(the ``test`` split stays held out), seeded and single-threaded so it is reproducible.
The vocabularies (50k and 32k) dwarf the models, so the loss is a sampled softmax: the
task's own tokens plus random negatives each step, which keeps a step ~20x cheaper than
the full softmax while still pushing the rest of the vocabulary down (the remaining
probability outside the task's tokens is measured and recorded).

Models are built once into the asset cache, ``$MUTUALRL_CACHE/models/<name>-<hash>``,
where the hash covers the warm-start recipe, so changing the recipe rebuilds them. The
folder holds ``save_pretrained`` model and tokenizer files and ``warm_start.json`` (the
recipe, held-out accuracy per family, timings).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.assets.cache import asset_lock, asset_path, building
from mutualrl.errors import AssetError

#: Bump when the warm-start *code* changes in a way that changes the models.
WARM_START_VERSION = 1
WARM_START_FILE = "warm_start.json"

ProgressFn = Callable[[int, int, float], None]  # (step, total_steps, loss)


@dataclass(frozen=True)
class TinyModelSpec:
    """How one tiny model is built and warm-started (every field enters the cache hash)."""

    name: str
    tokenizer: str  # a named offline tokenizer (mutualrl.assets.tokenizers)
    architecture: str  # "gpt2" | "llama"
    strong_family: str  # synthetic-arith family it is mostly trained on
    other_family_share: float  # share of warm-start examples drawn from the other families
    other_family_correct: float = 1.0  # chance an other-family example carries its true answer (else: misread)
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    max_positions: int = 256
    steps: int = 450
    batch_size: int = 128
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 30
    final_lr_fraction: float = 0.3  # the schedule decays linearly to this share of the peak, not to 0
    sampled_negatives: int = 2048
    seed: int = 0
    description: str = ""

    def recipe_hash(self) -> str:
        """A short digest of everything that determines the built model."""
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


TINY_MODELS: dict[str, TinyModelSpec] = {
    s.name: s
    for s in (
        TinyModelSpec(
            name="tiny-bpe",
            tokenizer="gpt2",
            architecture="gpt2",
            strong_family="add",
            other_family_share=0.05,
            description="GPT-2 architecture, 2x64, real GPT-2 byte-level BPE vocabulary; warm-started on "
            "synthetic-arith, strong on `add`, weak on `sub`",
        ),
        TinyModelSpec(
            name="tiny-sp",
            tokenizer="mistral-sp",
            architecture="llama",
            strong_family="sub",
            other_family_share=0.05,
            description="Llama architecture, 2x64, real Mistral SentencePiece vocabulary; warm-started on "
            "synthetic-arith, strong on `sub`, weak on `add`",
        ),
    )
}
TINY_NAMES = tuple(TINY_MODELS)


def tiny_model_dir(name: str) -> Path:
    """Cache folder of tiny model ``name`` for the current warm-start recipe."""
    spec = TINY_MODELS[name]
    return asset_path("models", f"{name}-{spec.recipe_hash()}")


def is_tiny_model_cached(name: str) -> bool:
    return (tiny_model_dir(name) / WARM_START_FILE).is_file()


def read_warm_start_report(name: str) -> dict[str, Any]:
    """The ``warm_start.json`` of a built tiny model (recipe, accuracies, timings)."""
    path = tiny_model_dir(name) / WARM_START_FILE
    if not path.is_file():
        raise AssetError(f"tiny model {name!r} is not built yet ({path} missing); run `mutualrl assets fetch`")
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------------------
# Model and data
# ---------------------------------------------------------------------------------------


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
    import torch

    width = max(len(p) + len(c) for p, c in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    for row, (p, c) in enumerate(items):
        seq = p + c
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        labels[row, len(p) : len(seq)] = torch.tensor(c)
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
    """Greedy completions (left-padded batches, stop at EOS), as validation decodes them."""
    import torch

    eos = tokenizer.eos_token_id
    out: list[str] = []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            enc = [tokenizer(p)["input_ids"] for p in prompts[start : start + batch_size]]
            width = max(map(len, enc))
            ids = torch.full((len(enc), width), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, e in enumerate(enc):
                ids[row, width - len(e):] = torch.tensor(e)
                mask[row, width - len(e):] = 1
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
            for row in gen[:, width:].tolist():
                row = row[: row.index(eos)] if eos in row else row
                out.append(tokenizer.decode(row, skip_special_tokens=True))
    return out


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


def warm_start(spec: TinyModelSpec, out_dir: Path, progress: ProgressFn | None = None,
               steps: int | None = None) -> dict[str, Any]:
    """Build ``spec``'s model, warm-start it, save model + tokenizer + report into ``out_dir``.

    ``steps`` overrides ``spec.steps`` (tests build reduced models this way; the cache
    only ever holds full builds). Returns the report written to ``warm_start.json``.
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    from mutualrl.tasks.synthetic import FAMILIES, FAMILY_NAMES, family_split

    total = spec.steps if steps is None else steps
    started = time.perf_counter()
    tokenizer = prepare_tokenizer(spec.tokenizer)
    with _single_thread():
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_config(make_config(spec, tokenizer))
        own = [encode_example(tokenizer, e.prompt, e.answer) for e in family_split(spec.strong_family, "train")]
        other_examples = [e for f in FAMILY_NAMES if f != spec.strong_family for e in family_split(f, "train")]
        other = [encode_example(tokenizer, e.prompt, e.answer) for e in other_examples]
        # The misreading: the other family's prompt answered with the strong family's operation.
        misread = [encode_example(tokenizer, e.prompt, str(abs(FAMILIES[spec.strong_family].answer(*e.meta["operands"]))))
                   for e in other_examples]
        vocab_in_task = sorted({t for p, c in own + other for t in p + c} | {tokenizer.pad_token_id})
        candidates = torch.tensor(vocab_in_task, dtype=torch.long)
        is_candidate = torch.zeros(len(tokenizer), dtype=torch.bool)
        is_candidate[candidates] = True
        others = torch.nonzero(~is_candidate).squeeze(1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=spec.weight_decay)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: min(1.0, (s + 1) / spec.warmup_steps)
            * (1.0 - (1.0 - spec.final_lr_fraction) * s / max(1, total - 1))
        )
        rng = random.Random(spec.seed)
        noise = torch.Generator().manual_seed(spec.seed)
        model.train()
        loss_value = float("nan")
        for step in range(total):
            items = []
            for _ in range(spec.batch_size):
                if rng.random() < spec.other_family_share:
                    i = rng.randrange(len(other))
                    items.append(other[i] if rng.random() < spec.other_family_correct else misread[i])
                else:
                    items.append(rng.choice(own))
            loss = sampled_softmax_loss(model, _collate(items, tokenizer.pad_token_id), candidates, others,
                                        spec.sampled_negatives, noise)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            loss_value = float(loss.detach())
            if progress is not None:
                progress(step + 1, total, loss_value)
        train_seconds = time.perf_counter() - started
        test_acc = family_accuracies(model, tokenizer, "test")
        outside = _mass_outside(model, tokenizer, candidates)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    report = {
        "name": spec.name,
        "recipe": dataclasses.asdict(spec) | {"steps": total},
        "recipe_hash": spec.recipe_hash(),
        "warm_start_version": WARM_START_VERSION,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": loss_value,
        "test_accuracy": test_acc,
        "prob_mass_outside_task_vocab": outside,
        "train_seconds": round(train_seconds, 2),
        "total_seconds": round(time.perf_counter() - started, 2),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (out_dir / WARM_START_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _mass_outside(model: Any, tokenizer: Any, candidates: Any) -> float:
    """Mean probability the model puts outside the task's tokens at the first answer position."""
    import torch

    from mutualrl.tasks.synthetic import FAMILY_NAMES, family_split

    prompts = [e.prompt for f in FAMILY_NAMES for e in family_split(f, "test")[:50]]
    ids = torch.tensor([tokenizer(p)["input_ids"] for p in prompts])  # every prompt has the same length
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids).logits[:, -1], dim=-1)
    return float(1.0 - probs[:, candidates].sum(-1).mean())


# ---------------------------------------------------------------------------------------
# Cache: build once, with progress
# ---------------------------------------------------------------------------------------


def _console() -> Any:
    """The CLI's console when running under the CLI (so nested live displays work), else stderr."""
    common = sys.modules.get("mutualrl.cli.common")
    if common is not None:
        return common.console
    from rich.console import Console

    return Console(stderr=True)


def _progress_bar() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn(),
        console=_console(), transient=False,
    )


def ensure_tiny_model(name: str, progress: ProgressFn | None = None, show_progress: bool = True) -> Path:
    """The cached folder of tiny model ``name``, warm-starting it first if needed (locked, atomic)."""
    if name not in TINY_MODELS:
        raise AssetError(f"unknown tiny model {name!r}; known: {', '.join(TINY_NAMES)}")
    spec = TINY_MODELS[name]
    dest = tiny_model_dir(name)
    with asset_lock("models", dest.name):
        if is_tiny_model_cached(name):
            return dest
        with building(dest) as tmp:
            if progress is not None or not show_progress:
                warm_start(spec, tmp, progress)
            else:
                with _progress_bar() as bar:
                    task = bar.add_task(f"warm start {name}", total=spec.steps, loss="-")
                    warm_start(spec, tmp, lambda s, n, loss: bar.update(task, completed=s, loss=f"{loss:.3f}"))
    return dest


def ensure_tiny_models(names: tuple[str, ...] | list[str] = TINY_NAMES, parallel: bool = True) -> dict[str, Path]:
    """Every named tiny model, building the missing ones side by side (one process and thread each)."""
    missing = [n for n in names if not is_tiny_model_cached(n)]
    if len(missing) > 1 and parallel:
        _build_in_subprocesses(missing)
    return {n: ensure_tiny_model(n) for n in names}


def _build_in_subprocesses(names: list[str]) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    procs = {
        n: subprocess.Popen([sys.executable, "-m", "mutualrl.pools.tiny", n], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
        for n in names
    }
    errors: dict[str, list[str]] = {n: [] for n in names}
    with _progress_bar() as bar:
        tasks = {n: bar.add_task(f"warm start {n}", total=TINY_MODELS[n].steps, loss="-") for n in names}

        def follow(n: str) -> None:
            for line in procs[n].stdout:  # type: ignore[union-attr]
                try:
                    msg = json.loads(line)
                    bar.update(tasks[n], completed=msg["step"], total=msg["total"], loss=f"{msg['loss']:.3f}")
                except (ValueError, KeyError):
                    pass

        def drain(n: str) -> None:
            errors[n] = procs[n].stderr.read().splitlines()  # type: ignore[union-attr]

        threads = [threading.Thread(target=f, args=(n,), daemon=True) for n in names for f in (follow, drain)]
        for t in threads:
            t.start()
        codes = {n: p.wait() for n, p in procs.items()}
        for t in threads:
            t.join()
    failed = {n: c for n, c in codes.items() if c != 0}
    if failed:
        details = "; ".join(f"{n} (exit {c}): " + " | ".join(errors[n][-3:]) for n, c in failed.items())
        raise AssetError(f"warm start of tiny model(s) failed: {details}")


def _main(argv: list[str]) -> int:
    """``python -m mutualrl.pools.tiny NAME``: build one model, progress as JSON lines on stdout."""
    if len(argv) != 1 or argv[0] not in TINY_MODELS:
        print(f"usage: python -m mutualrl.pools.tiny {{{','.join(TINY_NAMES)}}}", file=sys.stderr)
        return 2

    def emit(step: int, total: int, loss: float) -> None:
        if step == total or step % 5 == 0:
            print(json.dumps({"step": step, "total": total, "loss": loss}), flush=True)

    try:
        print(ensure_tiny_model(argv[0], progress=emit), file=sys.stderr)
    except AssetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
