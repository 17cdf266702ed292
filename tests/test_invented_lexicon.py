"""The ``invented-lexicon`` task as the package runs it, and its warm start (benchmarks/lexicon_warm_start.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_helpers import load_benchmark

from mutualrl.errors import DataError, UsageError
from mutualrl.tasks import invented_lexicon as lexicon
from mutualrl.tasks.registry import get_task, task_groups


def test_families_share_no_word_and_split_keeps_every_word_in_train() -> None:
    books = lexicon.lexicons()
    velish = set(books["velish"][0]) | set(books["velish"][1])
    ombric = set(books["ombric"][0]) | set(books["ombric"][1])
    assert len(velish) == len(ombric) == 32 and not velish & ombric
    for family in lexicon.FAMILY_NAMES:
        parts = lexicon.split(family)
        assert (len(parts["train"]), len(parts["test"])) == (156, 100)
        train_ids = {p.prompt_id for p in parts["train"]}
        assert not train_ids & {p.prompt_id for p in parts["test"]}
        train_words = {w for p in parts["train"] for w in p.source.split()}
        assert train_words == (velish if family == "velish" else ombric)
    assert lexicon.split("velish") == lexicon.split("velish")  # constant seeds: the same split every call


def test_word_order_differs_between_families() -> None:
    adjectives_v, nouns_v = lexicon.lexicons()["velish"]
    adjectives_o, nouns_o = lexicon.lexicons()["ombric"]
    velish = lexicon.phrases("velish")[3 * 16 + 5]
    ombric = lexicon.phrases("ombric")[3 * 16 + 5]
    assert velish.answer == ombric.answer == "black horse"
    assert velish.source == f"{adjectives_v[3]} {nouns_v[5]}" and ombric.source == f"{nouns_o[5]} {adjectives_o[3]}"
    assert velish.prompt == f"Translate from Velish to English: {velish.source}\nEnglish:"
    assert lexicon.family_of(ombric.prompt_id) == "ombric"
    with pytest.raises(DataError):
        lexicon.family_of("arith-add-123")


@pytest.mark.parametrize(("completion", "expected"), [
    (" red cat", 1.0), ("Red Cat.\nmore", 1.0), (" red cat\n", 1.0),
    (" red cats", 0.0), (" cat red", 0.0), ("", 0.0), (" red", 0.0), ("\n red cat", 1.0),
])
def test_verifier_reads_the_first_line(completion: str, expected: float) -> None:
    assert lexicon.score(completion, "red cat") == expected


@pytest.mark.slow  # loads transformers and peft (seconds on a loaded CPU)
def test_answer_loss_equals_the_full_logits_loss_on_answer_tokens() -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mutualrl.pools.tiny import tiny_model_dir

    bench = load_benchmark("lexicon_warm_start")
    folder = tiny_model_dir("tiny-sp")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=bench.LORA_TARGETS, task_type="CAUSAL_LM"))
    rows = bench.encode_rows(tokenizer, lexicon.split("ombric")["train"][:3])
    pad = tokenizer.pad_token_id or tokenizer.eos_token_id
    gathered = bench.answer_loss(model, rows, pad)
    # the same loss from every position's logits, prompt and padding labelled -100
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad)  # (B, T)
    labels = torch.full((len(rows), width), -100)  # (B, T)
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    for b, (ids, n_answer) in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        labels[b, len(ids) - n_answer: len(ids)] = torch.tensor(ids[-n_answer:])
        mask[b, : len(ids)] = 1
    full = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
    assert rows[0][0][-1] == tokenizer.eos_token_id  # the answer ends with the model's end of sequence
    assert torch.allclose(gathered, full, atol=1e-5)


def test_seed_verdict_needs_each_weak_family_a_gap_below_its_peer() -> None:
    bench = load_benchmark("lexicon_warm_start")
    weak_of = {"smol": "ombric", "gemma": "velish"}
    met = bench.seed_verdict({"smol": {"velish": 0.8, "ombric": 0.0}, "gemma": {"velish": 0.1, "ombric": 0.3}},
                             weak_of)
    assert all(check["met"] for check in met.values())
    short = bench.seed_verdict({"smol": {"velish": 0.8, "ombric": 0.01}, "gemma": {"velish": 0.1, "ombric": 0.3}},
                               weak_of)
    assert not short["smol weak on ombric"]["met"] and short["gemma weak on velish"]["met"]


# -- the task as the package runs it: registered, per family, scored as the warm start measured it ----------------

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "learning-real-pool" / "try2"


def test_task_is_registered_and_holds_out_the_warm_starts_prompts_in_its_order() -> None:
    bench = load_benchmark("lexicon_warm_start")
    task = get_task("invented-lexicon")
    test = task.load("test")
    assert [(e.prompt_id, e.prompt, e.answer) for e in test] == [(r.prompt_id, r.prompt, r.answer)
                                                                 for r in bench.held_out()]
    assert [task.group_of(e) for e in test[:4]] == ["velish", "ombric", "velish", "ombric"]  # any prefix balanced
    assert task_groups("invented-lexicon", test) == {e.prompt_id: e.prompt_id.split("-")[1] for e in test}
    train = task.load("train")
    assert len(train) == 312 and not {e.prompt_id for e in train} & {e.prompt_id for e in test}
    assert task.load("test", limit=3) == test[:3] and task.answer_text("red cat") == " red cat"
    with pytest.raises(UsageError, match="no split 'validation'"):
        task.load("validation")
    with pytest.raises(UsageError, match="task.source must be unset"):
        task.check_source("some/hub-dataset")


def test_task_scores_the_warm_starts_recorded_completions_as_the_script_did() -> None:
    """400 real greedy completions of the two warm-started models (try 2, seed 1): the package's scoring (the task's
    verifier through evaluation's scorer, what validation runs) gives each the script's score."""
    from mutualrl.evaluation.generate import score_examples
    from mutualrl.evaluation.results import ModelEvalResult

    examples = {e.prompt_id: e for e in get_task("invented-lexicon").load("test")}
    for name in ("smollm2-135m-velish-seed1", "gemma3-270m-ombric-seed1"):
        records = ModelEvalResult.load(RESULTS / f"{name}-eval.json").records
        scored = score_examples([examples[r.prompt_id] for r in records], [r.completion for r in records])
        assert [s.score for s in scored] == [r.score for r in records]
        assert {r.score for r in records} == {0.0, 1.0}  # both outcomes occur: the comparison can fail
        assert [s.extracted for s in scored] == [r.extracted or None for r in records]
