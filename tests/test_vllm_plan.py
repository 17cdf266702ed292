"""vLLM on a CPU, without starting an engine: build detection, the plan's CPU adaptations, KV cache sizing,
the worker's defaults and `mutualrl doctor`. The engine itself runs in tests/test_vllm_cpu.py (own processes)."""

from __future__ import annotations

import importlib.metadata
import json
from types import SimpleNamespace

import pytest

from mutualrl.host import vllm_cpu
from mutualrl.host.vllm_cpu import VllmBuild
from mutualrl.launch.plan.commands import resolve_vllm
from mutualrl.launch.plan.mwra import PolicyPlacement

CPU = PolicyPlacement("p", "cpu", (), 2, 1)
PAPER_VLLM = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.5,
              "vllm_enable_sleep_mode": True, "vllm_tensor_parallel_size": 2}


def test_this_machine_has_the_cpu_build_that_setup_installs():
    """./setup.sh --suite installed vllm-cpu (no GPU here) and removed what breaks it: nothing blocks it."""
    build = vllm_cpu.installed_build()
    assert build == VllmBuild("vllm-cpu", vllm_cpu.CPU_BUILD.split("==")[1]) and build.cpu
    assert vllm_cpu.cpu_blocker(build) is None
    assert vllm_cpu.broken_companions() is None


@pytest.mark.parametrize(
    ("build", "machine", "avx2", "expected"),
    [
        (VllmBuild(None, None), "x86_64", True, "not installed"),
        (VllmBuild("vllm", "0.11.0"), "x86_64", True, "CUDA build"),
        (VllmBuild("vllm-cpu", "0.30.0"), "x86_64", False, "no AVX2"),
    ],
)
def test_cpu_blocker_names_the_reason(monkeypatch, build, machine, avx2, expected):
    monkeypatch.setattr(vllm_cpu.platform, "machine", lambda: machine)
    monkeypatch.setattr(vllm_cpu, "has_avx2", lambda: avx2)
    assert expected in vllm_cpu.cpu_blocker(build)


def test_a_torch_other_than_the_builds_pin_blocks_it(monkeypatch):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "2.12.0+cpu" if name == "torch" else real(name))
    problem = vllm_cpu.torch_pin_problem(vllm_cpu.installed_build())
    assert problem is not None and "needs torch==2.13.0+cpu" in problem and "2.12.0+cpu" in problem


def test_plan_keeps_vllm_on_the_cpu_and_replaces_the_cuda_only_settings(monkeypatch):
    monkeypatch.setattr(vllm_cpu, "cpu_blocker", lambda build=None: None)
    decided = resolve_vllm(PAPER_VLLM, CPU)
    assert decided.fields == {"vllm_enable_sleep_mode": False, "vllm_tensor_parallel_size": 1,
                              "vllm_importance_sampling_correction": False}  # use_vllm and the mode stand
    text = "\n".join(decided.notes)
    for field in vllm_cpu.CUDA_ONLY:  # every CUDA-only setting of the paper recipe is named, with what replaces it
        assert f"grpo.{field}" in text
    assert "an engine in each of the policy's 2 process(es)" in text and vllm_cpu.KV_ENV in text


@pytest.mark.parametrize(("asked", "planned"), [(None, False), (True, True), (False, False)])
def test_the_cpu_path_drops_trls_importance_sampling_pass_unless_asked(monkeypatch, asked, planned):
    """The CPU engine samples with the trainer's fp32 weights: TRL's correction pass is off unless set."""
    monkeypatch.setattr(vllm_cpu, "cpu_blocker", lambda build=None: None)
    recipe = PAPER_VLLM if asked is None else {**PAPER_VLLM, "vllm_importance_sampling_correction": asked}
    decided = resolve_vllm(recipe, CPU)
    assert {**recipe, **decided.fields}["vllm_importance_sampling_correction"] is planned
    said = [n for n in decided.notes if "vllm_importance_sampling_correction" in n]
    assert said == ([f"p: grpo.vllm_importance_sampling_correction off on the CPU: {vllm_cpu.SAME_SAMPLER}"]
                    if asked is None else [])
    gpu = resolve_vllm(PAPER_VLLM, PolicyPlacement("p", "cuda", (0, 1), 2, 1), vllm_available=True)
    assert "vllm_importance_sampling_correction" not in gpu.fields  # a GPU keeps TRL's default (bf16 engine)


