"""Answer extraction and checking on real MATH answer forms (paper: outermost \\boxed{}, strict exact match)."""

from __future__ import annotations

import pytest

from mutualrl.tasks import extract_boxed, math_equivalent
from mutualrl.tasks.verifiers import (
    choice_letter,
    completion_text,
    exact_match,
    score_choice,
    score_math,
    score_yes_no,
    yes_no,
)

# ---------------------------------------------------------------------------------------
# extract_boxed
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the answer is $\\boxed{42}$.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        # nested braces
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("$\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}$", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
        # the last boxed answer wins
        ("first \\boxed{1}, then corrected: \\boxed{2}", "2"),
        # outermost, not inner
        ("\\boxed{\\boxed{3}}", "\\boxed{3}"),
        ("\\boxed{x = \\boxed{5}} and later \\boxed{7}", "7"),
        # escaped braces are content
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        # \fbox and the brace-less form of MATH solutions
        ("\\fbox{12}", "12"),
        ("the answer is $\\boxed 5$", "5"),
        # surrounding whitespace inside the box is dropped
        ("\\boxed{  17 }", "17"),
        ("\\boxed{\\text{(B)}}", "\\text{(B)}"),
    ],
)
def test_extract_boxed(text: str, expected: str) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no box here, the answer is 42",
        "\\boxed{\\frac{1}{2}",  # cut off by the length limit: unbalanced
        "\\boxed",
        "boxed{3}",
    ],
)
def test_extract_boxed_none(text: str) -> None:
    assert extract_boxed(text) is None


def test_unbalanced_last_box_falls_back_to_earlier_complete_one() -> None:
    # A completion that boxed an answer and then started another box that was cut off.
    assert extract_boxed("\\boxed{4}. Double-check: \\boxed{4") == "4"


# ---------------------------------------------------------------------------------------
# math_equivalent: real MATH answer forms
# ---------------------------------------------------------------------------------------

