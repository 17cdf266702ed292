"""byte-kd's next-byte distributions on the tiny pool: exact (over every covering tokenization) against canonical
(the next-token distribution after the model's own tokens, by first byte), side by side on the same completions.

For each tiny model (tiny-bpe, tiny-sp) and a fixed set of ``synthetic-arith`` prompts (both families), completions
are sampled from the model itself (seeded, at temperature 1, up to ``--tokens`` tokens). On each completion, timed:

- judge, canonical: one no-grad forward, the next-byte log-masses at each token;
- judge, exact: the cover enumeration and the next-byte log-masses at every byte offset;
- learner, canonical: one forward, the log-masses, a backward;
- learner, exact: the enumeration (no gradient), one forward over the kept states, the log-masses, a backward;
- then both forms over all completions at once, as a training step runs them (``*_together``): canonical, one
  padded forward; exact, the texts' enumerations side by side, one forward per round for all of them.

And the canonical form's bias: at each offset where the completion's own tokenization starts a token, the largest
``|q_canonical(c) − q_exact(c)|`` over the symbols, and ``KL(q_exact ‖ q_canonical)``; the mean states per completion
and the largest share of mass the limits dropped. Inside a merged token: after the first digit of each two-digit
right answer, both forms' END mass and the right second digit's. JSON on stdout; results/bytekd-exact.md.

    PYTHONPATH=src python benchmarks/bytekd_exact.py --prompts 12 --samples 4 --tokens 8
    PYTHONPATH=src python benchmarks/bytekd_exact.py --untrained --prompts 2 --samples 2 --tokens 16 \
        --max-covers 8 --cover-floor 1e-4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


class Shim:
    """What the cover enumeration reads of a trainer: the tokenizer, the stop ids, the model's logits."""

    def __init__(self, model, tokenizer):
        self.model, self.processing_class = model, tokenizer
        self.eos_token_ids = [tokenizer.eos_token_id]
        self.temperature = 1.0

    def completion_logits(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask):
        import torch

        ids = torch.cat([prompt_ids, completion_ids], 1)  # [N, P + C]
        mask = torch.cat([prompt_mask, completion_mask], 1)  # [N, P + C]
        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=completion_ids.shape[1] + 1).logits
        return logits[:, :-1].float()  # [N, C, V]


def completions(model, tokenizer, prompts: list[str], samples: int, tokens: int, seed: int):
    """``(prompt ids [P], completion tokens without EOS, finished)`` per sample, sampled from the model."""
    import torch

    torch.manual_seed(seed)
    out = []
    for prompt in prompts:
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])  # [1, P]
        for _ in range(samples):
            generated = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                                       max_new_tokens=tokens, pad_token_id=tokenizer.eos_token_id)[0, ids.shape[1]:]
            row = generated.tolist()
            done = tokenizer.eos_token_id in row
            row = row[:row.index(tokenizer.eos_token_id)] if done else row
            out.append((ids[0], row, done))
    return out


