"""Sequential peer distillation: the harvest of successes, the SFT examples and loss, `mutualrl distill` end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from e2e_helpers import child_env
from mutualrl.cli.main import run
from mutualrl.config.loader import load_run_config
from mutualrl.config.typed import to_plain
from mutualrl.errors import DataError, UsageError
from mutualrl.see import CorruptShardError, ExperienceExchange
from mutualrl.see.harvest import harvest_successes
from see_synthetic import RolloutRecord, batch_from_records, records_of, synthetic_batch

# -- harvest ---------------------------------------------------------------------------------


def rec(pid: str, k: int, text: str, reward: float, finished: bool = True) -> RolloutRecord:
    return RolloutRecord(pid, k, f"prompt of {pid}", text, [1] * len(text), [(i, i + 1) for i in range(len(text))],
                         reward, finished=finished)


def publish(root: Path, policy: str, step: int, records: list[RolloutRecord], run_id: str = "run",
            rank: int = 0, world_size: int = 1) -> None:
    see = ExperienceExchange(root, run_id, policy, rank=rank, world_size=world_size, policies=["a", "b"],
                             retention_steps=None)
    see.publish(step, batch_from_records(records))


def test_harvest_keeps_every_distinct_success_per_policy(tmp_path):
    root = tmp_path / "see"
    publish(root, "a", 0, [rec("p1", 0, "7", 1.0), rec("p1", 1, "7", 1.0, finished=False), rec("p1", 2, "8", 0.0),
                           rec("p2", 0, "3", 0.8), rec("p2", 1, "3 ", 0.81)])
    publish(root, "a", 1, [rec("p1", 0, "7", 0.9), rec("p1", 1, "07", 1.0), rec("p3", 0, "7", 1.0)])
    publish(root, "b", 0, [rec("p1", 0, "x", 0.0), rec("p2", 0, "y", 0.5)])
    publish(root, "b", 1, [rec("p1", 0, "7", 1.0)])
    harvest = harvest_successes(tmp_path)  # a run folder: its see/
    assert harvest.steps == [0, 1] and harvest.records == {"a": 8, "b": 3} and harvest.run_id == "run"
    a = harvest.successes["a"]
    # reward must be *above* 0.8 (SGT's rule); the same text on another prompt, or another text, is distinct
    assert [(s.prompt_id, s.response_text) for s in a] == [("p1", "7"), ("p2", "3 "), ("p1", "07"), ("p3", "7")]
    first = a[0]
    assert (first.count, first.first_step, first.reward, first.finished) == (3, 0, 1.0, True)
    assert first.prompt_text == "prompt of p1"
    assert [s.first_step for s in a] == [0, 0, 1, 1]
    assert [(s.prompt_id, s.response_text) for s in harvest.successes["b"]] == [("p1", "7")]
    summary = harvest.summary("a")
    assert (summary["distinct_successes"], summary["successful_rollouts"], summary["prompts_solved"]) == (4, 6, 3)
    assert harvest_successes(root, success_threshold=0.85).summary("a")["distinct_successes"] == 3
    only_b = harvest_successes(root, policies=["b"])
    assert set(only_b.successes) == {"b"} and only_b.records == {"b": 3}


def test_harvest_finished_is_any_generation_that_ended(tmp_path):
    publish(tmp_path, "a", 0, [rec("p1", 0, "7", 1.0, finished=False)])
    publish(tmp_path, "a", 1, [rec("p1", 0, "7", 1.0, finished=True)])
    publish(tmp_path, "a", 2, [rec("p2", 0, "5", 1.0, finished=False)])
    found = harvest_successes(tmp_path).successes["a"]
    assert [(s.prompt_id, s.finished) for s in found] == [("p1", True), ("p2", False)]


def test_harvest_skips_a_step_with_a_missing_rank(tmp_path):
    publish(tmp_path, "a", 0, [rec("p1", 0, "1", 1.0)], world_size=2, rank=0)
    publish(tmp_path, "a", 0, [rec("p2", 0, "2", 1.0)], world_size=2, rank=1)
    publish(tmp_path, "a", 1, [rec("p3", 0, "3", 1.0)], world_size=2, rank=0)  # rank 1 never committed
    harvest = harvest_successes(tmp_path)
    assert [s.prompt_id for s in harvest.successes["a"]] == ["p1", "p2"]
    assert harvest.incomplete == [(1, "a")] and harvest.steps == [0]


def test_harvest_reads_synthetic_batches(tmp_path):
    see = ExperienceExchange(tmp_path, "run", "a", retention_steps=None)
    batches = [synthetic_batch(4, rollouts=5, seed=s, prompt_offset=4 * s) for s in range(3)]
    for step, batch in enumerate(batches):
        see.publish(step, batch)
    expected = {(r.prompt_id, r.response_text) for batch in batches for r in records_of(batch) if r.reward > 0.8}
    assert expected  # rewards are 0/1
    found = harvest_successes(tmp_path).successes["a"]
    assert {(s.prompt_id, s.response_text) for s in found} == expected and len(found) == len(expected)


def test_harvest_errors(tmp_path):
    with pytest.raises(UsageError, match="no recorded experience"):
        harvest_successes(tmp_path)
    publish(tmp_path, "a", 0, [rec("p1", 0, "1", 1.0)], run_id="one")
    publish(tmp_path, "b", 0, [rec("p1", 0, "1", 1.0)], run_id="two")
    with pytest.raises(DataError, match="several runs"):
        harvest_successes(tmp_path)
    assert [s.prompt_id for s in harvest_successes(tmp_path, run_id="two").successes["b"]] == ["p1"]
    with pytest.raises(UsageError, match="no committed records of run 'three'"):
        harvest_successes(tmp_path, run_id="three")
    data = next((tmp_path / "step-000000" / "a").glob("*.arrow"))
    data.write_bytes(data.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(CorruptShardError):
        harvest_successes(tmp_path, run_id="one")


# -- SFT examples, settings and loss --------------------------------------------------------


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("name", ["gpt2", "mistral-sp"])
def test_sft_rows_are_the_sgt_rescue_target(name):
    from mutualrl.assets.tokenizers import load_tokenizer
    from mutualrl.evaluation.generate import prompt_token_ids
    from mutualrl.see.harvest import Success
    from mutualrl.thl import retokenize
    from mutualrl.training.distill import sft_rows

    tok = load_tokenizer(name)
    successes = [Success("p1", "3+4+5=", "12", 1.0, True, 0, 1), Success("p2", "9-2=", " 7 apples", 1.0, False, 1, 2),
                 Success("p3", "1+1=", "", 1.0, False, 1, 1),
                 Success("p4", "Q:", "one two three four five six", 1.0, True, 1, 1)]
    rows, stats = sft_rows(successes, tok, chat_template=False, max_completion_tokens=4)
    assert stats == {"truncated": 1, "empty": 1} and [r["prompt_id"] for r in rows] == ["p1", "p2", "p4"]
    for row, success in zip(rows, [successes[0], successes[1], successes[3]], strict=True):
        prompt = prompt_token_ids(tok, success.prompt_text, False)
        completion = list(retokenize(tok, [success.response_text])[0].ids)
        if success.finished:
            completion.append(tok.eos_token_id)
        completion = completion[:4]
        assert row["input_ids"] == prompt + completion
        assert row["labels"] == [-100] * len(prompt) + completion
    assert tok.decode([t for t in rows[0]["labels"] if t != -100], skip_special_tokens=True) == "12"
    assert rows[0]["input_ids"][-1] == tok.eos_token_id and rows[1]["input_ids"][-1] != tok.eos_token_id


def test_settings_and_overrides():
    from mutualrl.training.distill_sft import PAPER_SFT, build_sft_config, lora_settings, sft_kwargs, split_overrides

    assert PAPER_SFT == {"learning_rate": 2e-5, "lr_scheduler_type": "cosine", "warmup_steps": 0.03,
                         "num_train_epochs": 1.0}
    lora = lora_settings(True, {})
    assert (lora["r"], lora["lora_alpha"], lora["lora_dropout"]) == (16, 32, 0.05)
    assert lora_settings(True, {"r": 8})["r"] == 8 and lora_settings(False, {}) is None
    assert lora_settings(True, {"use_rslora": True})["use_rslora"] is True  # any peft LoraConfig field
    sft, lora_over = split_overrides([(["per_device_train_batch_size"], 2), (["lora", "alpha"], 8)])
    assert sft == {"per_device_train_batch_size": 2} and lora_over == {"alpha": 8}
    for bad, match in [((["learning_rat"], 1.0), "did you mean 'learning_rate'"), ((["lora", "rank"], 4), "not a field of peft.LoraConfig"),
                       ((["output_dir"], "x"), "--output-dir"), ((["a", "b"], 1), "not a field")]:
        with pytest.raises(UsageError, match=match):
            split_overrides([bad])
    with pytest.raises(UsageError, match="--full"):
        lora_settings(False, {"r": 4})
    config = build_sft_config(sft_kwargs(Path("/tmp/x"), device="cpu", seed=3, gradient_checkpointing=False,
                                         max_steps=2, overrides={"per_device_train_batch_size": 2}))
    assert (config.learning_rate, config.warmup_steps, config.num_train_epochs, config.max_steps) == (2e-5, 0.03, 1.0, 2)
    assert str(getattr(config.lr_scheduler_type, "value", config.lr_scheduler_type)) == "cosine"
    assert config.use_cpu and config.seed == 3 and config.per_device_train_batch_size == 2
    with pytest.raises(UsageError, match="SFTConfig"):
        build_sft_config(sft_kwargs(Path("/tmp/x"), device="cpu", seed=3, gradient_checkpointing=None,
                                    max_steps=None, overrides={"lr_scheduler_type": "nope"}))


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_sequence_loss_is_sgt_auxiliary_nll(tmp_path):
    """PeerSFTTrainer's loss on a batch == SGT's rescue_nll with weight 1/n (mean of per-example token means)."""
    from mutualrl.regimes.core.rescue import rescue_nll
    from mutualrl.training.distill_sft import _peer_sft_trainer_class, build_sft_config, sft_kwargs
    from tiny_models import build_tiny_lm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_lm("gpt2", tmp_path / "m", seed=3)
    model, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    rows = [([5, 6, 7], [8, 9]), ([10, 11], [12, 13, 14, 15, 16]), ([17], [18])]  # (prompt, completion)
    expected_logps = []
    with torch.no_grad():
        for prompt, completion in rows:
            logits = model(torch.tensor([prompt + completion])).logits[0]
            logps = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
            expected_logps.append(logps[torch.arange(len(completion)), torch.tensor(completion)])
    width = max(len(c) for _, c in rows)
    per_token = torch.zeros(len(rows), width)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, lp in enumerate(expected_logps):
        per_token[i, : len(lp)], mask[i, : len(lp)] = lp, 1
    expected = rescue_nll(per_token, mask, torch.full((len(rows),), 1 / len(rows)))
    from datasets import Dataset

    data = Dataset.from_list([{"input_ids": p + c, "labels": [-100] * len(p) + c} for p, c in rows])
    config = build_sft_config(sft_kwargs(tmp_path / "t", device="cpu", seed=0, gradient_checkpointing=False,
                                         max_steps=1, overrides={}))
    trainer = _peer_sft_trainer_class()(model=model, args=config, train_dataset=data, processing_class=tok)
    batch = trainer.data_collator([data[i] for i in range(len(rows))])
    model.eval()
    with torch.no_grad():
        got = trainer.compute_loss(trainer.model, dict(batch))
        trainer.loss_reduction = "token"
        token_mean = trainer.compute_loss(trainer.model, dict(batch))
    assert torch.allclose(got, expected, atol=1e-5), (got, expected)
    flat = torch.cat(expected_logps)
    assert torch.allclose(token_mean, -flat.mean(), atol=1e-5)  # TRL's reduction weighs every token alike


# -- CLI errors on a hand-built run folder (no training) ------------------------------------


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, (code, err)
    for needle in needles:
        assert needle in lines[0], err


@pytest.fixture()
def fake_run(tmp_path) -> Path:
    """A finished run folder of the tiny pool, without models: enough for every check before the SFT."""
    root = tmp_path / "run"
    config = load_run_config("tiny", regime="standalone").config
    (root / "policies" / "tiny-bpe" / "final").mkdir(parents=True)
    (root / "policies" / "tiny-sp" / "final").mkdir(parents=True)
    (root / "config.yaml").write_text(yaml.safe_dump(to_plain(config)))
    (root / "run.json").write_text(json.dumps({"status": "done"}))
    return root


def test_cli_errors_before_any_work(fake_run, tmp_path, capsys):
    def cli(*args: str) -> tuple[int, str]:
        code = run(["distill", *args])
        return code, capsys.readouterr().err

    assert_one_line_error(*cli(str(tmp_path / "nope"), "--learner", "tiny-bpe"), "no such run folder")
    assert_one_line_error(*cli(str(tmp_path), "--learner", "tiny-bpe"), "not a mutualrl run folder")
    assert_one_line_error(*cli(str(fake_run), "--learner", "qwen"), "--learner", "'qwen'", "tiny-bpe, tiny-sp")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe", "--peer", "tiny-bpe"), "itself")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe", "--peer", "x"), "--peer", "'x'")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe"), "no recorded experience",
                          "see.record_standalone=true")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe", "--set", "nope=1"), "trl.SFTConfig")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe", "--loss-reduction", "x"), "--loss-reduction")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe", "--device", "tpu"), "--device")
    (tmp_path / "file").write_text("x")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe", "-o", str(tmp_path / "file")), "--output-dir")
    publish(fake_run / "see", "tiny-sp", 0, [rec("p1", 0, "1", 0.0), rec("p2", 0, "2", 0.5)])
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe"), "'tiny-sp' has no success", "2 recorded")
    shutil.rmtree(fake_run / "policies" / "tiny-bpe" / "final")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-bpe"), "no final model", "status: done")
    out = fake_run / "distill" / "tiny-sp-from-tiny-bpe"
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("user data")
    publish(fake_run / "see", "tiny-bpe", 0, [rec("p1", 0, "1", 1.0)])
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-sp"), "already exists", "--overwrite")
    assert_one_line_error(*cli(str(fake_run), "--learner", "tiny-sp", "--overwrite"), "not written by mutualrl")
    assert (out / "keep.txt").read_text() == "user data"


# -- end to end on the tiny pool ------------------------------------------------------------


def mutualrl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mutualrl", *args], env=child_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_distill_end_to_end_on_the_tiny_pool(tmp_path, capsys, sgt_3_steps):
    """Distils from the shared 3-step SGT run (its exchange records every step; see.retention_steps, 16, keeps
    all 3), copied so the shared folder stays as trained; README's tour trains and distils a standalone run
    recorded with see.record_standalone=true (test_readme_tour.py)."""
    from transformers import AutoModelForCausalLM

    shared_dir, done = sgt_3_steps
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = tmp_path / "run"
    shutil.copytree(shared_dir, run_dir)
    assert sorted(p.name for p in (run_dir / "see").glob("step-*")) == [f"step-00000{i}" for i in range(3)]

    done = mutualrl("distill", str(run_dir), "--learner", "tiny-bpe", "--max-steps", "2", "--eval-limit", "12",
                    "--set", "per_device_train_batch_size=4")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = run_dir / "distill" / "tiny-bpe-from-tiny-sp"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["learner"] == "tiny-bpe" and summary["peer"] == "tiny-sp"
    assert summary["sft"]["steps"] == 2 and summary["sft"]["lora"]["r"] == 16
    assert summary["sft"]["learning_rate"] == 2e-5 and summary["sft"]["lr_scheduler_type"] == "cosine"
    harvest = summary["harvest"]
    assert harvest["steps"] == 3 and harvest["rollouts"] == 96 and harvest["distinct_successes"] >= 1
    assert summary["examples"] == harvest["distinct_successes"] == len((out / "data.jsonl").read_text().splitlines())
    peer_prompts = {json.loads(line)["prompt"] for line in (out / "data.jsonl").read_text().splitlines()}
    assert all("-" in p for p in peer_prompts)  # tiny-sp solves the `sub` family (a+b-c=) only
    evaluation = summary["eval"]
    assert evaluation["n"] == 12  # the first 12 of the run's 20 held-out prompts (validation.limit=20)
    for side in ("before", "after"):
        assert 0.0 <= evaluation[side]["reward@1"] <= 1.0 and set(evaluation[side]["groups"]) == {"add", "sub"}
    assert evaluation["change"] == pytest.approx(evaluation["after"]["reward@1"] - evaluation["before"]["reward@1"])
    assert "before" in done.stdout and "sub" in done.stdout and "change" in done.stdout
    model = AutoModelForCausalLM.from_pretrained(out / "model")
    assert not any("lora" in name for name, _ in model.named_parameters())  # merged
    assert (out / "adapter" / "adapter_config.json").is_file()

    # the other direction, full weights, into a chosen folder, no evaluation
    other = tmp_path / "sp-from-bpe"
    done = mutualrl("distill", str(run_dir), "--learner", "tiny-sp", "--full", "--max-steps", "1", "--no-eval",
                    "-o", str(other))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((other / "summary.json").read_text())
    assert summary["peer"] == "tiny-bpe" and summary["sft"]["lora"] is None and "eval" not in summary
    AutoModelForCausalLM.from_pretrained(other / "model")

    def cli(*args: str) -> tuple[int, str]:
        code = run(["distill", *args])
        return code, capsys.readouterr().err

    capsys.readouterr()  # the progress bars of the loads above
    assert_one_line_error(*cli(str(run_dir), "--learner", "tiny-xx"), "--learner", "'tiny-xx'")
    assert_one_line_error(*cli(str(run_dir), "--learner", "tiny-bpe", "--success-threshold", "1", "--overwrite"),
                          "no success", "(reward > 1)")
    assert_one_line_error(*cli(str(run_dir), "--learner", "tiny-bpe"), "already exists")
    unrecorded = tmp_path / "unrecorded"
    shutil.copytree(run_dir, unrecorded, ignore=shutil.ignore_patterns("see", "distill"))
    assert_one_line_error(*cli(str(unrecorded), "--learner", "tiny-bpe"), "no recorded experience")
