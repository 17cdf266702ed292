"""How often two policies of a shipped pool split a word of math text differently (docs/thl.md, "Words split
differently").

A word (THL unit) that two tokenizers split into the same tokens is compared token by token by every cross-policy
quantity (OPD's signal, F-TIS's divergence, PRP's per-token weight); one they split differently is compared as a whole
word (docs/regimes.md). This counts, per pair of tokenizers of a shipped pool, the share of words of a fixed math
text sample (worked solutions with multi-digit numbers, as the pools' tasks write them) that THL could not copy token
by token, and the same share among the words that hold a digit. The tokenizers are the offline ones
(``~/.cache/mutualrl``: ``mutualrl assets fetch tokenizer:NAME``; the small pools' from their model folders); a pair
whose tokenizer is not there is listed as not measured.

    PYTHONPATH=src python benchmarks/word_splits.py [--pairs tiny,llama-mist] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys

import numpy as np

TEXTS = [
    "Natalia sold 48 clips in April and half as many in May: 48 / 2 = 24. In total she sold 48 + 24 = 72 clips. "
    "The answer is 72.",
    "Weng earns $12 an hour. For 50 minutes she earns 12 * 50 / 60 = $10. The answer is 10.",
    "The wallet costs $100 and Betty has half, $50. Her parents give $15 and her grandparents twice that, $30. "
    "She still needs 100 - 50 - 15 - 30 = $5. The answer is 5.",
    "Julie read 12 pages yesterday and 2 * 12 = 24 today, 36 pages in all. Of the 120 pages, 120 - 36 = 84 remain; "
    "half of them is 84 / 2 = 42. The answer is 42.",
    "James writes a 3-page letter to 2 friends twice a week: 3 * 2 * 2 = 12 pages a week, so 12 * 52 = 624 pages a "
    "year. The answer is 624.",
    "Let x be the number of apples. Then 3x + 17 = 3,245, so 3x = 3,228 and x = 1,076. Check: 3 * 1076 + 17 = 3245.",
    "The area of a circle of radius 7 is pi * 7^2 = 49pi, about 153.94 square units; its circumference is 14pi, "
    "about 43.98.",
    "Solve 2x^2 - 5x - 3 = 0: the discriminant is 25 + 24 = 49, so x = (5 +- 7) / 4, that is x = 3 or x = -0.5.",
    "A train travels 385 km in 3.5 hours: its average speed is 385 / 3.5 = 110 km/h. At that speed 990 km take "
    "9 hours.",
    "The sum of the first 100 positive integers is 100 * 101 / 2 = 5050; of the first 1000 it is 500500.",
    "20% of 865 is 173, and 865 - 173 = 692. After a further 15% discount: 692 * 0.85 = 588.2.",
    "If f(x) = 4x - 9, then f(13) = 52 - 9 = 43 and f(f(3)) = f(3) = 4 * 3 - 9 = 3.",
]

POOLS = {  # pool -> its policies' tokenizers (the offline vocabulary that is theirs, or the closest one named)
    "tiny": ("gpt2", "mistral-sp"),
    "2qwen": ("qwen2", "qwen3"),
    "4qwen": ("qwen2", "qwen3"),
    "llama-mist": ("llama3", "mistral-sp"),
    "qwen-phi4": ("qwen3", "gpt4o"),
    "hacpo-qwen3-4b-llama3b": ("qwen3", "llama3"),
    "smol": ("model:smollm2-135m", "model:gemma3-270m"),
}
"""3qwen and the hacpo-qwen3-1.7b-4b recipes pair qwen2/qwen3 and qwen3/qwen3 (one vocabulary: nothing split
differently); Phi-4-mini's vocabulary is GPT-4o's o200k with added tokens; Ministral-3b's is Mistral v1's."""

DIGIT = re.compile(r"\d")


def load(name: str):  # type: ignore[no-untyped-def]
    """The offline tokenizer ``name`` (``model:X``: the builtin model X's own), or None where it is not cached."""
    from mutualrl.assets.cache import asset_path
    from mutualrl.assets.tokenizers import load_tokenizer

    try:
        if name.startswith("model:"):
            folder = asset_path("models", name.split(":", 1)[1])
            return load_tokenizer(str(folder)) if (folder / "tokenizer.json").is_file() else None
        return load_tokenizer(name)
    except Exception:  # noqa: BLE001 - a missing or unfetched vocabulary is "not measured", said in the table
        return None


def split_shares(first, second, texts: list[str]) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The words of ``texts`` (THL units) and the share of them two tokenizers split differently (not copied token by
    token by THL), overall and among the words that hold a digit."""
    from mutualrl.thl import align_logprobs, retokenize

    a, b = retokenize(first, texts), retokenize(second, texts)
    result = align_logprobs(texts, [r.spans for r in a], [np.zeros(len(r.spans)) for r in a], [r.spans for r in b])
    words = split = digit_words = digit_split = 0
    for i, text in enumerate(texts):
        units, copied = result.target_units[i], result.target_copied[i]
        starts, ends = result.partitions[i].unit_char_bounds()  # [U], [U]
        for unit in range(int(result.n_units[i])):
            mine = units == unit
            if not mine.any():
                continue
            start, end = starts[unit], ends[unit]
            differs = not bool(copied[mine].all())
            words += 1
            split += differs
            if DIGIT.search(text[start:end]):
                digit_words += 1
                digit_split += differs
    return {"words": words, "split_share": split / words, "digit_words": digit_words,
            "digit_split_share": digit_split / digit_words if digit_words else float("nan")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=",".join(POOLS), help="comma-separated pools (default: every shipped one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per pool instead of a table")
    args = parser.parse_args(argv)
    if not args.json:
        print("| pool | tokenizers | words | split differently | words with a digit | of them split differently |")
        print("|---|---|---:|---:|---:|---:|")
    for pool in args.pairs.split(","):
        first, second = POOLS[pool]
        tokenizers = load(first), load(second)
        if None in tokenizers:
            missing = [n for n, t in zip((first, second), tokenizers, strict=True) if t is None]
            row = {"pool": pool, "tokenizers": [first, second], "not_measured": missing}
            print(json.dumps(row) if args.json else f"| {pool} | {first} / {second} | not measured: "
                  f"{', '.join(missing)} not cached | | | |")
            continue
        shares = split_shares(*tokenizers, TEXTS)
        if args.json:
            print(json.dumps({"pool": pool, "tokenizers": [first, second], **shares}))
        else:
            print(f"| {pool} | {first} / {second} | {shares['words']} | {shares['split_share']:.1%} | "
                  f"{shares['digit_words']} | {shares['digit_split_share']:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
