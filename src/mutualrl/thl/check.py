"""The diagnostics behind ``mutualrl thl-check`` (paper App. "Sanity checks on THL word
alignment" and App. "THL alignment diagnostics").

- :func:`conservation_table`: Tab. thl-wikitext per source->target pair;
- :func:`long_context_table`: Tab. thl-long-context (THL vs naive copy/truncate/pad);
- :func:`cjk_table`: Tab. thl-cjk (word-level, char-level and auto-switch units);
- :func:`ratio_table`: Tabs. thl-denominator-control and thl-seq-ratio (needs both models).

Source log-probs come from a causal LM when one is given, else from a seeded synthetic
trace (``-U(0, 8)`` nats per token, float32 like a model's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mutualrl.padding import pad_token_rows
from mutualrl.thl.align import align_logprobs
from mutualrl.thl.metrics import conservation_stats, naive_copy, ratio_stats, relative_mae
from mutualrl.thl.retokenize import retokenize
from mutualrl.thl.spans import batch_decode_with_spans
from mutualrl.thl.units import has_no_space_script, partition

# Prompt that precedes every corpus text when a model scores it (shared by both policies).
SCORING_PROMPT = "Text:\n"


@dataclass
class Policy:
    """A tokenizer, optionally with the causal LM that scores text under it."""

    name: str
    tokenizer: Any
    model: Any = None

    def prompt_ids(self, prompt: str) -> list[int]:
        ids = list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        # Keep a BOS the tokenizer adds, never an EOS appended to the prompt.
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if ids and eos is not None and ids[-1] == eos and len(ids) > 1:
            ids = ids[:-1]
        return ids


def synthetic_logps(lengths: Sequence[int], seed: int) -> list[np.ndarray]:
    """Seeded per-token log-probs with realistic magnitudes: -U(0, 8), float32."""
    rng = np.random.default_rng(seed)
    return [(-rng.uniform(0.0, 8.0, n)).astype(np.float32) for n in lengths]


def model_logps(model: Any, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
                batch_size: int = 8) -> list[np.ndarray]:
    """log p(response token | prompt, previous tokens) under ``model`` (right-padded batches)."""
    import torch

    out: list[np.ndarray] = []
    device = next(model.parameters()).device
    for b in range(0, len(response_ids), batch_size):
        prompts, responses = prompt_ids[b:b + batch_size], response_ids[b:b + batch_size]
        seqs = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
        ids, mask = pad_token_rows(seqs, 0)
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].to(device).unsqueeze(-1)).squeeze(-1)
        for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
            if not p:
                raise ValueError("model_logps needs at least one prompt token to condition the first response token")
            start = len(p) - 1  # logits at position t predict token t+1
            out.append(logp[i, start:start + len(r)].cpu().numpy().astype(np.float32))
    return out


def _score(policy: Policy, texts: Sequence[str], prompts: Sequence[str] | None, seed: int) -> tuple[list, list]:
    """Response ids (as generated: the continuation encoding) and their log-probs."""
    ids = [r.ids for r in retokenize(policy.tokenizer, list(texts))]
    if policy.model is None:
        return ids, synthetic_logps([len(i) for i in ids], seed)
    prompt_texts = list(prompts) if prompts is not None else [SCORING_PROMPT] * len(texts)
    prompt_ids = [policy.prompt_ids(p) for p in prompt_texts]
    return ids, model_logps(policy.model, prompt_ids, ids)


def conservation_row(source: Policy, target: Policy, texts: Sequence[str], *, seed: int = 0,
                     units: str = "auto", rule: str = "exact-copy") -> dict:
    """One row of Tab. thl-wikitext for ``source -> target``."""
    src_ids, src_lp = _score(source, texts, None, seed)
    decoded = batch_decode_with_spans(source.tokenizer, src_ids)
    tgt = retokenize(target.tokenizer, [d.text for d in decoded])
    tgt_spans = [t.spans for t in tgt]
    aligned = align_logprobs([d.text for d in decoded], [d.spans for d in decoded], src_lp, tgt_spans,
                             units=units, rule=rule)
    tgt_lp = None
    if target.model is not None:
        tgt_lp = model_logps(target.model, [target.prompt_ids(SCORING_PROMPT)] * len(tgt), [t.ids for t in tgt])
    stats = conservation_stats(aligned, [d.spans for d in decoded], src_lp, tgt_spans, tgt_lp)
    row = {"source": source.name, "target": target.name}
    row.update(stats.as_dict())
    row["n_source_tokens"] = int(sum(len(i) for i in src_ids))
    row["n_target_tokens"] = int(sum(len(t.ids) for t in tgt))
    return row


def conservation_table(pairs: Sequence[tuple[Policy, Policy]], texts: Sequence[str], **kw: Any) -> list[dict]:
    return [conservation_row(s, t, texts, **kw) for s, t in pairs]


def _texts_of_length(target: Policy, corpus: Sequence[str], n_tokens: int, count: int, seed: int) -> list[str]:
    """``count`` texts of exactly ``n_tokens`` target tokens, cut from shuffled corpus concatenations."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        parts: list[str] = []
        n = 0
        while n < n_tokens:
            chunk = "\n\n".join(corpus[j] for j in rng.permutation(len(corpus)))
            parts.append(chunk)
            n += len(retokenize(target.tokenizer, [chunk])[0].ids)
        text = "\n\n".join(parts)
        enc = retokenize(target.tokenizer, [text])[0]
        cut = int(enc.spans[n_tokens - 1, 1]) if len(enc.ids) >= n_tokens else len(text)
        out.append(text[:cut])
    return out


