"""A GPU plan counts the host RAM its node needs (issue 76): every rank's baseline, loading the weights, a checkpoint
save (ZeRO-3's gathered 16-bit state dict on rank 0, the optimizer partitions torch.save copies), checked against the
node's RAM (--ram, detected on a real node) like a CPU pool's, shown in the dry run with the Slurm --mem it makes;
every paper recipe has it, and every policy's KV cache and micro-batch are sized (Ministral-3b-instruct's shape)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.config.loader import load_run_config
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.host_memory import HostMemory, policy_host, slurm_mem_gb
from mutualrl.launch.plan.launch_plan import LaunchPlan, make_launch_plan
from mutualrl.launch.plan.render import render_plan
from recipe_paths import recipe_params

ROOT = Path(__file__).resolve().parents[1]
PAPER_RECIPES = sorted([*(p.stem for p in (ROOT / "recipes" / "experiments").glob("*.yaml")),
                        "2qwen", "3qwen", "4qwen", "llama-mist", "qwen-phi4"])
GIB = 2**30


def gpu_plan(recipe: str, ram_gib: float | None = 1024.0, *overrides: str):
    config = load_run_config(recipe, overrides=["launch.gpus=8", "launch.gpu_memory_gib=80", *overrides]).config
    return make_launch_plan(config, Path("/tmp/unused-run"), simulate=True, vllm_available=True, dry_run=True,
                            ram_gib=ram_gib)


def rendered(plan) -> str:
    out = io.StringIO()
    render_plan(plan, Console(file=out, width=400))
    return out.getvalue()


def test_one_policys_host_memory_by_hand():
    # Qwen2.5-Math-1.5B on 4 GPUs under ZeRO-3 with a reference model (beta > 0), as in 2qwen:
    # every rank 4.0 baseline + 0.5 dataset, and the launcher: 4 x 4.5 + 0.5 = 18.5 GiB;
    # start: rank 0 reads the bf16 checkpoint, 1.54e9 x 2 B = 2.868 GiB;
    # save: rank 0's gathered 16-bit state dict 2.868 GiB + 4 ranks x 4 B x 1.54e9 / 4 = 5.737 GiB -> 8.605 GiB
    p = policy_host("q", 1.54e9, 4, 3, reference=True, lora=False)
    assert p.steady_gib == 18.5
    assert p.start_gib == pytest.approx(3.08e9 / GIB) and p.save_gib == pytest.approx(9.24e9 / GIB)
    assert p.peak_gib == pytest.approx(18.5 + 9.24e9 / GIB) and p.peak_moment == "save"
    # ZeRO-2: every rank builds the fp32 model on the CPU and TRL loads the reference beside it: 4 x 1.54e9 x 4 x 2
    zero2 = policy_host("q", 1.54e9, 4, 2, reference=True, lora=False)
    assert zero2.start_gib == pytest.approx(49.28e9 / GIB) and zero2.peak_moment == "start"
    assert zero2.save_gib == pytest.approx((1.54e9 * 2 + 1.54e9 * 4) / GIB)  # the 16-bit copy + the partitions
    # DDP: fp32 weights copied to write them, rank 0's largest optimizer tensor (the embedding) one at a time
    ddp = policy_host("q", 1.54e9, 1, 0, reference=True, lora=False, largest_params=151936 * 1536)
    assert ddp.start_gib == pytest.approx(6.16e9 / GIB)
    assert ddp.save_gib == pytest.approx((1.54e9 * 4 + 151936 * 1536 * 4) / GIB)
    # LoRA under ZeRO-3: the gathered state dict still, no optimizer partitions; 2 dataloader workers a rank
    lora = policy_host("q", 1.54e9, 4, 3, reference=False, lora=True, dataloader_workers=2)
    assert lora.save_gib == pytest.approx(3.08e9 / GIB) and lora.steady_gib == 4 * (4.5 + 2 * 1.0) + 0.5
    assert slurm_mem_gb(55.605) == 70  # 55.605 x 1.25 = 69.5, rounded up


def test_2qwen_on_8_gpus_needs_about_56_gib_of_host_ram_and_asks_slurm_for_70():
    plan = gpu_plan("2qwen")
    host = plan.host
    assert [(p.policy, p.ranks) for p in host.policies] == [("qwen2.5-math-1.5b", 4), ("qwen3-1.7b-base", 4)]
    # 18.5 + 8.605 (Qwen2.5-Math-1.5B) + 18.5 + 6 x 1.7e9 / 2^30 = 9.500 (Qwen3-1.7B) + 0.5 for mutualrl train
    assert host.need_gib == pytest.approx(18.5 + 9.24e9 / GIB + 18.5 + 10.2e9 / GIB + 0.5)
    assert round(host.need_gib, 1) == 55.6 and host.slurm_mem_gb == 70 and host.ram_gib == 1024.0
    text = rendered(plan)
    assert "Host RAM per node at the peak: about 55.6 GiB against 1024.0 GiB of RAM (5%); Slurm --mem 70G" in text
    assert "qwen2.5-math-1.5b 27.1 GiB (4 ranks 18.5 + max(start 2.9, save 8.6))" in text
    assert not [w for w in plan.warnings if "host memory" in w]
    unknown = rendered(gpu_plan("2qwen", None))
    assert "about 55.6 GiB against RAM unknown (--ram GIB checks it)" in unknown
    data = plan.to_json()
    assert data["host"]["need_gib"] == host.need_gib and LaunchPlan.from_json(data).to_json() == data
    assert isinstance(LaunchPlan.from_json(data).host, HostMemory)


def test_a_node_without_the_host_ram_is_refused_like_a_cpu_pool_and_force_warns():
    with pytest.raises(PlacementError, match=r"^this node cannot hold the run's host memory: about 55\.6 GiB of RAM "
                       r"needed, 40\.0 GiB here; qwen3-1\.7b-base's 4 processes alone take 28\.0 GiB at its save .*"
                       r"--ram GIB says what a simulated node has.*or --force$"):
        gpu_plan("2qwen", 40.0)
    forced = gpu_plan("2qwen", 40.0, "launch.force=true")
    assert any(w.startswith("this node cannot hold the run's host memory") and w.endswith("(starting anyway: --force)")
               for w in forced.warnings)


def test_the_ram_option_reaches_the_dry_run():
    done = CliRunner().invoke(app, ["train", "--pool", "2qwen", "--dry-run", "--gpus", "8", "--gpu-memory", "80",
                                    "--ram", "48"], terminal_width=400)
    assert done.exit_code != 0 and "about 55.6 GiB of RAM needed, 48.0 GiB here" in done.output, done.output
    config = load_run_config("2qwen", overrides=["launch.gpus=8", "launch.ram_gib=512"]).config
    plan = make_launch_plan(config, Path("/tmp/unused-run"), simulate=True, vllm_available=True, dry_run=True)
    assert plan.host.ram_gib == 512.0  # launch.ram_gib (--ram) is the simulated node's RAM


def test_llama_mist_has_a_kv_cache_figure_and_a_checked_micro_batch():
    plan = gpu_plan("llama-mist")
    ministral = plan.policy("ministral-3b-instruct")
    e = ministral.engine
    # state on each of its 4 GPUs under ZeRO-3: (16 + 2 reference) B x 3.32e9 / 4 = 13.91 GiB; share
    # (80 - 13.91 - 6) / 80 = 0.751 -> 0.75: 60 GiB, less 3.32e9 x 2 B = 6.18 GiB of weights, 1 GiB of runtime and
    # 2 x 1024 x 32000 x 4 B = 0.24 GiB of sampler logits: 52.57 GiB; a sequence of 4096 tokens holds
    # 2 x 14 layers x 8 KV heads x 128 x 2 B x 4096 = 0.21875 GiB -> 240 sequences
    assert e.gpu_memory_utilization == 0.75 and e.weights_gib == 6.18
    assert e.kv_cache_gib == pytest.approx(52.57) and e.kv_capacity_sequences == 240
    assert ministral.micro_batch.activation_gib is not None  # sized from the shape, checked against the card
    assert ministral.grpo["per_device_train_batch_size"] == 10  # it fits beside the state: nothing lowered
    text = rendered(plan)
    assert "240 sequences of 4096 tokens" in text and "model shape unknown" not in text


@pytest.mark.parametrize("recipe", recipe_params(PAPER_RECIPES))
def test_every_paper_recipe_on_8_gpus_of_80_gib_says_its_host_ram_and_sizes_every_kv_cache(recipe):
    plan = gpu_plan(recipe)
    host = plan.host
    assert host is not None and not host.unknown and len(host.policies) == len(plan.policies), recipe
    assert host.ram_gib == 1024.0 and 0 < host.need_gib < host.ram_gib
    assert f"Host RAM per node at the peak: about {host.need_gib:.1f} GiB against 1024.0 GiB" in rendered(plan)
    for p in plan.policies:
        assert p.engine.kv_cache_gib is not None and p.engine.kv_capacity_sequences > 0, (recipe, p.name)
        assert p.micro_batch.activation_gib is not None, (recipe, p.name)


def test_the_detected_ram_is_the_cgroups_limit_where_it_is_lower(tmp_path):
    from mutualrl.launch.plan.detect import cgroup_memory_limit_gib

    proc = tmp_path / "cgroup"
    root = tmp_path / "fs"
    # cgroup v2: a Slurm task's step under its job, the job limited to 70 GiB (--mem 70G), the step unlimited
    proc.write_text("0::/slurm/job_7/step_0\n")
    (root / "slurm" / "job_7" / "step_0").mkdir(parents=True)
    (root / "slurm" / "job_7" / "memory.max").write_text(f"{70 * GIB}\n")
    (root / "slurm" / "job_7" / "step_0" / "memory.max").write_text("max\n")
    assert cgroup_memory_limit_gib(proc, root) == 70.0
    # cgroup v1: the memory controller's line; "no limit" is a number near 2^63
    proc.write_text("4:memory:/docker/abc\n1:cpu:/docker/abc\n")
    (root / "memory" / "docker" / "abc").mkdir(parents=True)
    (root / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroup_memory_limit_gib(proc, root) is None
    (root / "memory" / "docker" / "memory.limit_in_bytes").write_text(f"{16 * GIB}\n")
    assert cgroup_memory_limit_gib(proc, root) == 16.0
    assert cgroup_memory_limit_gib(tmp_path / "none", root) is None


def test_a_slurm_sweep_asks_for_the_host_ram_its_runs_need(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    base = ["sweep", "--pool", "2qwen", "--regimes", "sgt", "--seeds", "1", "-o", "sw", "--slurm", "--slurm-gpus", "8",
            "--dry-run"]
    done = runner.invoke(app, base, terminal_width=400)
    assert done.exit_code == 0, done.output
    assert "each 8 GPUs, 32 CPUs, 70 GB memory" in done.output  # 55.6 GiB + 25 %; 4 CPUs a GPU rank
    low = runner.invoke(app, [*base, "--slurm-mem", "48"], terminal_width=400)
    assert low.exit_code == 2 and ("--slurm-mem 48: a run of the sweep needs about 55.6 GiB of host RAM on a node of 8 "
                                   "GPUs") in low.output and "give --slurm-mem 70" in low.output, low.output
    kept = runner.invoke(app, [*base, "--slurm-mem", "200"], terminal_width=400)
    assert kept.exit_code == 0 and "200 GB memory" in kept.output, kept.output
