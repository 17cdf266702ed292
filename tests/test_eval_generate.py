"""Greedy evaluation (transformers backend, vLLM glue), result files, and `mutualrl eval` on tiny models."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.cli.main import app
from mutualrl.errors import DataError
from mutualrl.evaluation.generate import (
    evaluate_examples,
    evaluate_examples_vllm,
    prompt_token_ids,
    resolve_chat_template,
)
from mutualrl.evaluation.results import (
    ModelEvalResult,
    PromptResult,
    load_many,
    load_results,
    markdown_table,
    save_eval_file,
)
from mutualrl.pools.greedy import decode_completion, generate_greedy
from mutualrl.tasks import get_task
from mutualrl.tasks.base import TaskExample

CHAT_TEMPLATE = (
    "{% for m in messages %}<s>[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


pytestmark = pytest.mark.usefixtures("offline_hub")


def tiny_llama(tokenizer, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        initializer_range=0.5,  # well-separated logits: greedy choices do not hinge on float noise
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny random Llamas saved with real tokenizers: GPT-2 BPE (plain) and Mistral SentencePiece (chat)."""
    root = tmp_path_factory.mktemp("models")
    folders = {}
    for name, tok_name, seed in (("tiny-bpe", "gpt2", 0), ("tiny-sp", "mistral-sp", 1)):
        tok = load_tokenizer(tok_name)
        folder = root / name
        tiny_llama(tok, seed).save_pretrained(folder)
        tok.save_pretrained(folder)
        if name == "tiny-sp":
            cfg = json.loads((folder / "tokenizer_config.json").read_text())
            cfg["chat_template"] = CHAT_TEMPLATE
            (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
        folders[name] = folder
    return folders


def some_examples() -> list[TaskExample]:
    return (get_task("math").load("test500", "offline", limit=3) + get_task("gsm8k").load("test", "offline", limit=2)
            + get_task("arc").load("test", "offline", limit=2))


# ---------------------------------------------------------------------------------------
# transformers backend
# ---------------------------------------------------------------------------------------


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_batched_left_padded_greedy_matches_one_prompt_at_a_time() -> None:
    tok = load_tokenizer("gpt2")
    model = tiny_llama(tok, 0)
    prompts = [prompt_token_ids(tok, ex.prompt, False) for ex in some_examples()]
    assert len({len(p) for p in prompts}) > 3  # different lengths: padding matters
    batched = generate_greedy(model, tok, prompts, max_new_tokens=10, batch_size=4)
    single = generate_greedy(model, tok, prompts, max_new_tokens=10, batch_size=1)
    assert batched == single
    # ... and equals a plain unpadded generate call.
    ids = torch.tensor([prompts[0]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=10,
                         pad_token_id=tok.eos_token_id)
    assert single[0] == tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


class ScriptedLM(torch.nn.Module):
    """A 'model' whose greedy output is scripted per prompt text: reply, EOS, then junk that must be dropped."""

    def __init__(self, tokenizer, script: dict[str, str]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.tok = tokenizer
        self.script = script
        self.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id)
        self.config = SimpleNamespace(_name_or_path="scripted-lm")
        self.calls = []

    def generate(self, input_ids, attention_mask, generation_config):
        assert generation_config.do_sample is False
        self.calls.append(input_ids.shape[0])
        rows = []
        for ids, mask in zip(input_ids, attention_mask, strict=True):
            assert torch.all(mask[1:] >= mask[:-1]), "padding must be on the left"
            prompt = self.tok.decode(ids[mask.bool()].tolist())
            reply = self.tok(self.script.get(prompt, "I do not know."), add_special_tokens=False)["input_ids"]
            junk = self.tok(" \\boxed{junk after eos}", add_special_tokens=False)["input_ids"]
            new = (reply + [self.tok.eos_token_id] + junk)[: generation_config.max_new_tokens]
            new += [generation_config.pad_token_id] * (generation_config.max_new_tokens - len(new))
            rows.append(new)
        return torch.cat([input_ids, torch.tensor(rows, dtype=input_ids.dtype)], dim=1)


def test_scores_are_mapped_back_to_their_prompts() -> None:
    tok = load_tokenizer("gpt2")
    examples = some_examples()
    # Correct answers for examples 0, 3 and 5 only (one math, one gsm8k, one arc), in varied notation.
    script = {
        examples[0].prompt: "r = 3 and theta = pi/2, so \\boxed{\\left( 3, \\dfrac{\\pi}{2} \\right)}",
        examples[1].prompt: "\\boxed{p + q}",
        examples[3].prompt: "She makes \\boxed{\\$18}.",
        examples[5].prompt: "The answer is \\boxed{(C)}",
        examples[6].prompt: "\\boxed{A}",
    }
    model = ScriptedLM(tok, script)
    model.train()
    seen = []
    result = evaluate_examples(model, tok, examples, max_new_tokens=64, batch_size=3, chat_template=False,
                               progress=seen.append, policy="p0", step=5)
    assert model.training, "train mode is restored"
    assert model.calls == [3, 3, 1] and seen == [3, 3, 1]
    assert [r.prompt_id for r in result.records] == [e.prompt_id for e in examples]
    assert [r.score for r in result.records] == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert result.records[0].extracted == "\\left( 3, \\dfrac{\\pi}{2} \\right)"
    assert result.records[2].completion == "I do not know."  # cut at EOS, junk dropped
    assert result.records[2].extracted is None
    assert result.reward_at_1 == pytest.approx(3 / 7)
    assert result.reward_at_1_by_task() == {"math": pytest.approx(1 / 3), "gsm8k": 0.5, "arc": 0.5}
    assert result.metrics() == {"eval/n": 7, "eval/reward@1": pytest.approx(3 / 7),
                                "eval/math/reward@1": pytest.approx(1 / 3), "eval/gsm8k/reward@1": 0.5,
                                "eval/arc/reward@1": 0.5}
    strict = evaluate_examples(model, tok, examples, max_new_tokens=64, batch_size=8, chat_template=False,
                               verifier="exact")
    assert [r.score for r in strict.records] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_decode_completion_and_chat_template_resolution() -> None:
    tok = load_tokenizer("gpt2")
    ids = tok("abc", add_special_tokens=False)["input_ids"]
    assert decode_completion(tok, ids + [tok.eos_token_id, 1, 2], [tok.eos_token_id], tok.eos_token_id) == "abc"
    sp = load_tokenizer("mistral-sp")
    assert resolve_chat_template(None, sp, "org/Model-Instruct") is False  # no template
    assert resolve_chat_template(False, sp, "x") is False
    with pytest.raises(Exception, match="has no chat template"):
        resolve_chat_template(True, sp, "x")


# ---------------------------------------------------------------------------------------
# vLLM glue (a stand-in module: CPU tests never import the real vllm)
# ---------------------------------------------------------------------------------------


def test_vllm_backend_passes_token_ids_at_temperature_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    tok = load_tokenizer("gpt2")
    captured = {}

    class SamplingParams:
        def __init__(self, **kwargs):
            captured["params"] = kwargs

    class LLM:
        def __init__(self, **kwargs):
            captured["llm"] = kwargs

        def generate(self, prompts, params, use_tqdm=False):
            captured["prompts"] = prompts
            reply = tok("\\boxed{18}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=reply)]) for _ in prompts]

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", fake)
    examples = get_task("gsm8k").load("test", "offline", limit=2)
    result = evaluate_examples_vllm("/models/x", tok, examples, max_new_tokens=32, chat_template=False)
    assert captured["params"]["temperature"] == 0.0 and captured["params"]["n"] == 1
    assert captured["params"]["max_tokens"] == 32
    assert captured["llm"]["skip_tokenizer_init"] is True and captured["llm"]["model"] == "/models/x"
    assert captured["prompts"][0] == {"prompt_token_ids": prompt_token_ids(tok, examples[0].prompt, False)}
    assert [r.score for r in result.records] == [1.0, 0.0]  # gold 18, then gold 3
    assert result.settings["backend"] == "vllm"


# ---------------------------------------------------------------------------------------
# Result files
# ---------------------------------------------------------------------------------------


def make_result(model: str, scores: dict[str, float], task: str = "math", **kw) -> ModelEvalResult:
    return ModelEvalResult(
        model=model,
        records=[PromptResult(pid, task, f"prompt {pid}", f"completion {pid}", "1", "1" if s else None, s)
                 for pid, s in scores.items()],
        **kw,
    )


def test_model_result_json_round_trip(tmp_path: Path) -> None:
    result = make_result("org/m", {"a": 1.0, "b": 0.0}, policy="m", step=10, settings={"k": 1})
    data = result.to_json()
    assert data["reward@1"] == 0.5 and data["n"] == 2 and data["tasks"] == ["math"]
    json.dumps(data)  # JSON-ready
    for form in (data, json.dumps(data), json.dumps(json.dumps(data))):
        back = ModelEvalResult.from_json(form)
        assert back.records == result.records and back.step == 10 and back.policy == "m"
    path = result.save(tmp_path / "r.json")
    assert ModelEvalResult.load(path).records == result.records
    with pytest.raises(DataError, match="record 0 lacks field"):
        ModelEvalResult.from_json({"model": "x", "records": [{"prompt_id": "a"}]})
    with pytest.raises(DataError, match="not valid JSON"):
        ModelEvalResult.from_json("{oops")


def test_load_results_from_eval_file_model_files_and_run_folder(tmp_path: Path) -> None:
    a = make_result("org/a", {"p1": 1.0, "p2": 0.0}, policy="a")
    b = make_result("org/b", {"p1": 0.0, "p2": 1.0}, policy="b")
    save_eval_file(tmp_path / "eval.json", [a, b], {"suite": "math"})
    loaded = load_results(tmp_path / "eval.json")
    assert [r.name for r in loaded] == ["a", "b"] and loaded[1].scores() == {"p1": 0.0, "p2": 1.0}
    run = tmp_path / "run"
    for policy, result in (("a", a), ("b", b)):
        for step in (0, 5, 10):
            result.policy, result.step = None, None  # the folder and file name supply them
            result.save(run / "eval" / policy / f"step-{step:06d}.json")
    (run / "eval" / "a" / "step-000015.json").write_text(json.dumps(a.to_json()))  # only policy a got there
    last = load_results(run)
    assert [(r.name, r.step) for r in last] == [("a", 10), ("b", 10)]
    assert [r.step for r in load_results(run, "first")] == [0, 0]
    assert [r.step for r in load_results(run / "eval", 5)] == [5, 5]
    with pytest.raises(DataError, match="no validation results at step 15"):
        load_results(run, 15)
    both = load_many([tmp_path / "eval.json", run / "eval" / "a" / "step-000005.json"])
    assert [(r.name, r.step) for r in both] == [("a", None), ("b", None), ("a", 5)]
    with pytest.raises(DataError, match="no such file"):
        load_results(tmp_path / "missing.json")
    table = markdown_table([a, b])
    assert "| org/a | 0.5000 (n=2) |" in table and table.startswith("| model | math |")


# ---------------------------------------------------------------------------------------
# `mutualrl eval` end to end on tiny models (offline data)
# ---------------------------------------------------------------------------------------


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_eval_cli_models_and_recipe(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "res" / "out.json"
    target = f"{tiny_models['tiny-bpe']},{tiny_models['tiny-sp']}"
    res = runner.invoke(app, ["eval", target, "--suite", "math,gsm8k,arc", "--limit", "2", "--max-new-tokens", "6",
                              "--batch-size", "3", "--source", "offline", "--device", "cpu", "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["format"] == "mutualrl-eval" and data["tasks"] == ["math", "gsm8k", "arc"]
    assert data["splits"] == {"math": "test500", "gsm8k": "test", "arc": "test"}
    assert [r["policy"] for r in data["results"]] == ["tiny-bpe", "tiny-sp"]
    expected = [e.prompt_id for e in (get_task("math").load("test500", "offline", 2)
                                      + get_task("gsm8k").load("test", "offline", 2)
                                      + get_task("arc").load("test", "offline", 2))]
    for r in data["results"]:
        assert [rec["prompt_id"] for rec in r["records"]] == expected
        assert set(r["reward@1_by_task"]) == {"math", "gsm8k", "arc"}
        assert r["settings"]["chat_template"] is False and r["settings"]["max_new_tokens"] == 6
    # The CLI's completions are the model's greedy completions.
    tok = load_tokenizer(str(tiny_models["tiny-bpe"]))
    model = LlamaForCausalLM.from_pretrained(tiny_models["tiny-bpe"])
    examples = [TaskExample(rec["prompt_id"], rec["prompt"], rec["answer"], rec["task"])
                for rec in data["results"][0]["records"]]
    direct = evaluate_examples(model, tok, examples, max_new_tokens=6, batch_size=1, chat_template=False)
    assert [r.completion for r in direct.records] == [rec["completion"] for rec in data["results"][0]["records"]]
    md = out.with_suffix(".md").read_text()
    assert "| model | math | gsm8k | arc | mean |" in md and "| tiny-bpe |" in md and "| tiny-sp |" in md
    assert "| model | math | gsm8k | arc | mean |" in res.output

    # A recipe: pool policies with their own chat-template settings, the recipe's task and generation length.
    recipe = {
        "pool": {"name": "tinytest", "policies": [
            {"name": "bpe", "model": str(tiny_models["tiny-bpe"])},
            {"name": "sp-chat", "model": str(tiny_models["tiny-sp"]), "chat_template": True},
        ]},
        "regime": {"name": "standalone"},
        "task": {"name": "gsm8k", "source": "offline", "max_prompt_tokens": 1024},
        "grpo": {"max_completion_length": 5},
        "validation": {"batch_size": 2},
    }
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe))
    out2 = tmp_path / "recipe.json"
    res = runner.invoke(app, ["eval", str(recipe_path), "--limit", "3", "--device", "cpu", "-o", str(out2)])
    assert res.exit_code == 0, res.output
    results = load_results(out2)
    assert [r.name for r in results] == ["bpe", "sp-chat"]
    assert [r.settings["chat_template"] for r in results] == [False, True]
    assert all(r.settings["max_new_tokens"] == 5 and r.settings["batch_size"] == 2 for r in results)
    assert all(r.tasks == ["gsm8k"] and r.n == 3 for r in results)


@pytest.mark.slow
def test_eval_cli_joint_length_filter_and_errors(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "f.json"
    target = f"{tiny_models['tiny-bpe']},{tiny_models['tiny-sp']}"
    # MATH-500 prompt 0 is ~60 tokens, prompt 1 longer: a 70-token cap keeps only what fits for BOTH tokenizers.
    res = runner.invoke(app, ["eval", target, "--suite", "math", "--limit", "4", "--max-new-tokens", "2",
                              "--max-prompt-tokens", "70", "--device", "cpu", "-o", str(out)])
    assert res.exit_code == 0, res.output
    results = load_results(out)
    kept = [r.prompt_id for r in results[0].records]
    assert kept == [r.prompt_id for r in results[1].records]
    examples = get_task("math").load("test500", "offline", 4)
    lengths = {name: [len(prompt_token_ids(load_tokenizer(str(folder)), e.prompt, False)) for e in examples]
               for name, folder in tiny_models.items()}
    expected = [e.prompt_id for i, e in enumerate(examples) if all(lengths[n][i] <= 70 for n in lengths)]
    assert kept == expected and 0 < len(kept) < 4
    assert results[0].settings["dropped_too_long"] == 4 - len(kept)
    res = runner.invoke(app, ["eval", str(tiny_models["tiny-bpe"]), "--suite", "nosuchtask"])
    assert res.exit_code == 2 and "unknown task or suite 'nosuchtask'" in " ".join(res.output.split())


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_complementarity_runs_the_evaluation_first(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    saved = tmp_path / "ran.json"
    target = f"{tiny_models['tiny-bpe']},{tiny_models['tiny-sp']}"
    res = runner.invoke(app, ["complementarity", "--run", target, "--suite", "gsm8k", "--limit", "3", "--source",
                              "offline", "--max-new-tokens", "3", "--device", "cpu", "--save", str(saved), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)  # status lines went to stderr: stdout is pure JSON
    assert report["models"] == ["tiny-bpe", "tiny-sp"] and report["n_prompts"] == 3
    results = load_results(saved)
    assert [r.name for r in results] == ["tiny-bpe", "tiny-sp"]
    # Three new tokens cannot spell a complete \\boxed{...}: every prompt is unsolved by both models.
    assert report["pool"]["none"] == 1.0 and [r.reward_at_1 for r in results] == [0.0, 0.0]


@pytest.mark.slow
def test_greedy_ignores_the_model_generation_config_and_says_so() -> None:
    """A model folder's ``generation_config.json`` (``suppress_tokens``, ``repetition_penalty``) does not change
    which token is greedy; the results name what was taken from it (EOS) and what was not."""
    from mutualrl.evaluation.generate import evaluate_examples

    tok = load_tokenizer("gpt2")
    model = tiny_llama(tok, 0)
    prompts = [prompt_token_ids(tok, ex.prompt, False) for ex in some_examples()]
    plain = generate_greedy(model, tok, prompts, max_new_tokens=6, batch_size=4)
    first = [tok(text, add_special_tokens=False)["input_ids"][0] for text in plain if text]
    model.generation_config.suppress_tokens = sorted(set(first))
    model.generation_config.repetition_penalty = 5.0
    assert generate_greedy(model, tok, prompts, max_new_tokens=6, batch_size=4) == plain
    assert model.generation_config.repetition_penalty == 5.0  # the model's own config is left as it was
    result = evaluate_examples(model, tok, some_examples()[:1], max_new_tokens=2, batch_size=1, chat_template=False)
    taken = result.settings["from_model"]
    assert taken["eos_token_ids"] == [tok.eos_token_id]
    assert "repetition_penalty=5.0" in taken["ignored"] and any(i.startswith("suppress_tokens=") for i in taken["ignored"])
