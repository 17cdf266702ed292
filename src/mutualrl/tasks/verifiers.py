"""Answer extraction and answer checking: the built-in tasks' verifiers.

Paper, App. "Experimental Setup": every task asks for a chain of thought with the final
answer in ``\\boxed{}``; the verifier extracts the string between the outermost
``\\boxed{}`` tokens and compares it *exactly* with the canonical label ("semantically
correct answers with non-matching formatting are counted as incorrect; additional text
outside the boxed tokens is ignored").

Three checks are provided, selectable per task (``task.verifier`` in a recipe):

- ``exact`` -- the paper's strict rule: the content of the last outermost ``\\boxed{...}``
  (only that command with braces: no ``\\fbox``, no brace-less ``\\boxed 5``), stripped of
  surrounding whitespace, equals the label; for multiple-choice tasks the label is the option
  letter, so ``\\boxed{B}`` is right and ``\\boxed{(B)}`` wrong.
- ``equiv`` -- mathematical equivalence with ``math-verify`` (``\\dfrac{1}{2}`` = ``0.5``,
  ``10\\text{ cm}`` = ``10``, ``\\left( 3, \\frac{\\pi}{2} \\right)`` = ``(3,\\frac{\\pi}{2})``, ...);
  the default for MATH and GSM8K.
- for multiple-choice and yes/no tasks, ``equiv`` means forgiving *choice matching*
  (``(B)``, ``B.``, ``\\text{B}``, ``B. Planetary days...`` all pick option B; ``yes``,
  ``\\text{Yes}`` pick Yes); it is their default.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

VERIFIER_MODES = ("default", "exact", "equiv")

MAX_PARSED_CHARS = 2000
"""A boxed answer longer than this is not given to math-verify (no real answer is that long)."""


# ---------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------


_COMMAND_RE = {False: re.compile(r"\\(?:boxed|fbox)"), True: re.compile(r"\\boxed")}
_BRACE_RE = re.compile(r"\\[{}]|[{}]")  # an escaped brace (\{ or \}) is content, not structure
_BRACELESS_RE = re.compile(r" +([^\s$]+)")


def _matching_braces(text: str) -> dict[int, int]:
    """Position of each ``{`` that is closed -> position of its ``}``, in one pass over the braces (so
    extraction stays linear on ``'\\boxed{' * 8000``, where scanning from every opening was quadratic)."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for brace in _BRACE_RE.finditer(text):
        if brace.end() - brace.start() == 2:
            continue
        if brace.group() == "{":
            stack.append(brace.start())
        elif stack:
            closing[stack.pop()] = brace.start()
    return closing


def _boxed_spans(text: str, strict: bool = False) -> list[tuple[int, int, str]]:
    """Every well-formed ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\boxed 5``) as (start, end, content), not looking
    inside one already found; linear in ``len(text)``.

    ``strict``: only ``\\boxed{...}`` (the paper's ``\\boxed{}`` tokens).
    """
    spans: list[tuple[int, int, str]] = []
    closing: dict[int, int] | None = None
    resume_at = 0
    for command in _COMMAND_RE[strict].finditer(text):
        start, j = command.start(), command.end()
        if start < resume_at:
            continue  # inside the previous span
        if j < len(text) and text[j] == "{":
            closing = _matching_braces(text) if closing is None else closing
            k = closing.get(j)
            if k is not None:  # unbalanced (a completion cut by the length limit): not an answer
                spans.append((start, k + 1, text[j + 1 : k]))
                resume_at = k + 1
        elif j < len(text) and text[j] == " " and not strict:
            # "\boxed 5": the MATH solutions' brace-less form; the argument ends at whitespace or "$".
            m = _BRACELESS_RE.match(text, j)
            if m:
                spans.append((start, m.end(), m.group(1)))
                resume_at = m.end()
    return spans