def test_plan_turns_vllm_off_on_the_cpu_with_the_reason(monkeypatch):
    monkeypatch.setattr(vllm_cpu, "cpu_blocker", lambda build=None: "this CPU has no AVX2, which vLLM's CPU kernels need")
    decided = resolve_vllm(PAPER_VLLM, CPU)
    assert decided.fields == {"use_vllm": False}
    assert decided.notes == ["p: vLLM generation turned off on the CPU: this CPU has no AVX2, which vLLM's CPU kernels "
                     "need; generation uses transformers"]


def test_paper_recipe_dry_run_on_this_cpu_box_says_what_the_cpu_path_does(tmp_path):
    from mutualrl.config.loader import load_run_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan

    # the paper recipe leaves the engine's share to the plan on a GPU; one a user sets is named on the CPU
    config = load_run_config("2qwen", overrides=["grpo.vllm_gpu_memory_utilization=0.5"]).config
    plan = make_launch_plan(config, tmp_path, gpus=0, simulate=True, cpu_cores=2)
    for p in plan.policies:
        assert p.grpo["use_vllm"] is True and p.grpo["vllm_enable_sleep_mode"] is False
        assert p.vllm == "colocate"
        assert any("sleep mode" in n and "CUDA-only" in n for n in p.notes)
        assert any("fraction of host RAM" in n for n in p.notes)


def llama_config(**kw):
    base = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "hidden_size": 64}
    return SimpleNamespace(**{**base, **kw})


def test_kv_cache_size_covers_a_generation_and_one_full_length_sequence():
    config = llama_config()  # 2 x 2 x 32 x 4 B x (K, V) = 1 KiB per token
    assert vllm_cpu.kv_bytes_per_token(config) == 1024
    assert vllm_cpu.kv_cache_gib(config, max_num_seqs=32, sequence_tokens=10, max_model_len=256) == 1  # the minimum
    # SmolLM2-135M-like: 30 layers, 3 KV heads of 64, fp32 = 46,080 B/token; 64 sequences of 1,024 tokens = 2.8 GiB
    smol = llama_config(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576)
    assert vllm_cpu.kv_cache_gib(smol, 64, 1024, 8192) == 4  # x 1.25 headroom, rounded up
    # a context longer than the whole batch: one max_model_len sequence must fit (vLLM refuses to start otherwise)
    assert vllm_cpu.kv_cache_gib(smol, 1, 100, 32768) == 2


def test_head_dim_16_is_refused_and_the_tiny_pool_is_not():
    assert "head_dim 16" in vllm_cpu.head_dim_problem(llama_config(num_attention_heads=4))
    assert vllm_cpu.head_dim_problem(llama_config()) is None
    from mutualrl.pools.tiny import TINY_MODELS

    for spec in TINY_MODELS.values():
        assert spec.hidden_size // spec.num_heads in vllm_cpu.CPU_HEAD_SIZES, spec.name


def test_worker_defaults_keep_vllm_only_when_it_can_run(monkeypatch):
    from mutualrl.training.policy_settings import device_defaults

    monkeypatch.setattr(vllm_cpu, "cpu_blocker", lambda build=None: None)
    assert "use_vllm" not in device_defaults() and device_defaults()["vllm_enable_sleep_mode"] is False
    monkeypatch.setattr(vllm_cpu, "cpu_blocker", lambda build=None: "vLLM is not installed")
    assert device_defaults()["use_vllm"] is False


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_doctor_names_the_build_and_says_it_is_usable(doctor_json):
    assert doctor_json.returncode == 0, doctor_json.stderr
    check = next(c for c in json.loads(doctor_json.stdout)["checks"] if c["name"] == "vllm")
    assert check["status"] == "ok" and check["detail"].startswith("vllm-cpu 0.30.0 (CPU build): usable on the CPU")
    assert check["info"] == {"build": {"distribution": "vllm-cpu", "version": "0.30.0", "kind": "cpu"},
                             "usable": True, "device": "cpu"}


def test_doctor_reports_a_blocked_build_without_importing_it(monkeypatch):
    from mutualrl import doctor

    monkeypatch.setattr(vllm_cpu, "installed_build", lambda: VllmBuild("vllm", "0.11.0"))
    check = doctor.check_vllm()
    assert check.status == "warn" and "vllm 0.11.0 (CUDA build): cannot run here" in check.detail
    assert check.info["usable"] is False