EQUIVALENT = [
    # fractions in every notation
    ("\\dfrac{14}{3}", "\\frac{14}{3}"),
    ("\\tfrac{3}{56}", "\\frac{3}{56}"),
    ("\\frac32", "\\frac{3}{2}"),
    ("14/3", "\\frac{14}{3}"),
    ("-\\dfrac{\\pi}{6}", "-\\frac{\\pi}{6}"),
    ("\\frac{243}{625}", "0.3888"),
    # units and \text{}
    ("42 \\text{ inches}", "42"),
    ("5\\text{ cm}", "5"),
    ("12 \\mbox{ centimeters}", "12"),
    ("\\text{Evelyn}", "\\text{Evelyn}"),
    ("Evelyn", "\\text{Evelyn}"),
    # dollars and percent
    ("\\$18", "18"),
    ("18.00", "18"),
    ("10\\%", "10"),
    ("1{,}000", "1000"),
    ("1,000", "1000"),
    # decimals
    ("1.25", "\\frac{5}{4}"),
    (".15", "0.15"),
    ("0.50", "\\frac12"),
    # \left( \right) and spacing
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("( 3 , \\frac{\\pi}{2} )", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    # sqrt forms
    ("3\\sqrt{13}", "\\sqrt{117}"),
    ("11\\sqrt2", "11\\sqrt{2}"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("70 \\sqrt{2}", "70\\sqrt{2}"),
    # ordered tuples and intervals, in order
    ("(1,-2)", "\\left(1, -2\\right)"),
    ("[-2,7]", "[-2, 7]"),
    ("(-\\infty, 3]", "(-\\infty,3]"),
    # equations, degrees, complex numbers, polynomials, sets
    ("x=5", "5"),
    ("90^\\circ", "90"),
    ("6 - 5i", "6-5i"),
    ("x^5 - x^4 + x^3 - x^2 + x - 1", "x^5-x^4+x^3-x^2+x-1"),
    ("\\{3, 5\\}", "\\{5, 3\\}"),
]

NOT_EQUIVALENT = [
    # wrong value
    ("\\frac{14}{5}", "\\frac{14}{3}"),
    ("43", "42"),
    ("3\\sqrt{13}", "13\\sqrt{3}"),
    ("-18", "18"),
    ("0.33", "\\frac{1}{3}"),
    ("6+5i", "6-5i"),
    # wrong order (ordered tuples and intervals)
    ("(\\frac{\\pi}{2}, 3)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("(2,1)", "(1,2)"),
    ("(-2, 7]", "[-2,7]"),
    ("[-2,7)", "[-2,7]"),
    # not an answer
    ("", "5"),
    ("\\text{Bob}", "\\text{Evelyn}"),
]


@pytest.mark.parametrize(("prediction", "gold"), EQUIVALENT)
def test_math_equivalent(prediction: str, gold: str) -> None:
    assert math_equivalent(prediction, gold)


@pytest.mark.parametrize(("prediction", "gold"), NOT_EQUIVALENT)
def test_math_not_equivalent(prediction: str, gold: str) -> None:
    assert not math_equivalent(prediction, gold)


def test_math_equivalent_never_raises_on_garbage() -> None:
    assert not math_equivalent("\\frac{\\frac{", "1")
    assert not math_equivalent("}}}{{{", "x")


# ---------------------------------------------------------------------------------------
# Strict (paper) vs equivalence scoring of completions
# ---------------------------------------------------------------------------------------


def test_strict_exact_match_counts_formatting_differences_as_wrong() -> None:
    completion = "We compute ... so the answer is $\\boxed{\\dfrac{14}{3}}$."
    assert score_math(completion, "\\frac{14}{3}", "equiv") == 1.0
    assert score_math(completion, "\\frac{14}{3}", "exact") == 0.0
    assert score_math(completion, "\\dfrac{14}{3}", "exact") == 1.0
    # Text outside the box is ignored; whitespace inside the box is not significant.
    assert score_math("blah 7 blah \\boxed{ 5 } trailing 9", "5", "exact") == 1.0
    # No box: no reward, whatever the text says.
    assert score_math("the answer is 5", "5", "equiv") == 0.0
    assert exact_match(None, "5") is False


# The paper's rule (App. "Experimental Setup"): the string between the outermost \boxed{}
# tokens must equal the canonical label; "semantically correct answers with non-matching
# formatting are counted as incorrect; additional text outside the \boxed{} tokens is
# ignored". Each case: (completion, gold label, paper's exact rule, math-verify equivalence).
PAPER_RULE = [
    ("so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", 1.0, 1.0),
    ("so $\\boxed{\\dfrac{1}{2}}$.", "\\frac{1}{2}", 0.0, 1.0),
    ("so $\\boxed{\\frac12}$.", "\\frac{1}{2}", 0.0, 1.0),
    ("so $\\boxed{0.5}$.", "\\frac{1}{2}", 0.0, 1.0),
    ("so $\\boxed{0.5}$.", "\\frac12", 0.0, 1.0),
    ("so $\\boxed{1/2}$.", "\\frac{1}{2}", 0.0, 1.0),
    ("$\\boxed{10\\text{ cm}}$", "10", 0.0, 1.0),
    ("$\\boxed{x = 5}$", "5", 0.0, 1.0),
    ("$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0, 1.0),
    ("$\\boxed{(3,\\frac{\\pi}{2})}$", "\\left( 3, \\frac{\\pi}{2} \\right)", 0.0, 1.0),
    # the outermost box is the answer: an inner box makes the string differ (math-verify reads 7)
    ("$\\boxed{\\boxed{7}}$", "7", 0.0, 1.0),
    # text outside the box is ignored; the last outermost box counts
    ("I guess 3. Actually \\boxed{4}, final: \\boxed{5} (not 4)", "5", 1.0, 1.0),
    # only \boxed{...} is the paper's box: \fbox and the brace-less form are not answers
    ("\\fbox{5}", "5", 0.0, 1.0),
    ("$\\boxed 5$", "5", 0.0, 1.0),
    # a wrong value is wrong under both
    ("$\\boxed{\\frac{1}{3}}$", "\\frac{1}{2}", 0.0, 0.0),
    ("the answer is 5", "5", 0.0, 0.0),
]


@pytest.mark.parametrize(("completion", "gold", "exact", "equiv"), PAPER_RULE)
def test_paper_rule_exact_vs_math_verify(completion: str, gold: str, exact: float, equiv: float) -> None:
    assert score_math(completion, gold, "exact") == exact
    assert score_math(completion, gold, "equiv") == equiv


def test_paper_rule_multiple_choice_matches_the_option_letter() -> None:
    # "rewards are computed ... by matching the correct option for multiple-choice tasks"
    assert [score_choice(c, "B", "exact") for c in ("\\boxed{B}", "\\boxed{ B }", "\\boxed{(B)}",
                                                    "\\boxed{B. Planetary days}", "\\fbox{B}")] == [1, 1, 0, 0, 0]
    assert [score_choice(c, "B", "equiv") for c in ("\\boxed{B}", "\\boxed{(B)}", "\\boxed{B. Planetary days}",
                                                    "\\fbox{B}")] == [1, 1, 1, 1]


def test_exact_tasks_show_what_the_paper_rule_extracts() -> None:
    from mutualrl.tasks.registry import get_task

    math = get_task("math")
    assert math.extract("\\fbox{5}") == "5"
    assert math.with_verifier("exact").extract("\\fbox{5}") is None
    assert get_task("qa-mix").with_verifier("exact").extract("$\\boxed 5$ and \\boxed{C}") == "C"


# ---------------------------------------------------------------------------------------
# Multiple choice and yes/no
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "letter"),
    [
        ("B", "B"),
        ("(B)", "B"),
        ("B.", "B"),
        ("\\text{B}", "B"),
        ("\\text{(C)}", "C"),
        ("Option D", "D"),
        ("A. Sunlight is the source of energy", "A"),
        ("b", "B"),
        ("B) quit eating lunch out", "B"),
    ],
)
def test_choice_letter(answer: str, letter: str) -> None:
    assert choice_letter(answer) == letter


@pytest.mark.parametrize("answer", ["Blue", "a cat", "", "42", "none of them"])
def test_choice_letter_none(answer: str) -> None:
    assert choice_letter(answer) is None


def test_choice_letter_respects_option_count() -> None:
    assert choice_letter("C", n_options=3) == "C"
    assert choice_letter("D", n_options=3) is None


def test_score_choice_modes() -> None:
    assert score_choice("reasoning... \\boxed{(B)}", "B") == 1.0
    assert score_choice("reasoning... \\boxed{(B)}", "B", "exact") == 0.0
    assert score_choice("\\boxed{B}", "B", "exact") == 1.0
    assert score_choice("\\boxed{C}", "B") == 0.0
    assert score_choice("B", "B") == 0.0  # no box


def test_yes_no() -> None:
    assert yes_no("yes") == "Yes"
    assert yes_no("\\text{No}.") == "No"
    assert yes_no("True") == "Yes"
    assert yes_no("maybe") is None
    assert score_yes_no("\\boxed{yes}", "Yes") == 1.0
    assert score_yes_no("\\boxed{yes}", "Yes", "exact") == 0.0
    assert score_yes_no("\\boxed{Yes}", "Yes", "exact") == 1.0
    assert score_yes_no("\\boxed{No}", "Yes") == 0.0


def test_completion_text_from_chat_messages() -> None:
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "\\boxed{3}"}]) == "\\boxed{3}"
    assert completion_text({"role": "assistant", "content": "x"}) == "x"


