"""Type-damaged records a command reads from a run folder or an adapter folder (issue 68): an ``inputs.json`` entry
or an ``adapter_config.json`` of the wrong JSON type is one line naming the file and the field, exit 2, never a
traceback; ``train --resume`` passes over such a LoRA checkpoint, naming it, by the same check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_fakes import write_finished_run
from test_checkpoint_integrity import build_checkpoint
from test_cli_errors import assert_one_line_error, run_cli

from mutualrl.errors import RunFolderError
from mutualrl.launch.rundir.inputs import check_resume_inputs
from mutualrl.run_folder import RunPaths
from mutualrl.ops.checkpoint_files import checkpoint_problem

DATA = {"train.jsonl": "a" * 64, "eval.jsonl": "b" * 64}
DAMAGED_INPUTS = [  # (record, the field the line names)
    ({"code": {"my_rewards": "x"}, "data": DATA}, "code['my_rewards']: text 'x' where an object or null belongs"),
    ({"code": {"my_rewards": {"file": 5, "sha256": "c" * 64}}, "data": DATA}, "code['my_rewards'].file: a number 5"),
    ({"code": [1], "data": DATA}, "code: a list where an object belongs"),
    ({"code": {}, "data": {"train.jsonl": [1]}}, "data['train.jsonl']: a list where a sha256"),
    ({"code": {}, "data": "x"}, "data: text 'x' where an object belongs"),
]


@pytest.mark.parametrize(("record", "field"), DAMAGED_INPUTS)
def test_report_and_plot_name_a_damaged_inputs_entry(tmp_path: Path, capsys, record: dict, field: str) -> None:
    runs = [write_finished_run(tmp_path / f"standalone-seed{seed}", "standalone", seed, {"tiny-bpe": [1, 0, seed % 2]})
            for seed in (1, 2)]
    (runs[1] / "inputs.json").write_text(json.dumps(record))
    for command in (["report"], ["plot", "--group-by", "regime", "-o", str(tmp_path / "figs")]):
        assert_one_line_error(*run_cli([*command, *map(str, runs)], capsys), f"{runs[1] / 'inputs.json'}: {field}")


@pytest.mark.parametrize(("record", "field"), DAMAGED_INPUTS)
def test_resume_names_a_damaged_inputs_entry(tmp_path: Path, record: dict, field: str) -> None:
    paths = RunPaths(tmp_path / "run")
    paths.data.mkdir(parents=True)
    paths.inputs.write_text(json.dumps(record))
    with pytest.raises(RunFolderError) as raised:
        check_resume_inputs(paths)
    assert f"{paths.inputs}: {field}" in str(raised.value)


DAMAGED_ADAPTER = [  # (adapter_config.json's text, what the line says)
    ("{r: 8", "adapter_config.json: damaged, not JSON"),
    ("[1]", "adapter_config.json: damaged, holds a JSON list"),
    (json.dumps({"peft_type": "LORA", "base_model_name_or_path": 5}),
     "adapter_config.json: base_model_name_or_path: a JSON int where text (a path or a hub name) belongs"),
    (json.dumps({"peft_type": "NOPE"}), "adapter_config.json: peft_type: 'NOPE' is no kind of adapter peft knows"),
    (json.dumps({"r": 8}), "adapter_config.json: peft_type: null"),
]


@pytest.mark.parametrize(("text", "said"), DAMAGED_ADAPTER)
def test_resume_passes_over_a_lora_checkpoint_whose_adapter_config_is_damaged(tmp_path: Path, text: str,
                                                                              said: str) -> None:
    folder = build_checkpoint(tmp_path / "checkpoint-2", "lora", 2, manifest=False)
    (folder / "adapter_config.json").write_text(text)
    problem = checkpoint_problem(folder) or ""
    assert problem.startswith(f"{folder / 'adapter_config.json'}:"), problem  # not JSON: "unreadable", as before


@pytest.mark.parametrize(("text", "said"), DAMAGED_ADAPTER)
def test_eval_of_an_adapter_whose_config_is_damaged(random_lm_pair: dict[str, Path], tmp_path: Path, capsys,
                                                    text: str, said: str) -> None:
    """An adapter folder as a LoRA policy's final/ holds it (tokenizer, weights), its config damaged: peft's
    JSONDecodeError, AttributeError or KeyError came after the tokenizer had loaded."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    folder = tmp_path / "final"
    AutoTokenizer.from_pretrained(random_lm_pair["bpe"]).save_pretrained(folder)
    save_file({"lora_A": torch.ones(2, 2)}, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(text.replace("NOPE\"", f"NOPE\", \"base_model_name_or_path\": "
                                                             f"{json.dumps(str(random_lm_pair['bpe']))}"))
    code, err = run_cli(["eval", str(folder), "--suite", "synthetic-arith", "--limit", "2", "--max-new-tokens", "2",
                         "-o", str(tmp_path / "eval.json")], capsys)
    assert_one_line_error(code, err, f"{folder}/{said}")
    assert not (tmp_path / "eval.json").exists()