def extract_boxed(text: str, strict: bool = False) -> str | None:
    """The content of the last outermost ``\\boxed{...}`` in ``text`` (nested braces allowed).

    "Outermost" (paper, App. "Experimental Setup"): in ``\\boxed{\\boxed{3}}`` the answer is
    ``\\boxed{3}`` (VERL's ``last_boxed_only_string`` would take the inner ``3``); "last":
    when a completion boxes several things, the final one is the answer. Returns ``None``
    when there is no complete boxed expression (an unbalanced one, e.g. cut off by the
    length limit, does not count).

    ``strict`` (the ``exact`` verifier): only ``\\boxed{...}`` counts, as the paper states.
    Otherwise ``\\fbox{...}`` and MATH's brace-less ``\\boxed 5`` count too (needed to read
    gold answers from MATH reference solutions).
    """
    if not text:
        return None
    outermost: list[tuple[int, int, str]] = []
    for span in _boxed_spans(text, strict):
        if outermost and span[0] < outermost[-1][1]:
            continue  # nested inside the previous one
        outermost.append(span)
    if not outermost:
        return None
    return outermost[-1][2].strip()


def completion_text(completion: Any) -> str:
    """A completion as plain text: TRL passes strings, or chat message lists for conversational data."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, Sequence):
        parts = [
            m.get("content", "")
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        ]
        return "".join(str(p) for p in parts)
    return str(completion)


# ---------------------------------------------------------------------------------------
# Strict exact match (the paper's rule)
# ---------------------------------------------------------------------------------------


def exact_match(extracted: str | None, gold: str) -> bool:
    """The paper's strict check: the boxed string equals the label (surrounding whitespace ignored)."""
    return extracted is not None and extracted.strip() == str(gold).strip()


# ---------------------------------------------------------------------------------------
# Mathematical equivalence (math-verify)
# ---------------------------------------------------------------------------------------

_MV_LOGGERS = ("math_verify", "math_verify.parser", "math_verify.grader", "latex2sympy2_extended")


def _quiet_math_verify() -> None:
    # math-verify logs a warning on every call made with timeouts disabled (our non-main-thread case).
    for name in _MV_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def _light_normalise(answer: str) -> str:
    """Formatting that never changes a value: spaces, ``\\left``/``\\right``, ``\\dfrac``, ``\\!``, a final period."""
    s = answer.strip()
    s = re.sub(r"\\(left|right)\b\s*", "", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = s.replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", "")
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


def math_equivalent(prediction: str, gold: str) -> bool:
    """Whether answer string ``prediction`` is mathematically equal to ``gold`` (both without ``\\boxed``).

    Uses ``math-verify`` (HF's verifier for MATH-style answers: fractions in every notation,
    decimals, ``\\sqrt``, units and ``\\text{}``, dollars and percent, degrees, tuples and
    intervals in order, sets, equations like ``x=5`` against ``5``, matrices), after a fast
    path for answers equal up to value-preserving formatting. Order matters for tuples and
    intervals: ``(1,2)`` is not ``(2,1)``. Never raises: an unparsable answer is not equal.
    """
    if prediction is None:
        return False
    prediction, gold = str(prediction), str(gold)
    if not prediction.strip():
        return False
    if _light_normalise(prediction) == _light_normalise(gold):
        return True
    if len(prediction) > MAX_PARSED_CHARS:  # sympy is unbounded in time on it (no timeout off the main thread)
        logging.getLogger("mutualrl.reward").warning("an answer of %d characters is not parsed (more than %d): "
                                                     "not equal", len(prediction), MAX_PARSED_CHARS)
        return False
    try:
        from math_verify import LatexExtractionConfig, parse, verify
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise RuntimeError("math-verify is required for the 'equiv' verifier: pip install math-verify") from err
    _quiet_math_verify()
    # math-verify's timeouts use SIGALRM, which only works in the main thread.
    main = threading.current_thread() is threading.main_thread()
    timeout = 5 if main else None
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    try:
        gold_parsed = parse("\\boxed{" + gold + "}", extraction_config=config, parsing_timeout=timeout)
        pred_parsed = parse("\\boxed{" + prediction + "}", extraction_config=config, parsing_timeout=timeout)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 - sympy can fail in many ways on model output; that is "not equal"
        return False


# ---------------------------------------------------------------------------------------
# Multiple choice and yes/no
# ---------------------------------------------------------------------------------------

_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textit|mbox)\s*\{([^{}]*)\}")