def measure(name: str, prompts: list[str], samples: int, tokens: int, seed: int, max_covers: int, floor: float,
            untrained: bool) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mutualrl.pools.tiny import ensure_tiny_model
    from mutualrl.regimes.core.byte_covers import cover_next_byte_logps, find_covers
    from mutualrl.regimes.core.cover_scoring import CoverLimits, learner_next_bytes, model_forward, token_pieces
    from mutualrl.regimes.core.next_bytes import END, next_byte_logps

    folder = ensure_tiny_model(name)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder).float(), AutoTokenizer.from_pretrained(folder)
    if untrained:  # the same architecture at a random initialisation: mass spread over many tokenizations
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(model.config).float()
    model.eval()
    shim = Shim(model, tokenizer)
    width = model.get_output_embeddings().weight.shape[0]
    pieces = token_pieces(shim, width)
    limits = CoverLimits(floor, max_covers)
    times = {key: 0.0 for key in ("judge_canonical", "judge_exact", "learner_canonical", "learner_exact")}
    states, dropped, gaps, kls, end_gaps = [], 0.0, [], [], []
    rows = completions(model, tokenizer, prompts, samples, tokens, seed)
    for prompt, row, done in rows:
        text = pieces.text_of(row)
        mask = torch.ones_like(prompt)
        sequence = torch.tensor([row + ([tokenizer.eos_token_id] if done else [])], dtype=torch.long)  # [1, C]
        clock = time.perf_counter()
        with torch.no_grad():
            canonical = next_byte_logps(shim.completion_logits(model, prompt[None], mask[None], sequence,
                                                               torch.ones_like(sequence)), pieces.symbols)[0]
        times["judge_canonical"] += time.perf_counter() - clock
        clock = time.perf_counter()
        with torch.no_grad():
            covers = find_covers(text, pieces, model_forward(shim, model, prompt, mask), row, floor, max_covers)
            exact = cover_next_byte_logps(covers, text, pieces)  # [n + 1, 258]
        times["judge_exact"] += time.perf_counter() - clock
        states.append(len(covers.tokens))
        dropped = max(dropped, covers.dropped)
        offset = 0
        for t, token in enumerate(row + ([None] if done else [])):  # each own token's start: a boundary
            a, b = canonical[t].exp().double(), exact[offset].exp().double()
            gaps.append(float((a - b).abs().max()))
            end_gaps.append(float((a[END] - b[END]).abs()))
            support = b > 0
            kls.append(float((b[support] * (b[support].log() - a[support].clamp(min=1e-30).log())).sum()))
            offset += len(pieces.pieces[token]) if token is not None else 0
        model.zero_grad()
        clock = time.perf_counter()
        logq = next_byte_logps(shim.completion_logits(model, prompt[None], mask[None], sequence,
                                                      torch.ones_like(sequence)), pieces.symbols)
        torch.where(torch.isfinite(logq), logq, torch.zeros_like(logq)).sum().backward()
        times["learner_canonical"] += time.perf_counter() - clock
        model.zero_grad()
        clock = time.perf_counter()
        logq, _ = learner_next_bytes(shim, model, prompt, mask, text, row, pieces, limits)
        torch.where(torch.isfinite(logq), logq, torch.zeros_like(logq)).sum().backward()
        times["learner_exact"] += time.perf_counter() - clock
    times.update(together(shim, model, pieces, rows, limits))
    inside = None if untrained else inside_merged(shim, model, tokenizer, pieces, prompts, max_covers)
    n = len(rows)
    return {"inside_merged": inside, "model": name, "completions": n, "mean_bytes": statistics.mean(len(pieces.text_of(r)) for _, r, _ in rows),
            "ms_per_completion": {key: 1000 * value / n for key, value in times.items()},
            "exact_over_canonical": {"judge": times["judge_exact"] / times["judge_canonical"],
                                     "learner": times["learner_exact"] / times["learner_canonical"],
                                     "judge_together": times["judge_exact_together"] / times["judge_canonical_together"],
                                     "learner_together": times["learner_exact_together"]
                                     / times["learner_canonical_together"]},
            "states_mean": statistics.mean(states), "dropped_max": dropped,
            "canonical_bias": {"max_abs_q_gap": max(gaps), "mean_abs_q_gap": statistics.mean(gaps),
                               "max_end_gap": max(end_gaps), "mean_kl_exact_canonical": statistics.mean(kls)}}


def together(shim, model, pieces, rows, limits) -> dict[str, float]:
    """Both forms over all the completions at once, as a training step runs them (seconds): canonical, one forward of
    the right-padded completions; exact, the texts' enumerations side by side (one forward per round for all) and the
    learner's gradient forward over every text's states in one batch."""
    import torch

    from mutualrl.regimes.core.byte_covers import cover_next_byte_logps, find_covers_together
    from mutualrl.regimes.core.cover_scoring import learner_next_bytes_together, rows_forward
    from mutualrl.regimes.core.next_bytes import next_byte_logps

    width = max(len(prompt) for prompt, _, _ in rows)
    ids = torch.stack([torch.cat([torch.zeros(width - len(p), dtype=torch.long), p]) for p, _, _ in rows])  # [N, P]
    mask = torch.stack([torch.cat([torch.zeros(width - len(p), dtype=torch.long), torch.ones_like(p)])
                        for p, _, _ in rows])  # [N, P]
    stop = shim.eos_token_ids[0]
    sequences = [row + ([stop] if done else []) for _, row, done in rows]
    columns = max(len(sequence) for sequence in sequences)
    completion = torch.tensor([s + [stop] * (columns - len(s)) for s in sequences])  # [N, C]
    completion_mask = torch.tensor([[1] * len(s) + [0] * (columns - len(s)) for s in sequences])  # [N, C]
    texts, given, times = [pieces.text_of(row) for _, row, _ in rows], [row for _, row, _ in rows], {}
    for side in ("judge", "learner"):
        model.zero_grad()
        clock = time.perf_counter()
        with torch.set_grad_enabled(side == "learner"):
            logq = next_byte_logps(shim.completion_logits(model, ids, mask, completion, completion_mask),
                                   pieces.symbols)  # [N, C, 258]
            if side == "learner":
                torch.where(torch.isfinite(logq), logq, torch.zeros_like(logq)).sum().backward()
        times[f"{side}_canonical_together"] = time.perf_counter() - clock
    clock = time.perf_counter()
    with torch.no_grad():
        found = find_covers_together(texts, pieces, rows_forward(shim, model, ids, mask), given, limits.floor,
                                     limits.max_states)
        for covers, text in zip(found, texts, strict=True):
            cover_next_byte_logps(covers, text, pieces)
    times["judge_exact_together"] = time.perf_counter() - clock
    model.zero_grad()
    clock = time.perf_counter()
    learned = learner_next_bytes_together(shim, model, ids, mask, texts, given, pieces, limits)
    sum(torch.where(torch.isfinite(q), q, torch.zeros_like(q)).sum() for q, _ in learned).backward()
    times["learner_exact_together"] = time.perf_counter() - clock
    return times


