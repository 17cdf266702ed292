"""``mutualrl train --preflight``: every worker of a paper recipe started from a GPU node's plan, on this CPU box, up
to its first GPU touch.

The paper models' tokenizers and configs come from a hub cache of stand-ins (tests/hub_standins.py: real
vocabularies of each family, no weights), read offline as a GPU node reads the hub cache. One recipe is started for
real through ``accelerate launch`` (2 policies x 2 ranks); every paper recipe's every policy runs the same worker check
in this process, with the environment accelerate's own launcher code gives rank 0 (a real start of each costs ~2
CPU-minutes of imports: torch, TRL, DeepSpeed and vLLM in every rank)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from e2e_helpers import free_ports
from hub_standins import write_hub_cache
from mutualrl.config.loader import list_named_recipes, load_run_config
from mutualrl.launch.plan.launch_plan import LaunchPlan, make_launch_plan
from mutualrl.launch.rundir.prepare import prepare_launch
from mutualrl.run_folder import RunPaths
from mutualrl.training.preflight import preflight_policy
from recipe_paths import recipe_params

CPU_POOLS = {"tiny", "smol", "smol-arith", "smol-qa", "smol-lexicon"}
PAPER_RECIPES = sorted(path.stem for path in list_named_recipes() if path.stem not in CPU_POOLS)
FEWER_PROMPTS = ("task.train_limit=32", "task.eval_limit=8")
"""In process, every recipe's prompts are cut (the joint length filter tokenizes each with every policy's tokenizer:
~40 s of a commonsense pool's 50 s with all of them; 256 and 64 still cost 7 s over the 17 recipes): 32 hold the first
batch (8-10 rows), all the check reads of them; the real start below reads them all."""


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    return write_hub_cache(tmp_path_factory.mktemp("hub"))


@pytest.fixture
def offline_hub(hub_cache, monkeypatch) -> Path:
    """The stand-in cache as this process's hub cache, offline: the variables, and huggingface_hub's constants,
    which it reads from them once, when first imported (by an earlier test of this worker, likely)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hub_cache


@pytest.fixture
def one_rank(monkeypatch):
    """This process as rank 0 of a one-rank group (GRPOConfig sets up torch.distributed: with the plan's world size
    it would wait for ranks that never come); the process group and accelerate's state are torn down after."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_ports(1)))
    yield {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    import torch

    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState._reset_state()
    GradientState._reset_state()


def accelerate_rank_zero_env(argv: list[str]) -> dict[str, str]:
    """What ``accelerate launch`` (argv as the plan wrote it) puts in its first rank's environment, by accelerate's own
    code (``_validate_launch_command``, ``launch_command``'s DeepSpeed fields, then ``prepare_deepspeed_cmd_env`` or
    ``prepare_multi_gpu_env``); torchrun adds the rank variables."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(argv[argv.index("mutualrl.host.accelerate_launch") + 1:])
    args, defaults, mp_from_config_flag = _validate_launch_command(args)
    if args.use_deepspeed:  # as accelerate's launch_command does before its deepspeed_launcher
        fields = list(defaults.deepspeed_config.keys()) if defaults else []
        args.deepspeed_fields_from_accelerate_config = ",".join(fields + ["mixed_precision"] * mp_from_config_flag)
    env = prepare_deepspeed_cmd_env(args)[1] if args.use_deepspeed else prepare_multi_gpu_env(args)
    return env


def planned_folder(recipe: str, folder: Path) -> LaunchPlan:
    """``recipe``'s run folder prepared and planned as ``train --preflight --gpus 8 --gpu-memory 80`` does."""
    config = load_run_config(recipe, overrides=["launch.gpus=8", "launch.gpu_memory_gib=80", *FEWER_PROMPTS]).config
    config, _ = prepare_launch(RunPaths(folder), config, recipe, False, [], Console(file=io.StringIO()))
    plan = make_launch_plan(config, folder, gpus=8, simulate=True, vllm_available=True, dry_run=True)
    plan.write()
    return plan


@pytest.mark.slow  # ~60 s of CPU for the 17 recipes: the full suite, not the fast tier
@pytest.mark.parametrize("recipe", recipe_params(PAPER_RECIPES))
def test_each_worker_of_every_paper_recipe_passes_its_check_from_an_8_gpu_80_gib_plan(recipe, offline_hub, one_rank,
                                                                                      tmp_path, monkeypatch):
    plan = planned_folder(recipe, tmp_path / "run")
    for policy in plan.policies:
        spec = policy.launch
        assert "mutualrl.host.accelerate_launch" in spec.argv, policy.name  # a GPU plan starts ranks through accelerate
        with monkeypatch.context() as env:
            for key, value in {**spec.env, **accelerate_rank_zero_env(spec.argv), **one_rank}.items():
                env.setenv(key, value)
            report = preflight_policy(RunPaths(tmp_path / "run"), policy.name)
        checks = report["checks"]
        assert checks["settings"] == "the planned file, its digest verified"
        assert checks["DeepSpeed"].startswith("ZeRO-3, agrees"), (policy.name, checks)
        assert f"max_model_len {policy.grpo['vllm_max_model_length']}" in checks["vLLM"], checks
        assert "a batch of" in checks["data"] and "scored" in checks["rewards"]


