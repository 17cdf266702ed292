"""K sampled completions per prompt with one prefill: pass@K and sampled accuracy on a CPU.

GRPO's signal on a prompt exists only when some of its K rollouts succeed and some fail,
so the question "does this model have a signal here?" is pass@K at the training
temperature (docs/pools.md). ``generate(num_return_sequences=K)`` repeats every prompt K
times *before* the prefill; on a CPU the prompt (100-300 tokens for the QA tasks) costs far
more than a short answer, so this module prefills each prompt once, repeats its KV cache K
times (``Cache.batch_repeat_interleave``) and lets ``generate`` continue from it.
"""

from __future__ import annotations

import copy

from collections.abc import Sequence
from typing import Any

from mutualrl.padding import pad_token_rows
from mutualrl.pools.greedy import Progress, decode_completion, eos_token_ids, eval_mode


def sample_completions(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    k: int,
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    with_greedy: bool = False,
    progress: Progress | None = None,
) -> list[list[str]]:
    """``k`` sampled completions (top-k/top-p off, like TRL's default sampling) per tokenised prompt.

    ``with_greedy``: each prompt's list starts with its greedy completion (from a copy of the same
    prefill), then the ``k`` samples -- greedy accuracy and pass@K for the price of one prefill.
    """
    import torch
    from transformers import DynamicCache, GenerationConfig

    if k < 1 or batch_size < 1:
        raise ValueError(f"k and batch_size must be >= 1, got k={k}, batch_size={batch_size}")
    eos_ids = eos_token_ids(tokenizer, model)
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = eos_ids[0] if eos_ids else 0
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                              max_new_tokens=max_new_tokens, eos_token_id=eos_ids or None, pad_token_id=pad_id,
                              use_cache=True)
    greedy_config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                                     eos_token_id=eos_ids or None, pad_token_id=pad_id, use_cache=True)
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), i))
    out: list[list[str]] = [[] for _ in prompts]
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        with eval_mode(model), torch.no_grad():
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                input_ids, attention = pad_token_rows([prompts[i] for i in batch], pad_id, side="left",
                                                      device=device)
                cache = DynamicCache(config=model.config)
                # Prefill all but the last prompt token once; generate() feeds that token itself. Left
                # padding: positions count real tokens only, as generate() computes them.
                positions = (attention.long().cumsum(-1) - 1).clamp(min=0)
                model(input_ids=input_ids[:, :-1], attention_mask=attention[:, :-1],
                      position_ids=positions[:, :-1], past_key_values=cache, use_cache=True,
                      logits_to_keep=1)  # only the cache is wanted: no (batch, length, vocab) logits
                greedy_tokens = None
                if with_greedy:
                    greedy_out = model.generate(input_ids=input_ids, attention_mask=attention,
                                                past_key_values=copy.deepcopy(cache), generation_config=greedy_config)
                    greedy_tokens = greedy_out[:, input_ids.size(1):].tolist()
                cache.batch_repeat_interleave(k)
                output = model.generate(
                    input_ids=input_ids.repeat_interleave(k, dim=0),
                    attention_mask=attention.repeat_interleave(k, dim=0),
                    past_key_values=cache,
                    generation_config=config,
                )
                new_tokens = output[:, input_ids.size(1):].tolist()
                for row, i in enumerate(batch):
                    out[i] = [decode_completion(tokenizer, new_tokens[row * k + j], eos_ids, pad_id)
                              for j in range(k)]
                    if greedy_tokens is not None:
                        out[i].insert(0, decode_completion(tokenizer, greedy_tokens[row], eos_ids, pad_id))
                if progress is not None:
                    progress(len(batch))
    finally:
        torch.random.set_rng_state(generator_state)
    return out


def pass_at_k(scores: Sequence[Sequence[float]], threshold: float = 0.5) -> float:
    """Fraction of prompts where at least one of the samples scores >= ``threshold``."""
    if not scores:
        return 0.0
    return sum(any(s >= threshold for s in row) for row in scores) / len(scores)


def mixed_groups(scores: Sequence[Sequence[float]], threshold: float = 0.5) -> float:
    """Fraction of prompts whose samples both succeed and fail: GRPO's advantage is non-zero only there."""
    if not scores:
        return 0.0
    return sum(any(s >= threshold for s in row) and not all(s >= threshold for s in row)
               for row in scores) / len(scores)