def inside_merged(shim, model, tokenizer, pieces, prompts: list[str], max_covers: int) -> dict:
    """After the first digit of each two-digit right answer: the canonical form's q (after the prefix's own tokens)
    against the exact q, their END mass and the right second digit's, averaged over the prompts."""
    import torch

    from mutualrl.regimes.core.byte_covers import cover_next_byte_logps, find_covers
    from mutualrl.regimes.core.cover_scoring import model_forward
    from mutualrl.regimes.core.next_bytes import END, next_byte_logps

    figures = {"prompts": 0, "canonical_end": 0.0, "exact_end": 0.0, "canonical_digit": 0.0, "exact_digit": 0.0}
    for prompt in prompts:
        answer = str(eval(prompt[:-1]))  # noqa: S307 - our own digits and operators
        if len(answer) != 2:
            continue
        ids = torch.tensor(tokenizer(prompt, add_special_tokens=False)["input_ids"])  # [P]
        mask = torch.ones_like(ids)
        text = answer.encode()
        digit = pieces.exact(answer[0].encode())[0]  # the first digit's own token (no SentencePiece "▁")
        given = [digit, *pieces.exact(answer[1].encode())[:1]]
        prefix = torch.tensor([[digit, 0]])  # [1, 2] the digit, then a stand-in whose logits are not read
        with torch.no_grad():
            canonical = next_byte_logps(shim.completion_logits(model, ids[None], mask[None], prefix,
                                                               torch.ones_like(prefix)), pieces.symbols)[0, -1].exp()
            covers = find_covers(text, pieces, model_forward(shim, model, ids, mask), given, 0.0, max_covers)
            exact = cover_next_byte_logps(covers, text, pieces)[1].exp()  # [258] after the first digit
        figures["prompts"] += 1
        for name, q in (("canonical", canonical), ("exact", exact)):
            figures[f"{name}_end"] += float(q[END])
            figures[f"{name}_digit"] += float(q[text[1]])
    count = max(figures["prompts"], 1)
    return {key: value if key == "prompts" else value / count for key, value in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6, help="prompts per family")
    parser.add_argument("--samples", type=int, default=4, help="completions per prompt")
    parser.add_argument("--tokens", type=int, default=8, help="most tokens per completion")
    parser.add_argument("--max-covers", type=int, default=64, help="byte-kd's max_covers")
    parser.add_argument("--cover-floor", type=float, default=0.0, help="byte-kd's cover_floor")
    parser.add_argument("--untrained", action="store_true", help="each model's architecture at a random init")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    digits = [(a, b, c) for a in range(1, 10) for b in range(1, 10) for c in range(0, 10)][::37][:args.prompts]
    prompts = [f"{a}+{b}+{c}=" for a, b, c in digits] + [f"{a}+{b}-{c}=" for a, b, c in digits if a + b >= c]
    out = [measure(name, prompts, args.samples, args.tokens, args.seed, args.max_covers, args.cover_floor,
                   args.untrained)
           for name in ("tiny-bpe", "tiny-sp")]
    print(json.dumps({"args": vars(args), "results": out}, indent=1))


if __name__ == "__main__":
    main()
