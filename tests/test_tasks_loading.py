"""Tasks: templates, gold answers, sources (offline package, local files), errors, mixture, reward function."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mutualrl.errors import DataError, UnknownNameError, UsageError
from mutualrl.tasks import (
    EvaluationSplitWarning,
    get_task,
    make_reward_function,
    resolve_suite,
    task_names,
)

BOXED = "Let's think step by step and output the final answer within \\boxed{}."


# Tests never reach for the hub: 'auto' resolves to the offline package.
pytestmark = pytest.mark.usefixtures("offline_hub")


def test_registry_and_suites() -> None:
    names = task_names()
    for name in ("math", "gsm8k", "arc", "arc-easy", "openbookqa", "boolq", "piqa", "hellaswag", "siqa", "qa-mix",
                 "synthetic-arith"):
        assert name in names
    assert resolve_suite("math") == ["math"]
    assert resolve_suite("qa") == ["arc", "openbookqa", "boolq", "piqa", "hellaswag", "siqa"]
    assert resolve_suite("all")[:2] == ["math", "gsm8k"] and len(resolve_suite("all")) == 8
    assert resolve_suite("gsm8k, arc,gsm8k") == ["gsm8k", "arc"]
    with pytest.raises(UnknownNameError, match="gsm8k"):
        resolve_suite("gsm8kk")


# ---------------------------------------------------------------------------------------
# Offline package: every task, the paper's exact templates, gold answers
# ---------------------------------------------------------------------------------------


def test_math_offline_splits_and_gold_from_solution() -> None:
    task = get_task("math")
    test500 = task.load("test500", "offline")
    assert len(test500) == 500
    first = test500[0]
    assert first.prompt_id == "math/test500/00000"
    # The wheel's answer field is mangled ("\\le(3,...\\right)"); the gold is the solution's last box.
    assert first.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert first.prompt.startswith("Convert the point $(0,3)$")
    assert first.prompt.endswith(" " + BOXED)
    assert len(task.load("test", "offline")) == 5000
    with pytest.warns(EvaluationSplitWarning, match="MATH test problems outside MATH-500"):
        train = task.load("train", "offline")
    assert len(train) == 4500
    assert not {e.prompt.split(" Let's think")[0] for e in train} & {e.prompt.split(" Let's think")[0] for e in test500}


def test_real_math500_golds_score_themselves_in_both_modes() -> None:
    """Every real MATH-500 gold, boxed in a completion, scores 1 (strict and equivalence)."""
    task = get_task("math")
    strict = task.with_verifier("exact")
    for ex in task.load("test500", "offline"):
        completion = f"Some reasoning.\nThe final answer is $\\boxed{{{ex.answer}}}$."
        assert strict.score(completion, ex.answer) == 1.0, ex.prompt_id
        assert task.score(completion, ex.answer) == 1.0, ex.prompt_id


def test_real_math500_golds_in_other_notations() -> None:
    """Real golds rewritten (\\dfrac, \\left/\\right dropped) match in equivalence mode only."""
    task = get_task("math")
    strict = task.with_verifier("exact")
    checked = 0
    for ex in task.load("test500", "offline"):
        variant = ex.answer.replace("\\frac", "\\dfrac").replace("\\left", "").replace("\\right", "")
        if variant == ex.answer:
            continue
        completion = f"\\boxed{{{variant}}}"
        assert task.score(completion, ex.answer) == 1.0, (ex.prompt_id, ex.answer, variant)
        assert strict.score(completion, ex.answer) == 0.0, ex.prompt_id
        checked += 1
    assert checked > 50


def test_gsm8k_offline() -> None:
    task = get_task("gsm8k")
    examples = task.load("test", "offline", limit=5)
    assert [e.prompt_id for e in examples] == [f"gsm8k/test/{i:05d}" for i in range(5)]
    assert examples[0].answer == "18"
    assert examples[0].prompt == (
        "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her "
        "friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh duck "
        "egg. How much in dollars does she make every day at the farmers' market? " + BOXED
    )
    assert task.score("... so she makes \\boxed{\\$18} dollars", "18") == 1.0
    assert task.score("\\boxed{18.00}", "18") == 1.0
    assert task.with_verifier("exact").score("\\boxed{\\$18}", "18") == 0.0
    assert len(task.load("test", "offline")) == 1319


def test_arc_template_exact() -> None:
    ex = get_task("arc").load("test", "offline", limit=1)[0]
    assert ex.prompt_id == "arc/test/Mercury_7175875"
    assert ex.answer == "C"
    assert ex.prompt == (
        "An astronomer observes that a planet rotates faster after a meteorite impact. Which is the most likely "
        "effect of this increase in rotation?\n\n"
        "Which option (A-D) is the correct answer?\n" + BOXED + "\n\n"
        "A. Planetary density will decrease.\n"
        "B. Planetary years will become longer.\n"
        "C. Planetary days will become shorter.\n"
        "D. Planetary gravity will become stronger."
    )
    assert len(get_task("arc").load("test", "offline")) == 1172
    assert len(get_task("arc-easy").load("test", "offline")) == 2376


def test_arc_option_range_follows_number_of_options(tmp_path: Path) -> None:
    row = {"id": "q5", "question": "Pick one.", "answerKey": "5",
           "choices": {"text": ["a", "b", "c", "d", "e"], "label": ["1", "2", "3", "4", "5"]}}
    (tmp_path / "test.jsonl").write_text(json.dumps(row) + "\n")
    ex = get_task("arc").load("test", str(tmp_path / "test.jsonl"))[0]
    assert "Which option (A-E) is the correct answer?" in ex.prompt
    assert ex.prompt.endswith("E. e")
    assert ex.answer == "E"  # numeric label "5" -> fifth option


def test_openbookqa_with_and_without_fact(tmp_path: Path) -> None:
    row = {"id": "7-980", "question_stem": "The sun is responsible for", "fact1": "the sun is the source of energy",
           "choices": {"text": ["puppies learning", "plants sprouting", "petals dying", "fish eating"],
                       "label": ["A", "B", "C", "D"]}, "answerKey": "B"}
    path = tmp_path / "obqa.jsonl"
    path.write_text(json.dumps(row) + "\n")
    ex = get_task("openbookqa").load("test", str(path))[0]
    assert ex.prompt == (
        "Fact: the sun is the source of energy\n\nQuestion: The sun is responsible for\n\n"
        "Which option (A-D) is the correct answer?\n" + BOXED + "\n\n"
        "A. puppies learning\nB. plants sprouting\nC. petals dying\nD. fish eating"
    )
    with pytest.warns(UserWarning, match="fact1"):
        offline = get_task("openbookqa").load("test", "offline", limit=2)
    assert offline[0].prompt.startswith("Question: ")


def test_boolq_piqa_hellaswag_siqa_templates() -> None:
    boolq = get_task("boolq").load("test", "offline", limit=1)[0]
    assert boolq.answer == "No"
    assert boolq.prompt.startswith("Passage: All biomass goes through")
    assert boolq.prompt.endswith(
        "\n\nQuestion: does ethanol take more energy make that produces\n\n"
        "Answer the question with Yes or No based on the passage above.\n" + BOXED
    )
    piqa = get_task("piqa").load("test", "offline", limit=1)[0]
    assert piqa.answer == "A"
    assert piqa.prompt.startswith("How do I ready a guinea pig cage for it's new occupants?\n\n"
                                  "Which option (A-B) is the better solution?\n" + BOXED + "\n\nA. Provide")
    assert "\nB. Provide the guinea pig with a cage full of a few inches of bedding made of ripped jeans" in piqa.prompt
    hella = get_task("hellaswag").load("test", "offline", limit=1)[0]
    assert hella.answer == "D"
    assert hella.prompt == (
        "Roof shingle removal: A man is sitting on a roof. He\n\n"
        "Which option (A-D) best completes the sentence?\n" + BOXED + "\n\n"
        "A. is using wrap to wrap a pair of skis.\nB. is ripping level tiles off.\n"
        "C. is holding a rubik's cube.\nD. starts pulling up roofing on a roof."
    )
    siqa = get_task("siqa").load("test", "offline", limit=1)[0]
    assert siqa.answer == "C"  # label "3" is 1-based
    assert siqa.prompt == (
        "Context: Tracy didn't go home that evening and resisted Riley's attacks.\n\n"
        "Question: What does Tracy need to do before this?\n\n"
        "Which option (A-C) is the correct answer?\n" + BOXED + "\n\n"
        "A. make a new plan\nB. Go home and see Riley\nC. Find somewhere to go"
    )


def test_prompt_ids_are_stable_and_unique() -> None:
    for name in ("math", "gsm8k", "arc", "openbookqa", "boolq", "piqa", "hellaswag", "siqa"):
        task = get_task(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = task.load(task.default_eval_split, "offline", limit=50)
            b = get_task(name).load(task.default_eval_split, "auto", limit=50)
        assert [e.prompt_id for e in a] == [e.prompt_id for e in b]
        assert len({e.prompt_id for e in a}) == len(a) == 50
        assert all(e.task == name and e.prompt_id.startswith(name + "/") for e in a)


def test_offline_train_split_warns_evaluation_data() -> None:
    with pytest.warns(EvaluationSplitWarning, match="EVALUATION"):
        rows = get_task("boolq").load("train", "offline", limit=3)
    assert len(rows) == 3
    with pytest.raises(UsageError, match="no split 'dev'"):
        get_task("boolq").load("dev", "offline")


# ---------------------------------------------------------------------------------------
# Local sources and their errors
# ---------------------------------------------------------------------------------------

GSM_ROWS = [
    {"question": "What is 2+3?", "answer": "2+3=5\n#### 5"},
    {"question": "What is 1,000+234?", "answer": "#### 1,234"},
]


def test_local_jsonl_parquet_arrow_and_folders(tmp_path: Path) -> None:
    task = get_task("gsm8k")
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in GSM_ROWS) + "\n")
    table = pa.Table.from_pylist(GSM_ROWS)
    pq.write_table(table, tmp_path / "rows.parquet")
    with pa.ipc.new_stream(str(tmp_path / "rows.arrow"), table.schema) as writer:
        writer.write_table(table)
    (tmp_path / "list.json").write_text(json.dumps(GSM_ROWS))
    folder = tmp_path / "hub_layout" / "data"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "test-00000-of-00001.parquet")
    import datasets

    datasets.Dataset.from_list(GSM_ROWS).save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"test": datasets.Dataset.from_list(GSM_ROWS)}).save_to_disk(str(tmp_path / "saved_dict"))
    sources = ["rows.jsonl", "rows.parquet", "rows.arrow", "list.json", "hub_layout", "saved", "saved_dict"]
    for source in sources:
        examples = task.load("test", str(tmp_path / source))
        assert [e.answer for e in examples] == ["5", "1234"], source
        assert examples[1].prompt_id == "gsm8k/test/00001"
    assert len(task.load("test", str(tmp_path / "rows.jsonl"), limit=1)) == 1


def test_boolq_local_folder_with_hub_split_name(tmp_path: Path) -> None:
    rows = [{"question": "is it", "passage": "It is.", "answer": True}]
    (tmp_path / "validation.jsonl").write_text(json.dumps(rows[0]) + "\n")
    ex = get_task("boolq").load("test", str(tmp_path))  # BoolQ's "test" is its validation split
    assert ex[0].answer == "Yes"


def test_missing_field_names_row_and_field(tmp_path: Path) -> None:
    rows = GSM_ROWS + [{"question": "no answer here"}]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataError, match=r"row 2 has no field 'answer'"):
        get_task("gsm8k").load("test", str(path))
    arc = tmp_path / "arc.jsonl"
    arc.write_text(json.dumps({"id": "x", "question": "q", "choices": {"text": ["a"], "label": ["A"]},
                               "answerKey": "B"}) + "\n")
    with pytest.raises(DataError, match=r"row 0: field 'answerKey' = 'B'"):
        get_task("arc").load("test", str(arc))
    math_path = tmp_path / "math.jsonl"
    math_path.write_text(json.dumps({"problem": "1+1?", "solution": "It is two."}) + "\n")
    with pytest.raises(DataError, match=r"row 0: field 'solution' has no \\boxed"):
        get_task("math").load("test", str(math_path))


def test_bad_files_are_data_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GSM_ROWS[0]) + "\n{not json\n")
    with pytest.raises(DataError, match="line 2 is not valid JSON"):
        get_task("gsm8k").load("test", str(bad))
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="corrupt.parquet"):
        get_task("gsm8k").load("test", str(corrupt))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no data for split 'test'"):
        get_task("gsm8k").load("test", str(empty))
    dup = tmp_path / "dup.jsonl"
    row = {"id": "same", "question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"}
    dup.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match="rows 0 and 1 have the same id"):
        get_task("arc").load("test", str(dup))


def test_hub_source_without_hub_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Offline mode is "no hub" at once; an unreachable hub is the same error after ~25 s of DNS retries.
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(UsageError, match="cannot load hub openai/gsm8k"):
        get_task("gsm8k").load("test", "hub")
    with pytest.raises(UsageError, match="not 'auto', 'offline', 'hub'"):
        get_task("gsm8k").load("test", "no-such-file.jsonl")


# ---------------------------------------------------------------------------------------
# Mixture and reward function
# ---------------------------------------------------------------------------------------


def test_qa_mix_interleaves_and_keeps_task_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mixed = get_task("qa-mix").load("test", "offline", limit=12)
    assert [e.task for e in mixed] == ["arc", "openbookqa", "boolq", "piqa", "hellaswag", "siqa"] * 2
    assert all(e.prompt_id.startswith(e.task + "/test/") for e in mixed)


def test_qa_mix_local_rows_carry_task(tmp_path: Path) -> None:
    rows = [
        {"task": "boolq", "question": "is it", "passage": "p", "answer": False},
        {"task": "piqa", "goal": "g", "sol1": "a", "sol2": "b", "label": 1},
        {"task": "gsm8k", "question": "x", "answer": "#### 1"},
    ]
    path = tmp_path / "mix.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n")
    examples = get_task("qa-mix").load("train", str(path))
    assert [(e.task, e.answer) for e in examples] == [("boolq", "No"), ("piqa", "B")]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataError, match="row 2: task 'gsm8k' is not part of qa-mix"):
        get_task("qa-mix").load("train", str(path))


def test_reward_function_dispatches_on_row_task() -> None:
    reward = make_reward_function("qa-mix")
    assert reward.__name__ == "verifier"
    completions = ["so \\boxed{B}", [{"role": "assistant", "content": "\\boxed{yes}"}], "\\boxed{No}", "nothing"]
    rewards = reward(prompts=["p"] * 4, completions=completions, answer=["B", "Yes", "Yes", "A"],
                     task=["arc", "boolq", "boolq", "siqa"], prompt_id=["a", "b", "c", "d"])
    assert rewards == [1.0, 1.0, 0.0, 0.0]
    strict = make_reward_function(["math", "gsm8k"], verifier="exact")
    assert strict(completions=["\\boxed{\\dfrac12}", "\\boxed{5}"], answer=["\\frac12", "5"],
                  task=["math", "gsm8k"]) == [0.0, 1.0]
    lenient = make_reward_function(get_task("math"))
    assert lenient(completions=["\\boxed{\\dfrac12}"], answer=["\\frac12"], task=None) == [1.0]
    with pytest.raises(DataError, match="row 0 has task 'boolq'"):
        make_reward_function("math")(completions=["x"], answer=["1"], task=["boolq"])
    with pytest.raises(UsageError, match="no 'fuzzy' verifier"):
        make_reward_function("math", verifier="fuzzy")
