"""`mutualrl doctor`: one line per check, a JSON form, exit 1 only when the tiny pool cannot run."""

from __future__ import annotations

import pytest

import json

from mutualrl.cli.main import run
from mutualrl import doctor


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_json_lists_every_check_and_this_machine_can_run_the_tiny_pool(doctor_json):
    assert doctor_json.returncode == 0, doctor_json.stderr
    report = json.loads(doctor_json.stdout)
    names = [c["name"] for c in report["checks"]]
    assert names[:2] == ["torch", "cuda"] and {"deepspeed", "vllm", "tensorboard", "assets", "disk"} <= set(names)
    assert report["ok"] is True
    assert all(c["status"] in ("ok", "warn", "fail") for c in report["checks"])
    assert next(c for c in report["checks"] if c["name"] == "assets")["status"] == "ok"  # ./setup.sh cached them


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_missing_default_asset_fails_with_the_fix(monkeypatch, capsys, tmp_path):
    from mutualrl.assets import registry

    real = registry.all_assets()
    fake = [type(a)(**{**a.__dict__, "is_cached": (lambda: False)}) if a.default else a for a in real]
    monkeypatch.setattr(registry, "all_assets", lambda: fake)
    monkeypatch.setattr(doctor, "check_vllm", lambda: doctor.Check("vllm", "ok", "not probed: not this test's"))
    assert run(["doctor", "--no-hub", "--run-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "mutualrl assets fetch" in out


def test_optional_module_states_and_markup_safe_fixes():
    assert doctor.check_module("nope", "no_such_module_xyz", "pip install '.[extra]'", "x").detail.startswith(
        "not installed")
    assert doctor.check_module("json", "json", "", "x").status == "ok"
    assert doctor.check_disk(doctor.Path("/nonexistent/deep/run")).status in ("ok", "warn")