@pytest.mark.slow
def test_a_setting_the_worker_refuses_is_found_by_its_check(offline_hub, one_rank, tmp_path, monkeypatch):
    """fp16 beside the paper's bf16: GRPOConfig refuses it in the worker, never in the plan; the check raises it."""
    config = load_run_config("2qwen", overrides=["launch.gpus=8", "launch.gpu_memory_gib=80", "grpo.fp16=true",
                                                 *FEWER_PROMPTS]).config
    config, _ = prepare_launch(RunPaths(tmp_path), config, "2qwen", False, [], Console(file=io.StringIO()))
    plan = make_launch_plan(config, tmp_path, gpus=8, simulate=True, vllm_available=True, dry_run=True)
    plan.write()
    spec = plan.policies[0].launch
    for key, value in {**spec.env, **accelerate_rank_zero_env(spec.argv), **one_rank}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match="fp16 and bf16"):
        preflight_policy(RunPaths(tmp_path), plan.policies[0].name)


@pytest.mark.slow
@pytest.mark.user_start
def test_the_readme_recipe_starts_every_rank_through_accelerate_and_leaves_nothing(hub_cache, tmp_path):
    """``mutualrl train --pool 2qwen --preflight --gpus 4 --gpu-memory 80`` as a user types it: 2 policies x 2 ranks
    started by ``accelerate launch`` (torchrun), each verified, then the folder deleted. (docs/launch.md's line says
    ``--gpus 8``: 4 ranks a policy, the same start, each rank ~7 s of CPU here; the 8-GPU plan of every recipe is
    checked in process above.)"""
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"}
    run = tmp_path / "runs" / "2qwen"
    run.parent.mkdir()  # the preflight folder goes beside the run, on its filesystem
    done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--pool", "2qwen", "--gpus", "4",
                           "--gpu-memory", "80", "--preflight", "-o", str(run)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "2 policies started" in out and "4 ranks" in out, out
    assert out.count("passed, 2/2 ranks reported") == 2, out
    assert "digest verified" in out and "ZeRO-3, agrees with GRPOConfig" in out and "max_model_len 4096" in out
    assert not run.exists() and list((tmp_path / "runs").iterdir()) == []  # nothing left behind


@pytest.mark.slow
@pytest.mark.user_start
def test_a_worker_that_fails_its_check_fails_the_preflight_naming_it(tmp_path):
    """The tiny pool on this CPU: a worker whose report cannot be written (a full disk, injected) exits with its
    one line; the preflight says which policy failed and why, exits 1 and still deletes the folder."""
    env = {**os.environ, "MUTUALRL_DEBUG_DISK_FULL": "tiny-sp-rank0"}
    run = tmp_path / "runs" / "tiny"
    run.parent.mkdir()
    done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--preflight", "-o", str(run)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "tiny-bpe: passed, 1/1 ranks reported" in out, out
    assert "tiny-sp: failed, 0/1 ranks reported" in out and "tiny-sp failed" in out, out
    assert "no space" in out.lower() or "ENOSPC" in out or "exit" in out, out
    assert list((tmp_path / "runs").iterdir()) == []


ACCELERATE_FAILURE_LOG = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/mutualrl/training/worker.py", line 400, in main
ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7
W1127 10:00:00.000000 1 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 2 closing signal SIGTERM
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/accelerate/commands/launch.py", line 1082, in deepspeed_launcher
    distrib_run.run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
