"""Field help (issue 39): ``mutualrl pools show NAME --explain`` prints each setting's value and help string;
a TRL script's LoRA option under ``grpo`` points at ``pool.policies.<name>.lora``."""

from __future__ import annotations

from mutualrl.cli.main import run
from test_cli_errors import assert_one_line_error, run_cli


def test_explain_prints_every_setting_with_its_help(capsys):
    assert run(["pools", "show", "tiny", "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = {line: i for i, line in enumerate(lines)}
    assert "regime.sgt.lam = 0.3" in at and "lambda_SGT" in lines[at["regime.sgt.lam = 0.3"] + 1]
    assert "pool.policies.tiny-sp.lora = None" in at and "task.reward_funcs = []" in at
    assert "grpo.seed = 42" in at and "GRPOConfig" in lines[at["grpo.seed = 42"] + 1]


def test_use_peft_points_at_the_policys_lora_section(capsys):
    code, err = run_cli(["train", "--dry-run", "--set", "grpo.use_peft=true"], capsys)
    assert_one_line_error(code, err, "grpo.use_peft", "pool.policies.<name>.lora", exit_code=code)
    code, err = run_cli(["train", "--dry-run", "--set", "grpo.lora_r=8"], capsys)
    assert_one_line_error(code, err, "pool.policies.<name>.lora: {r: ...}", exit_code=code)


def test_trl_script_options_under_grpo_say_where_they_go(capsys):
    code, err = run_cli(["train", "--dry-run", "--set", "grpo.reward_funcs=[m.f]"], capsys)
    assert_one_line_error(code, err, "grpo.reward_funcs", "task.reward_funcs: [module.function]", exit_code=code)