def test_extraction_is_linear_on_adversarial_completions():
    """Issue 42 case 9: '\\boxed{' * 8000 took 28-50 s, a 1 MB completion of boxes 329 s."""
    import time

    from mutualrl.tasks.verifiers import extract_boxed

    started = time.perf_counter()
    assert extract_boxed("\\boxed{" * 8000) is None
    assert extract_boxed("\\boxed{1}" * 60_000 + "\\boxed{" * 60_000) == "1"
    assert extract_boxed("\\fbox" * 100_000 + "\\boxed{7}", strict=True) == "7"
    assert time.perf_counter() - started < 3.0


def test_a_completion_longer_than_its_tokens_can_decode_to_scores_zero_unread(caplog):
    from mutualrl.tasks.reward import make_reward_function, max_completion_chars

    class Vocab:
        def get_vocab(self):
            return {"a": 0, "Ġlongest": 1}

    limit = max_completion_chars(Vocab(), 4)
    assert limit == 4 * 16  # tokens shorter than 16 characters count as 16
    reward = make_reward_function("gsm8k", "exact", max_chars=limit)
    with caplog.at_level("WARNING", logger="mutualrl.reward"):
        scores = reward(completions=["\\boxed{3}", "x" * (limit + 1) + "\\boxed{3}"], answer=["3", "3"])
    assert scores == [1.0, 0.0]
    assert "scored 0, not read" in caplog.text


def test_a_huge_boxed_answer_is_not_given_to_math_verify(caplog):
    from mutualrl.tasks.verifiers import MAX_PARSED_CHARS, math_equivalent

    with caplog.at_level("WARNING", logger="mutualrl.reward"):
        assert not math_equivalent("1+" * MAX_PARSED_CHARS + "1", "2")
    assert "not parsed" in caplog.text
