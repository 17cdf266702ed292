"""THL alignment speed vs one batched encode, and vs the paper's reference algorithm.

A realistic batch: ``--n`` responses of 200-3000 source tokens cut from the built-in
corpus (shuffled concatenations), source ids = the source tokenizer's continuation
encoding (what a policy would have generated), seeded synthetic log-probs.

Timed (medians over ``--repeats`` rounds, same process, side by side):

- ``encode_both``: one batched encode of the texts with each tokenizer (the floor: THL
  must at least retokenize);
- ``thl``: the whole THL path -- source spans from the generated ids
  (``batch_decode_with_spans``), target retokenization (``retokenize``), alignment
  (``align_logprobs``);
- ``paper_reference``: Alg. PerTokenWordMapBySegments + WordAlignLogProbs
  (`benchmarks/thl_paper_reference.py`), on ``--ref-n`` of the responses (it is slow),
  scaled per token.

The three are interleaved round by round, so machine noise hits them alike.

Prints JSON: times, ratios (targets: thl/encode_both <= 1.5, reference/thl >= 20),
tokens per second, and each method's conservation loss (sum over sequences of
|source mass - aligned mass|, the paper's claimed-zero quantity).

    PYTHONPATH=src python benchmarks/thl_speed.py --source qwen3 --target phi3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def build_batch(tokenizer, corpus: list[str], n: int, lo: int, hi: int, seed: int) -> list[str]:
    from mutualrl.thl.retokenize import retokenize

    rng = np.random.default_rng(seed)
    pool = "\n\n".join(corpus[j] for j in rng.permutation(len(corpus)))
    pool_tok = retokenize(tokenizer, [pool])[0]
    texts = []
    for _ in range(n):
        length = int(rng.integers(lo, hi + 1))
        # Repeat the pool until it is long enough, then cut at a token boundary.
        k = max(1, -(-length // max(len(pool_tok.ids), 1)))
        text = "\n\n".join([pool] * (k + 1))
        spans = retokenize(tokenizer, [text])[0].spans
        start_tok = int(rng.integers(0, max(len(pool_tok.ids) // 2, 1)))
        start, end = int(spans[start_tok, 0]), int(spans[min(start_tok + length, len(spans)) - 1, 1])
        texts.append(text[start:end])
    return texts


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="qwen3")
    parser.add_argument("--target", default="phi3")
    parser.add_argument("--n", type=int, default=64, help="responses in the batch")
    parser.add_argument("--min-tokens", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds (medians reported)")
    parser.add_argument("--ref-n", type=int, default=12, help="responses timed with the (slow) paper reference")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from mutualrl.assets.tokenizers import load_tokenizer
    from mutualrl.thl import align_logprobs, batch_decode_with_spans, retokenize
    from mutualrl.thl.corpus import builtin_corpus
    from thl_paper_reference import word_align_logprobs
    from mutualrl.thl.retokenize import continuation_encoder
    from mutualrl.thl.spans import byte_table

    src_tok, tgt_tok = load_tokenizer(args.source), load_tokenizer(args.target)
    t0 = time.perf_counter()
    for tok in (src_tok, tgt_tok):
        byte_table(tok)
        continuation_encoder(tok)
    setup_s = time.perf_counter() - t0

    texts = build_batch(src_tok, builtin_corpus(), args.n, args.min_tokens, args.max_tokens, args.seed)
    src_ids = [r.ids for r in retokenize(src_tok, texts)]
    rng = np.random.default_rng(args.seed)
    src_lp = [(-rng.uniform(0, 8, len(i))).astype(np.float32) for i in src_ids]
    n_src = sum(len(i) for i in src_ids)

    src_backend, tgt_backend = src_tok.backend_tokenizer, tgt_tok.backend_tokenizer

    def encode_both() -> None:
        src_backend.encode_batch(texts, add_special_tokens=False)
        tgt_backend.encode_batch(texts, add_special_tokens=False)

    result_holder: dict = {}

    def thl() -> None:
        decoded = batch_decode_with_spans(src_tok, src_ids)
        tgt = retokenize(tgt_tok, [d.text for d in decoded])
        result_holder["aligned"] = align_logprobs([d.text for d in decoded], [d.spans for d in decoded], src_lp,
                                                  [t.spans for t in tgt])
        result_holder["tgt"] = tgt

    ref_n = min(args.ref_n, args.n)
    ref_tokens = sum(len(i) for i in src_ids[:ref_n])
    ref_holder: dict = {}

    def reference() -> None:
        ref_holder["vals"] = word_align_logprobs(texts[:ref_n], src_lp[:ref_n],
                                                 [len(t.ids) for t in result_holder["tgt"][:ref_n]], src_tok, tgt_tok)

    thl()  # warm-up (and the target lengths the reference needs)
    # Interleave the three measurements so machine noise hits them alike; report medians.
    times: dict[str, list[float]] = {"encode": [], "thl": [], "ref": []}
    for _ in range(args.repeats):
        for key, fn in (("encode", encode_both), ("thl", thl), ("ref", reference)):
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    t_encode, t_thl = statistics.median(times["encode"]), statistics.median(times["thl"])
    t_ref = statistics.median(times["ref"]) * n_src / max(ref_tokens, 1)  # scaled to the batch (linear in tokens)
    aligned, tgt, ref_vals = result_holder["aligned"], result_holder["tgt"], ref_holder["vals"]
    n_tgt = sum(len(t.ids) for t in tgt)

    def loss(vals: list[np.ndarray], k: int) -> float:
        return float(sum(abs(float(np.sum(src_lp[i], dtype=np.float64)) - float(np.sum(vals[i], dtype=np.float64)))
                         for i in range(k)))

    thl_loss = loss(aligned.values, args.n)
    out = {
        "source": args.source, "target": args.target, "n_responses": args.n,
        "source_tokens": n_src, "target_tokens": n_tgt,
        "setup_s (byte tables + encoders, once per tokenizer)": round(setup_s, 3),
        "encode_both_s": round(t_encode, 4),
        "thl_s": round(t_thl, 4),
        "paper_reference_s (scaled from %d responses)" % ref_n: round(t_ref, 3),
        "thl_over_encode_both": round(t_thl / t_encode, 3),
        "reference_over_thl": round(t_ref / t_thl, 1),
        "thl_tokens_per_s": round(n_src / t_thl),
        "reference_tokens_per_s": round(n_src / t_ref),
        "thl_conservation_loss_nats_total": thl_loss,
        "thl_residual_total": float(np.abs(aligned.residual).sum()),
        "paper_reference_conservation_loss_nats_per_seq": loss(ref_vals, ref_n) / ref_n,
        "targets": {"thl_over_encode_both": "<= 1.5", "reference_over_thl": ">= 20"},
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