def long_context_table(source: Policy, target: Policy, corpus: Sequence[str], lengths: Sequence[int],
                       n_per_length: int, *, seed: int = 0, units: str = "auto") -> list[dict]:
    """Tab. thl-long-context: relative MAE of THL vs the naive copy/truncate/pad baseline."""
    rows = []
    for k, n_tokens in enumerate(lengths):
        texts = _texts_of_length(target, corpus, n_tokens, n_per_length, seed + k)
        src_ids, src_lp = _score(source, texts, None, seed + 100 + k)
        decoded = batch_decode_with_spans(source.tokenizer, src_ids)
        tgt = retokenize(target.tokenizer, [d.text for d in decoded])
        aligned = align_logprobs([d.text for d in decoded], [d.spans for d in decoded], src_lp,
                                 [t.spans for t in tgt], units=units)
        parts = [partition(d.text, "auto") for d in decoded]
        args = (parts, [d.spans for d in decoded], src_lp, [t.spans for t in tgt])
        thl = relative_mae(*args, aligned.values)
        naive = relative_mae(*args, [naive_copy(lp, len(t.ids)) for lp, t in zip(src_lp, tgt, strict=True)])
        rows.append({
            "source": source.name, "target": target.name, "target_length": int(n_tokens), "n_texts": len(texts),
            "thl_rel_mae_pct": 100.0 * thl, "naive_rel_mae_pct": 100.0 * naive,
            "thl_reduction_pct": 100.0 * (1.0 - thl / naive) if naive > 0 else 0.0,
            "residual_abs_max": float(np.abs(aligned.residual).max()),
        })
    return rows


def cjk_table(source: Policy, target: Policy, texts: Sequence[str], *, seed: int = 0) -> list[dict]:
    """Tab. thl-cjk: relative MAE per evaluation unit (words for Western text, characters for CJK)
    when aligning with word-level, char-level or auto-switched units."""
    rows = []
    families = {"western": [t for t in texts if not has_no_space_script(t)],
                "cjk": [t for t in texts if has_no_space_script(t)]}
    for family, fam_texts in families.items():
        if not fam_texts:
            continue
        src_ids, src_lp = _score(source, fam_texts, None, seed)
        decoded = batch_decode_with_spans(source.tokenizer, src_ids)
        tgt = retokenize(target.tokenizer, [d.text for d in decoded])
        parts = [partition(d.text, "auto") for d in decoded]
        row: dict[str, Any] = {"source": source.name, "target": target.name, "family": family, "n_texts": len(fam_texts)}
        for mode in ("word", "char", "auto"):
            aligned = align_logprobs([d.text for d in decoded], [d.spans for d in decoded], src_lp,
                                     [t.spans for t in tgt], units=mode)
            row[f"{mode}_rel_mae_pct"] = 100.0 * relative_mae(parts, [d.spans for d in decoded], src_lp,
                                                               [t.spans for t in tgt], aligned.values)
        rows.append(row)
    return rows


def split_prompt_response(text: str, frac: float = 0.3) -> tuple[str, str]:
    """Cut a text into a prompt (about ``frac`` of it, at a whitespace when there is one) and the rest."""
    cut = max(1, int(len(text) * frac))
    space = text.find(" ", cut)
    if 0 < space < len(text) - 1:
        cut = space
    return text[:cut], text[cut:]


def ratio_table(source: Policy, target: Policy, texts: Sequence[str], *, seed: int = 0, eps: float = 0.2) -> list[dict]:
    """Importance ratios exp(l_target - denominator) for the THL-aligned peer denominator and the
    paper's controls: a shuffled prompt (source scored under another text's prompt) and a broken
    alignment (unit masses shifted by one unit before redistribution)."""
    if source.model is None or target.model is None:
        raise ValueError("ratio statistics need both a source and a target model")
    split = [split_prompt_response(t) for t in texts if len(t) > 8]
    prompts, responses = [p for p, _ in split], [r for _, r in split]
    rng = np.random.default_rng(seed)
    perm = np.roll(rng.permutation(len(prompts)), 1)  # a derangement-ish shuffle
    shuffled = [prompts[j] for j in perm]
    src_ids = [r.ids for r in retokenize(source.tokenizer, responses)]
    decoded = batch_decode_with_spans(source.tokenizer, src_ids)
    src_prompt = [source.prompt_ids(p) for p in prompts]
    src_lp = model_logps(source.model, src_prompt, src_ids)
    src_lp_shuf = model_logps(source.model, [source.prompt_ids(p) for p in shuffled], src_ids)
    tgt = retokenize(target.tokenizer, [d.text for d in decoded])
    numer = model_logps(target.model, [target.prompt_ids(p) for p in prompts], [t.ids for t in tgt])
    texts_d, spans_s, spans_t = [d.text for d in decoded], [d.spans for d in decoded], [t.spans for t in tgt]
    aligned = align_logprobs(texts_d, spans_s, src_lp, spans_t)
    aligned_shuf = align_logprobs(texts_d, spans_s, src_lp_shuf, spans_t)
    broken = []
    for i, vals in enumerate(aligned.values):
        units, mass = aligned.target_units[i], aligned.unit_mass[i]
        counts = np.maximum(np.bincount(units[units >= 0], minlength=len(mass)), 1)
        rolled = np.roll(mass, 1) / counts
        b = vals.copy()
        b[units >= 0] = rolled[units[units >= 0]]
        broken.append(b)
    rows = []
    for label, denom in (("thl_aligned", aligned.values), ("shuffled_prompt", aligned_shuf.values),
                         ("broken_alignment", broken)):
        row = {"source": source.name, "target": target.name, "denominator": label}
        row.update(ratio_stats(numer, denom, eps=eps))
        rows.append(row)
    return rows
