"""The policy processes get glibc's allocator settings (a step's large buffers reused), and a user's own are kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mutualrl.config.loader import load_run_config
from mutualrl.host.allocator import ALLOCATOR_SETTINGS, allocator_env
from mutualrl.launch.plan.commands import build_machine_specs
from mutualrl.launch.plan.mwra import plan_placement

VARIABLES = sorted(ALLOCATOR_SETTINGS)


def every_spec(pool: str, gpus: int, tmp_path):
    config = load_run_config(pool, ()).config
    placement = plan_placement([(p.name, 1.0) for p in config.pool.policies], gpus=gpus, cpu_cores=4)
    return [spec for per_machine in build_machine_specs(config, placement, tmp_path, python="/py", cwd=tmp_path)
            for spec in per_machine]


def child_environment(spec) -> dict[str, str]:
    """What the runner starts the policy with (``launch/supervise/runner.py``: the spec's env over ours)."""
    return {**os.environ, **spec.env}


@pytest.fixture
def clean_environ(monkeypatch):
    for variable in [*VARIABLES, "GLIBC_TUNABLES"]:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


@pytest.mark.parametrize(("pool", "gpus"), [("tiny", 0), ("2qwen", 8)])
def test_policy_processes_get_the_allocator_settings(clean_environ, tmp_path, pool, gpus):
    specs = every_spec(pool, gpus, tmp_path)
    assert specs
    for spec in specs:
        assert {v: spec.env.get(v) for v in VARIABLES} == {v: str(1 << 30) for v in VARIABLES}, spec.policy


def test_a_users_own_setting_is_inherited_unchanged(clean_environ, tmp_path):
    clean_environ.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    clean_environ.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=65536")
    for spec in every_spec("tiny", 0, tmp_path):
        assert not set(VARIABLES) & set(spec.env), spec.policy
        child = child_environment(spec)
        assert child["MALLOC_MMAP_THRESHOLD_"] == "131072"
        assert child["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=65536"


def test_only_the_settings_the_user_left_unset_are_added():
    assert allocator_env({"MALLOC_TRIM_THRESHOLD_": ""}) == {"MALLOC_MMAP_THRESHOLD_": str(1 << 30)}
    tunables = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=0"}
    assert allocator_env(tunables) == {"MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    assert allocator_env({}) == {v: str(1 << 30) for v in VARIABLES}


CHURN = """
import resource
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for step in range(12):
    buffer = b"\\x01" * (48 << 20)  # a 48 MiB buffer written and freed each step, like a step's logits
    del buffer
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_the_settings_make_glibc_reuse_a_freed_large_buffer():
    # the project's machines run Linux with glibc; elsewhere this fails rather than hiding what it measures
    assert sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION"), "glibc's allocator is measured"
    def faults(extra: dict[str, str]) -> int:
        env = {k: v for k, v in os.environ.items() if k not in VARIABLES and k != "GLIBC_TUNABLES"}
        done = subprocess.run([sys.executable, "-c", CHURN], env={**env, **extra}, capture_output=True, text=True,
                              check=True, timeout=120)
        return int(done.stdout)

    default, tuned = faults({}), faults(allocator_env({}))
    pages = 12 * (48 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert default > pages * 0.9  # glibc's default: every step's buffer faulted in again, page by page
    assert tuned < pages * 0.25, (default, tuned)  # kept: faulted in once
