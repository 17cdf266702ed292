"""`mutualrl eval` of a LoRA run: a policy's final/ (or checkpoint) holding a peft adapter is scored as the adapter
on its base, merged; a run folder without a final model says why, as run.json tells it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import UsageError
from mutualrl.pools.loading import load_model, load_model_or_adapter


@pytest.fixture(scope="module")
def adapter(random_lm_pair: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter on the random GPT-2-vocabulary model, with B not zero (it changes the logits), saved with the
    tokenizer as a LoRA policy's final/ is."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    base = random_lm_pair["bpe"]
    torch.manual_seed(3)
    model = get_peft_model(load_model(str(base)), LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                                             target_modules=["q_proj", "v_proj"]))
    folder = tmp_path_factory.mktemp("lora") / "final"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    assert not (folder / "config.json").exists()
    return folder


def test_an_adapter_is_loaded_on_its_base_and_merged(adapter: Path, random_lm_pair: dict[str, Path]) -> None:
    from peft import PeftModel

    ids = torch.tensor([[1, 2, 3, 4]])  # (1, 4)
    merged = load_model_or_adapter(str(adapter))
    unmerged = PeftModel.from_pretrained(load_model(str(random_lm_pair["bpe"])), str(adapter))
    base = load_model(str(random_lm_pair["bpe"]))
    with torch.no_grad():
        ours, peft, plain = (m(ids).logits for m in (merged, unmerged, base))  # (1, 4, vocab) each
    assert torch.allclose(ours, peft, atol=1e-5)
    assert not torch.allclose(ours, plain, atol=1e-3)  # the adapter is applied, not dropped


@pytest.mark.slow
def test_mutualrl_eval_of_an_adapter_folder(adapter: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    done = CliRunner().invoke(app, ["eval", str(adapter), "--suite", "synthetic-arith", "--limit", "2",
                                    "--max-new-tokens", "4", "-o", str(out)])
    assert done.exit_code == 0, done.output
    result = json.loads(out.read_text())["results"][0]
    assert result["n"] == 2 and result["model"] == str(adapter)


def test_an_unfinished_run_says_why_and_names_its_checkpoints(tmp_path: Path) -> None:
    from mutualrl.launch.evaluate import run_folder_targets
    from mutualrl.config.loader import load_run_config
    from mutualrl.config.resolved import write_resolved_config
    from mutualrl.run_folder import RunPaths

    paths = RunPaths(tmp_path / "run")
    loaded = load_run_config("tiny")
    paths.root.mkdir()
    write_resolved_config(paths, loaded.config, loaded.source)
    (paths.policy_dir("tiny-bpe") / "checkpoint-2").mkdir(parents=True)
    paths.run_json.write_text(json.dumps({"status": "interrupted"}))
    with pytest.raises(UsageError, match=r"no final model for tiny-bpe, tiny-sp: it was interrupted \(mutualrl train "
                                         r"--resume -o RUN finishes it\); evaluate its checkpoints instead: .*checkpoint-2"):
        run_folder_targets(str(paths.root), None, None)
    for policy in ("tiny-bpe", "tiny-sp"):  # a LoRA run's final/ is an adapter: that is a final model
        paths.final_model(policy).mkdir(parents=True, exist_ok=True)
        (paths.final_model(policy) / "adapter_config.json").write_text("{}")
    targets = run_folder_targets(str(paths.root), None, None).targets
    assert [(t.name, t.base_model) for t in targets] == [("tiny-bpe/final", "builtin:tiny-bpe"),
                                                         ("tiny-sp/final", "builtin:tiny-sp")]
