"""The paper's exact verifier vs math-verify on the offline MATH gold labels (docs/tasks.md).

Paper, App. "Experimental Setup": the answer is the string between the outermost
``\\boxed{}`` tokens, compared *exactly* with the label; "semantically correct answers with
non-matching formatting are counted as incorrect". How much that matters depends on how
models format answers, which needs generations. Without a model, this script measures it on
the gold labels themselves: each label is boxed verbatim and in a few systematic
reformattings a model commonly produces (``\\dfrac``, decimals, spacing, ``\\left(``, a
units suffix, ``x =``), plus a wrong-value control, and both verifiers score every variant.

Prints one JSON line per variant: how many labels it applies to, and how many of those the
exact rule and math-verify accept. Usage::

    PYTHONPATH=src python benchmarks/verifier_agreement.py [--split test500] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

_FRAC = re.compile(r"^(-?)\\frac\{(\d+)\}\{(\d+)\}$")


def _decimal(gold: str) -> str | None:
    """A finite decimal for an integer or an integer fraction label (``\\frac{1}{2}`` -> ``0.5``)."""
    if re.fullmatch(r"-?\d+", gold):
        return f"{gold}.0"
    m = _FRAC.match(gold)
    if not m:
        return None
    value = Fraction(int(m.group(2)), int(m.group(3)))
    den = value.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if den != 1:
        return None  # not a finite decimal
    text = f"{float(value):.10f}".rstrip("0").rstrip(".")
    return m.group(1) + text


def _wrong(gold: str) -> str | None:
    return str(int(gold) + 1) if re.fullmatch(r"-?\d+", gold) else None


# name -> (label -> boxed completion, or None when the reformatting does not apply)
VARIANTS: dict[str, Callable[[str], str | None]] = {
    "verbatim": lambda g: f"The answer is $\\boxed{{{g}}}$.",
    "padded (\\boxed{ g })": lambda g: f"$\\boxed{{ {g} }}$",
    "\\dfrac for \\frac": lambda g: f"$\\boxed{{{g.replace(chr(92) + 'frac', chr(92) + 'dfrac')}}}$"
    if "\\frac" in g else None,
    "decimal (0.5, 7.0)": lambda g: f"$\\boxed{{{d}}}$" if (d := _decimal(g)) else None,
    "spaces removed": lambda g: f"$\\boxed{{{g.replace(' ', '')}}}$" if " " in g else None,
    "space after commas": lambda g: f"$\\boxed{{{re.sub(r',(?! )', ', ', g)}}}$"
    if re.search(r",(?! )", g) else None,
    "\\left( \\right)": lambda g: f"$\\boxed{{\\left{g[:-1]}\\right{g[-1]}}}$"
    if g[:1] in "([" and g[-1:] in ")]" and "\\left" not in g else None,
    "units suffix (\\text{ units})": lambda g: f"$\\boxed{{{g}\\text{{ units}}}}$"
    if re.fullmatch(r"-?\d+(\.\d+)?", g) else None,
    "x = prefix": lambda g: f"$\\boxed{{x = {g}}}$" if re.fullmatch(r"-?\d+(\.\d+)?", g) else None,
    "\\fbox": lambda g: f"$\\fbox{{{g}}}$",
    "wrong value (n+1, control)": lambda g: f"$\\boxed{{{w}}}$" if (w := _wrong(g)) else None,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test500")
    parser.add_argument("--limit", type=int, default=None)
    ns = parser.parse_args()

    from mutualrl.tasks.registry import get_task
    from mutualrl.tasks.verifiers import score_math

    examples = get_task("math").load(ns.split, "offline", ns.limit)
    golds = [ex.answer for ex in examples]
    for name, make in VARIANTS.items():
        started = time.perf_counter()
        applies = exact = equiv = 0
        for gold in golds:
            completion = make(gold)
            if completion is None:
                continue
            applies += 1
            exact += int(score_math(completion, gold, "exact"))
            equiv += int(score_math(completion, gold, "equiv"))
        print(json.dumps({"split": ns.split, "labels": len(golds), "variant": name, "applies": applies,
                          "exact_accepts": exact, "math_verify_accepts": equiv,
                          "seconds": round(time.perf_counter() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