def _unwrap(answer: str) -> str:
    s = answer.strip()
    for _ in range(3):
        s2 = _TEXT_WRAPPER.sub(r"\1", s)
        if s2 == s:
            break
        s = s2
    return s.strip().strip("$").strip()


def choice_letter(answer: str | None, n_options: int | None = None) -> str | None:
    """The option letter an answer names: ``B``, ``(B)``, ``B.``, ``\\text{B}``, ``Option B``, ``B) text``.

    Returns the upper-case letter, or ``None`` when the answer names no single option (a
    letter beyond ``n_options`` does not count).
    """
    if answer is None:
        return None
    s = _unwrap(answer)
    s = re.sub(r"^(?:option|answer|choice)\s*[:\-]?\s*", "", s, flags=re.IGNORECASE)
    m = re.match(r"^[(\[]?\s*([A-Za-z])\s*[)\]]?(?:$|[\s.:,)\-])", s)
    if not m:
        return None
    letter = m.group(1)
    # A lone lower-case word like "a" is accepted only when it is the whole answer.
    if letter.islower() and len(s.strip("()[]. ")) > 1:
        return None
    letter = letter.upper()
    if n_options is not None and not (0 <= ord(letter) - ord("A") < n_options):
        return None
    return letter


def yes_no(answer: str | None) -> str | None:
    """``Yes`` or ``No`` from an answer like ``yes``, ``\\text{No}``, ``Yes.``, ``True``; else ``None``."""
    if answer is None:
        return None
    s = _unwrap(answer).strip().rstrip(".!").strip().lower()
    if s in ("yes", "true", "y"):
        return "Yes"
    if s in ("no", "false", "n"):
        return "No"
    return None


# ---------------------------------------------------------------------------------------
# Scorers (completion text -> reward), one per answer kind
# ---------------------------------------------------------------------------------------


def check_mode(mode: str) -> str:
    if mode not in VERIFIER_MODES:
        from mutualrl.errors import UsageError

        raise UsageError(f"unknown verifier {mode!r}; expected one of {', '.join(VERIFIER_MODES)}")
    return mode


def score_boxed(completion: str, gold: str, mode: str, equivalent: Callable[[str, str], bool]) -> float:
    """1.0 when the last boxed answer of ``completion`` is ``gold``: exactly, or by ``equivalent(answer, gold)``."""
    extracted = extract_boxed(completion, strict=mode == "exact")
    if extracted is None:
        return 0.0
    if mode == "exact":
        return float(exact_match(extracted, gold))
    return float(equivalent(extracted, gold))


def score_math(completion: str, gold: str, mode: str = "equiv") -> float:
    """1.0 when the last boxed answer of ``completion`` matches ``gold`` (exact or math-equivalent)."""
    return score_boxed(completion, gold, mode, math_equivalent)


def score_choice(completion: str, gold: str, mode: str = "equiv", n_options: int | None = None) -> float:
    """1.0 when the boxed answer names option ``gold`` (a letter)."""
    letter = str(gold).strip().upper()
    return score_boxed(completion, gold, mode, lambda answer, _: choice_letter(answer, n_options) == letter)


def score_yes_no(completion: str, gold: str, mode: str = "equiv") -> float:
    """1.0 when the boxed answer says ``gold`` (``Yes`` or ``No``)."""
    return score_boxed(completion, gold, mode, lambda answer, g: yes_no(answer) == yes_no(g))
