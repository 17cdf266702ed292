"""What ``mutualrl thl-check``'s numbers mean for a pair of policies, in plain lines after its tables.

- Src→Aligned and the prefix leak are THL's own error: the source's log-prob mass per unit (word, or CJK
  character) against what THL put on the target's tokens. Under the limits, THL moves a peer's log-probs onto this
  tokenizer without loss; over them, the regimes that read aligned log-probs (PRP, OPD, opd-sgt) would train on
  mass that is not the peer's.
- Aligned→Target (with a target model) is the two models' disagreement on the same text, per unit: not THL's error.
- The importance ratios (with both models): the share of tokens whose ratio lies outside 1 ± eps, the band a
  clipped ratio keeps; near 1, the peer's responses are mostly clipped for a ratio-weighted regime on this pair,
  while the shuffled-prompt and broken-alignment rows are controls THL's own row should stay below.
"""

from __future__ import annotations

from typing import Any

COUNTS = ("Texts: the texts read (each scored whole as a response). Units: the words (CJK: characters) that got a "
          "target token, over all texts. Importance ratios: the texts over 8 characters, each split into a prompt "
          "(about its first 30%) and the response scored (responses).")
"""What the tables' counts are."""


def pair_verdict(row: dict[str, Any], max_word_err: float, max_prefix_leak: float) -> str:
    """One line for one conservation row: THL's own error against the limits, then the models' disagreement."""
    pair = f"{row['source']} -> {row['target']}"
    worst, leak = row["src_to_aligned_max"], row["prefix_leak_max"]
    if worst <= max_word_err and leak <= max_prefix_leak:
        line = (f"{pair}: THL conserves each unit's log-prob mass on these {row['n_texts']} texts (worst unit "
                f"{worst:.2g} nats, prefix leak {leak:.2g}, under {max_word_err:g} and {max_prefix_leak:g}): a peer's "
                "log-probs reach this tokenizer without loss")
    else:
        line = (f"{pair}: THL loses mass on these texts (worst unit {worst:.2g} nats, limit {max_word_err:g}; prefix "
                f"leak {leak:.2g}, limit {max_prefix_leak:g}): the regimes that read aligned log-probs (PRP, OPD, "
                "opd-sgt) would train on mass that is not the peer's; the failing texts are worth a look")
    mae = row.get("aligned_to_target_mae")
    if mae is not None:
        line += (f"; the two models differ by {mae:.3g} nats per unit on average (Aligned→Target: how differently "
                 "they score the same words, not THL's error; 0 for one model against itself)")
    return line


def ratio_verdict(rows: list[dict[str, Any]], eps: float = 0.2) -> list[str]:
    """One line per pair of the importance-ratio table: THL's clip rate, and whether it is below its controls."""
    lines = []
    for row in rows:
        if row.get("denominator") != "thl_aligned":
            continue
        if "token_clip_rate" not in row:
            lines.append(f"{row['source']} -> {row['target']}: no importance ratio: no text is over 8 characters, so "
                         "none splits into a prompt and a response (longer texts show them)")
            continue
        pair = (row["source"], row["target"])
        controls = [r.get("token_clip_rate") for r in rows if (r["source"], r["target"]) == pair
                    and r.get("denominator") != "thl_aligned" and r.get("token_clip_rate") is not None]
        rate = row["token_clip_rate"]
        below = (" and below its controls' " + " and ".join(f"{c:.2f}" for c in controls)
                 if controls and rate < min(controls) else
                 (", not below its controls' " + " and ".join(f"{c:.2f}" for c in controls) if controls else ""))
        use = ("most of the peer's tokens are clipped: a ratio-weighted regime (PRP) carries little of this peer; "
               "SGT's imitation reads no ratio" if rate >= 0.5 else
               "most of the peer's tokens keep their ratio: a ratio-weighted regime (PRP) can use this peer")
        lines.append(f"{pair[0]} -> {pair[1]}: {rate:.0%} of {row['n_tokens']} tokens of {row['n_responses']} "
                     f"responses have an importance ratio outside 1 ± {eps:g}{below}; {use}")
    return lines