mutualrl.training.worker FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 12)
============================================================
"""


def test_a_rank_started_through_accelerate_is_reported_by_its_own_error_not_torchruns(tmp_path):
    """After a rank fails, torchrun (and accelerate's single-process launcher) end the log with their own exception,
    which names no reason: the preflight's line is the rank's."""
    from mutualrl.launch.preflight import last_error

    log = tmp_path / "policy.log"
    log.write_text(ACCELERATE_FAILURE_LOG)
    assert last_error(log) == "ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7"
    log.write_text("error: policy 'a': no prompt\nsubprocess.CalledProcessError: Command '['python']' returned "
                   "non-zero exit status 1.\n")
    assert last_error(log) == "error: policy 'a': no prompt"


def test_a_gpu_recipe_with_tf32_is_built_on_a_machine_without_gpus(tmp_path, monkeypatch):
    """``grpo.tf32: true`` (an Ampere card's matmul setting) makes transformers ask the card; on a login node the
    preflight answers as the plan's card does, as for bf16, and leaves this process's tf32 switch and the library as
    they were."""
    import torch
    from transformers import training_args
    from trl import GRPOConfig

    from mutualrl.training.preflight import planned_gpu_capability

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a login node, on a GPU box too
    grpo = {"output_dir": str(tmp_path), "bf16": True, "tf32": True, "report_to": "none"}
    before = (training_args.is_torch_tf32_available, training_args.enable_tf32, torch.backends.fp32_precision)
    with planned_gpu_capability(grpo) as note:
        assert GRPOConfig(**grpo).tf32 is True
    assert note == "no GPU here: bf16 and tf32 support answered as an Ampere-or-newer card answers it"
    assert (training_args.is_torch_tf32_available, training_args.enable_tf32, torch.backends.fp32_precision) == before
    with pytest.raises(ValueError, match="tf32 requires"):  # what the check stands in for
        GRPOConfig(**{**grpo, "bf16": False})


def test_a_failed_policy_shows_the_end_of_its_log_which_is_deleted_with_the_folder(tmp_path):
    """The folder (and the worker's log in it) is deleted whatever happened: the log's last lines are printed under
    the failed policy, as written (no console markup read in them), before its one-line reason."""
    import io

    from mutualrl.launch.preflight import LOG_TAIL_LINES, PolicyPreflight, log_tail, print_results

    log = tmp_path / "a.log"
    log.write_text("".join(f"line {i}\n" for i in range(30)) + "[bold]not markup[/]\n" + ACCELERATE_FAILURE_LOG)
    failed = PolicyPreflight("a", 4, exit_code=1, error="ValueError: x", log_tail=log_tail(log))
    out = io.StringIO()
    print_results([failed, PolicyPreflight("b", 1, reports=[{"checks": {}}], exit_code=0)], Console(file=out, width=200))
    text = out.getvalue()
    assert len(failed.log_tail) == LOG_TAIL_LINES and "  |   exitcode  : 1 (pid: 12)" in text and "  | [bold]not markup[/]" in text
    assert "a: failed, 0/4 ranks reported" in text and text.rstrip().splitlines()[-2].endswith("error: ValueError: x")
    assert "b: passed, 1/1 ranks reported" in text
    assert log_tail(tmp_path / "missing.log") == []


@pytest.mark.user_start
def test_a_stop_while_workers_start_or_check_ends_every_one_started(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) between two policies' starts, or while waiting for their checks: each worker already
    started is killed and waited for before the folder is deleted (none runs on, writing into it)."""
    from types import SimpleNamespace

    from mutualrl.launch import preflight
    from mutualrl.launch.supervise import worker_process

    procs = []

    def start(spec, paths, simulated=False):
        if spec.policy == "interrupted":
            raise KeyboardInterrupt("SIGINT")
        with (tmp_path / f"{spec.policy}.log").open("ab") as log:
            procs.append(worker_process.start_worker_process(
                [sys.executable, "-c", "import time; time.sleep(120)"], dict(os.environ), tmp_path, log))
        return procs[-1]

    monkeypatch.setattr(preflight, "start", start)
    with pytest.raises(KeyboardInterrupt):
        preflight.start_all([SimpleNamespace(policy="a"), SimpleNamespace(policy="interrupted")], RunPaths(tmp_path))
    assert procs[0].poll() == -9  # started before the stop: killed, not left running

    started = preflight.start_all([SimpleNamespace(policy="b")], RunPaths(tmp_path))

    class Interrupted:  # a command whose wait the Ctrl-C interrupts (its own group: b's, for the test)
        pid, calls = started["b"].pid, 0

        def wait(self, timeout=None):
            self.calls += 1
            if self.calls == 1:
                raise KeyboardInterrupt("SIGINT")
            return started["b"].wait()

    with pytest.raises(KeyboardInterrupt):
        preflight.wait_for({"c": Interrupted(), **started}, {}, 60.0)
    assert started["b"].poll() == -9


@pytest.mark.user_start
def test_the_ranks_of_a_plan_for_a_bigger_node_hide_this_machines_gpus(tmp_path, monkeypatch):
    """``--preflight --gpus 8`` on a machine with 1 GPU (a login node's T4): accelerate hands each rank the plan's ids
    (``0,1,2,3``), so local rank 1 named no card and rank 0 a card refusing bf16. The simulated plan's workers are
    started flagged so, and each rank hides this machine's GPUs before anything asks CUDA."""
    from types import SimpleNamespace

    from mutualrl.launch.preflight import start
    from mutualrl.training.preflight import PREFLIGHT_ENV, SIMULATED, hide_gpus_of_this_machine

    said = tmp_path / "logs" / "a.log"
    spec = SimpleNamespace(policy="a", log_path=str(said), env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, cwd=None,
                           argv=[sys.executable, "-c", f"import os; print(os.environ[{PREFLIGHT_ENV!r}])"])
    assert start(spec, RunPaths(tmp_path), simulated=True).wait(timeout=60) == 0
    assert start(spec, RunPaths(tmp_path)).wait(timeout=60) == 0
    assert said.read_text().split() == [SIMULATED, "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv(PREFLIGHT_ENV, "1")
    assert not hide_gpus_of_this_machine() and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    monkeypatch.setenv(PREFLIGHT_ENV, SIMULATED)
    assert hide_gpus_of_this_machine() and os.environ["CUDA_VISIBLE_DEVICES"] == ""
