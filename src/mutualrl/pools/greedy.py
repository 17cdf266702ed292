"""Greedy completions with transformers ``generate``: left-padded batches, temperature 0, stop at EOS.

Held-out evaluation (the training loop's validation, ``mutualrl eval``) and the tiny pool's
warm-start checks decode the same way, so a family accuracy in ``warm_start.json`` and
reward@1 in a run are the same measurement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from mutualrl.padding import pad_token_rows

Progress = Callable[[int], None]
"""Called after each batch with how many prompts it finished (an increment, as rich's ``advance``)."""


def eos_token_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS and the model's generation-config EOS."""
    ids: list[int] = []
    candidates: list[Any] = [getattr(tokenizer, "eos_token_id", None)]
    gen_config = getattr(model, "generation_config", None)
    if gen_config is not None:
        candidates.append(getattr(gen_config, "eos_token_id", None))
    for c in candidates:
        for i in c if isinstance(c, (list, tuple)) else [c]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids


def decode_completion(tokenizer: Any, token_ids: Sequence[int], eos_ids: Sequence[int], pad_id: int | None) -> str:
    """Completion text: tokens up to the first EOS, special tokens dropped."""
    out = []
    for t in token_ids:
        t = int(t)
        if t in eos_ids:
            break
        out.append(t)
    if pad_id is not None and pad_id not in eos_ids:
        while out and out[-1] == pad_id:
            out.pop()
    return tokenizer.decode(out, skip_special_tokens=True)


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Eval mode for the block, then the mode the model had (validation runs mid-training)."""
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()


@contextlib.contextmanager
def only_eos_from_model(model: Any) -> Iterator[None]:
    """``generate`` fills every field our config leaves unset from the model's ``generation_config.json``
    (``suppress_tokens``, ``repetition_penalty``, ``no_repeat_ngram_size``, ``bad_words_ids``, forced tokens, a
    minimum length): each changes which token is greedy, so a model folder chose what greedy decoding is (reward@1
    0.5 -> 0.0). For the block the model's generation config is transformers' defaults; its EOS ids, the one thing
    taken from it, are in our config already (:func:`eos_token_ids`)."""
    from transformers import GenerationConfig

    own = getattr(model, "generation_config", None)
    if own is None:
        yield
        return
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = own


OUTPUT_FORM_SETTINGS = frozenset({"output_attentions", "output_hidden_states", "output_scores", "output_logits",
                                  "return_dict_in_generate", "use_cache"})
"""Generation settings that shape what ``generate`` returns or how fast, never which tokens greedy picks: not worth
saying they were not taken (a model's config often sets them: transformers copies them from the model config)."""


def ignored_generation_settings(model: Any) -> list[str]:
    """The fields of a model's ``generation_config`` that greedy evaluation does not take and that would change
    what it generates (sampling, penalties, lengths: all but the EOS and pad ids and :data:`OUTPUT_FORM_SETTINGS`),
    as ``name=value``, for the results to say."""
    from transformers import GenerationConfig

    own = getattr(model, "generation_config", None)
    if own is None:
        return []
    defaults = GenerationConfig().to_dict()
    taken = {"eos_token_id", "pad_token_id", "bos_token_id", "decoder_start_token_id", "transformers_version",
             "_from_model_config"}
    return [f"{key}={value!r}"[:80] for key, value in sorted(own.to_dict().items())
            if key not in taken | OUTPUT_FORM_SETTINGS and value != defaults.get(key)]


def generate_greedy(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    batch_size: int,
    progress: Progress | None = None,
) -> list[str]:
    """Greedy completions (transformers ``generate``) for tokenised prompts, in input order.

    Prompts are batched by length (less padding) and left-padded; generation stops at EOS.
    The model's train/eval mode is restored afterwards (the training loop calls this mid-run).
    """
    import torch
    from transformers import GenerationConfig

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    eos_ids = eos_token_ids(tokenizer, model)
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = eos_ids[0] if eos_ids else 0
    config = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos_ids or None,
        pad_token_id=pad_id,
        use_cache=True,
    )
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), i))
    completions: list[str] = [""] * len(prompts)
    with eval_mode(model), torch.no_grad(), only_eos_from_model(model):
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            input_ids, attention = pad_token_rows([prompts[i] for i in batch], pad_id, side="left", device=device)
            output = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
            new_tokens = output[:, input_ids.size(1) :].tolist()
            for row, i in enumerate(batch):
                completions[i] = decode_completion(tokenizer, new_tokens[row], eos_ids, pad_id)
            if progress is not None:
                progress(len(batch))
    return completions
