"""One policy's training process: ``python -m mutualrl.training.worker --run-dir RUN --policy NAME``.

Started by the launcher (``mutualrl train``) once per policy -- as a plain subprocess on
CPU, or under ``accelerate launch`` with the policy's own GPUs (one process
group per policy, since several DeepSpeed engines in one process break: docs/launch.md). It reads the
resolved run config (all but its GRPO fields: its ``GRPOConfig`` is the plan's ``RUN/launch/<policy>.grpo.json``)
and prepared prompts from the run folder, trains with
:class:`~mutualrl.training.trainer.MutualGRPOTrainer`, and reports through files:
``metrics/<policy>.jsonl``, ``status/<policy>.json``, ``eval/<policy>/``, and the SEE. If it
fails, it leaves a failure marker in the SEE so that peers stop waiting at once; a write that
failed for space or I/O (checkpoint, SEE shard, metrics, eval result) is one line naming the
path and the free space, and exit code 28 (``write_failures.DISK_FULL_EXIT``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from mutualrl import fault_injection
from mutualrl.config.resolved import load_resolved_config
from mutualrl.config.schema import PolicyConfig
from mutualrl.errors import MutualRLError, StorageError, UsageError
from mutualrl.host.count_logs import note_line
from mutualrl.host.process_exit import exit_without_teardown
from mutualrl.host.process_start import collector_paused_for_imports, imports_done
from mutualrl.regimes.core.registry import get_regime
from mutualrl.run_folder import RunPaths, run_id
from mutualrl.training.policy_settings import (
    find_policy,
    load_tokenizer_only,
    recipe_grpo_args,
    refuse_untested_versions,
)
from mutualrl.training.preflight import in_preflight, preflight_policy
from mutualrl.training.trackers import guard_tracker_writes
from mutualrl.training.stop_request import STOPPED_EXIT, install_stop_handlers
from mutualrl.ops.watchdog import REJOIN_ENV, start_launcher_watchdog
from mutualrl.write_failures import DISK_FULL_EXIT, report_thread_write_failures, storage_error, storage_errors

log = logging.getLogger("mutualrl.worker")

START_LOG_ENV = "MUTUALRL_POLICY_START_LOG"
"""When set, a file each policy process appends its pid to as it starts: how the test suite counts its launches
(``tests/conftest.py``, ``POLICY_PROCESS_BUDGET``), killed ones included."""


def note_start() -> None:
    note_line(START_LOG_ENV, str(os.getpid()))


def prepare_cpu_vllm(args: Any, model: Any, tokenizer: Any, examples: list, chat: bool, policy: str) -> None:
    """Before TRL starts a colocated vLLM engine on the CPU: refuse a head size its attention lacks,
    and size its KV cache (``VLLM_CPU_KVCACHE_SPACE``, GiB; a value already set wins)."""
    if not (args.use_vllm and args.use_cpu and args.vllm_mode == "colocate"):
        return
    from mutualrl.host.vllm_cpu import KV_ENV, head_dim_problem, kv_cache_gib
    from mutualrl.training.data import prompt_token_length

    problem = head_dim_problem(model.config)
    if problem is not None:
        raise UsageError(f"policy {policy!r}: vLLM on the CPU: {problem}")
    if os.environ.get("WORLD_SIZE", "1") == "1" and os.environ.get("MASTER_PORT", "") in ("", "0", "auto"):
        # The engine's one-rank process group: TRL would try 29500 first, and two policies starting together
        # both find it free; the kernel's choice of a free port differs between processes.
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    if os.environ.get(KV_ENV):
        log.info("policy %s: vLLM KV cache %s=%s GiB (set by you)", policy, KV_ENV, os.environ[KV_ENV])
        return
    longest = max((prompt_token_length(tokenizer, ex.for_policy(chat), chat) for ex in examples), default=0)
    sequence = longest + args.max_completion_length
    max_len = args.vllm_max_model_length or getattr(model.config, "max_position_embeddings", None) or sequence
    seqs = args.per_device_train_batch_size * args.vllm_tensor_parallel_size * args.steps_per_generation
    dtype_bytes = next(model.parameters()).element_size()
    os.environ[KV_ENV] = str(kv_cache_gib(model.config, seqs, sequence, max_len, dtype_bytes))
    log.info("policy %s: vLLM KV cache %s=%s GiB (%d sequences of up to %d tokens, max_model_len %d)",
             policy, KV_ENV, os.environ[KV_ENV], seqs, sequence, max_len)


def block_unused_vllm(args: Any) -> None:
    """Make vLLM absent to a worker whose policy does not generate with it.

    TRL's trainer module imports vLLM whenever it is installed (about 3 s of CPU per worker start); a policy
    with ``use_vllm`` off never calls it. ``sys.modules["vllm"] = None`` is Python's own "not importable"
    mark: ``find_spec`` then answers None, so TRL takes its no-vLLM branch (docs/launch.md "Device adaptations").
    """
    if not getattr(args, "use_vllm", False):
        sys.modules.setdefault("vllm", None)


TRAINING_STACK = ("datasets", "mutualrl.pools.loading", "mutualrl.training.callbacks", "mutualrl.training.data",
                  "mutualrl.training.adapters", "mutualrl.tasks.registry", "mutualrl.tasks.reward_funcs",
                  "mutualrl.training.catch_up")
"""The modules :func:`run_policy` trains with, beyond the worker module's own (TRL's trainer through ``catch_up``)."""


def import_training_stack(args: Any) -> None:
    """Import :data:`TRAINING_STACK` (seconds of CPU: torch, transformers, TRL, datasets), vLLM only where ``args``
    generate with it. :func:`main` pauses the garbage collector around these imports (host/process_start.py);
    ``benchmarks/worker_start.py`` times this very function, so the two cannot drift apart."""
    import importlib

    block_unused_vllm(args)  # before TRL's trainer module, which imports vLLM whenever it is installed
    for module in TRAINING_STACK:
        importlib.import_module(module)


def run_policy(paths: RunPaths, policy_name: str, resume_from: str | None = None) -> int | None:
    from mutualrl.training.grpo_args import build_grpo_config, planned_grpo_args
    from mutualrl.training.trackers import tensorboard_dir_env

    config = load_resolved_config(paths, grpo=False)  # the run's settings; no GRPO field comes from config.yaml
    policy = find_policy(config, policy_name)
    # The plan's arguments as they are (training/grpo_args.py); started by hand without a plan: the recipe's.
    grpo = planned_grpo_args(paths, policy_name, lambda: recipe_grpo_args(paths, policy_name))
    refuse_untested_versions(grpo)
    args = build_grpo_config(grpo)  # trl's config: no vLLM
    import_training_stack(args)  # the libraries, with the collector paused by main()
    imports_done()  # ... and on again (host/process_start.py): training is unchanged
    os.environ.update(tensorboard_dir_env(os.environ, args.run_name))  # a user's TensorBoard folder: one per policy
    from mutualrl.training.resumed_run import ResumedSchedule, continue_trackers, wandb_run_env

    os.environ.update(wandb_run_env(args.report_to, run_id(paths), policy_name, os.environ))  # one run, resumed too

    from datasets import Dataset

    from mutualrl.training.callbacks import HeartbeatCallback, MetricsCallback, StatusCallback
    from mutualrl.training.data import to_trl_rows, uses_chat_template
    from mutualrl.training.adapters import make_regime_adapter
    from mutualrl.tasks.reward_funcs import reward_spec
    from mutualrl.training.catch_up import trainer_class
    from mutualrl.training.stop_callback import StopAtStepCallback

    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))

    status = StatusCallback(paths, policy_name)
    if rank == 0:
        status.path.parent.mkdir(parents=True, exist_ok=True)
        paths.reward_call(policy_name).unlink(missing_ok=True)  # from a process of this run that ended inside one
    tokenizer, model = load_policy(policy, args)
    chat = uses_chat_template(tokenizer, policy.chat_template)
    train_examples, eval_examples = read_prompts(paths, config)
    dataset = Dataset.from_list(to_trl_rows(train_examples, chat))

    exchange = open_exchange(config, paths, policy, rank, world_size, args, resume_from)
    regime = make_regime_adapter(config, policy_name, exchange)
    scoring = reward_spec(config.task, grpo)  # training and validation score alike
    from mutualrl.tasks.reward_form import dataset_form_rewards

    reward = dataset_form_rewards(scoring, [*train_examples, *eval_examples], tokenizer, args.max_completion_length,
                                  call_marker=paths.reward_call(policy_name))
    validation = validation_callback(paths, policy_name, config, args, eval_examples, tokenizer, chat, status, scoring,
                                     exchange)
    stop = StopAtStepCallback(paths, status, validation)  # after the status (its step), before the validation
    callbacks = [MetricsCallback(paths, policy_name, config.regime.name), status, stop, validation, ResumedSchedule()]
    if exchange is not None:
        callbacks.append(HeartbeatCallback(exchange))
    peft_config = lora_config(policy)
    prepare_cpu_vllm(args, model, tokenizer, train_examples, chat, policy_name)
    trainer = trainer_class(config.see)(  # MutualGRPOTrainer; one that may skip rounds under see.catch_up
        model=model, reward_funcs=reward, args=args, train_dataset=dataset,
        processing_class=tokenizer, callbacks=callbacks, peft_config=peft_config,
        policy_name=policy_name, regime=regime,
        vllm_caps=(config.launch.vllm_max_num_seqs, config.launch.vllm_max_num_batched_tokens),
    )
    guard_tracker_writes(trainer.callback_handler.callbacks)  # a full disk under TensorBoard: one line, its folder
    continue_trackers(trainer.callback_handler.callbacks, Path(args.output_dir), resume_from)
    trainer.generation_delay = fault_injection.step_delay(policy_name)  # a slow peer on purpose (tests, benchmarks)
    validation.trainer = trainer
    if trainer.accelerator.is_main_process:  # a long wait for peers shows as a phase, not as a stall
        regime.phase_hook = lambda phase: status.write(trainer.state, phase)
    log_start(trainer, policy_name, config.regime.name, len(train_examples), len(eval_examples))
    return train_and_save(trainer, tokenizer, resume_from, validation, stop, paths.final_model(policy_name))


def read_prompts(paths: RunPaths, config: Any) -> tuple[list, list]:
    """The run's prepared training prompts, and its held-out ones (none without ``data/eval.jsonl``) cut to
    ``validation.limit``: a smaller limit given on ``--resume`` is applied."""
    from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, read_examples

    train_examples = read_examples(paths.data / TRAIN_FILE)
    eval_examples = (read_examples(paths.data / EVAL_FILE) if (paths.data / EVAL_FILE).exists() else []
                     )[:config.validation.limit]
    return train_examples, eval_examples


def validation_callback(paths: RunPaths, policy_name: str, config: Any, args: Any, eval_examples: list,
                        tokenizer: Any, chat: bool, status: Any, scoring: Any, exchange: Any) -> Any:
    """The held-out greedy validation (``validation.*``) every ``validation.every_steps`` of the run's cadence,
    scored as training is (``scoring``) and per ``task.group_column``."""
    from mutualrl.config.cadence import resolve_cadence, validation_interval
    from mutualrl.tasks.registry import task_groups
    from mutualrl.training.callbacks import ValidationCallback

    cadence = resolve_cadence(config.schedule, config.batch, args.num_iterations)
    return ValidationCallback(
        paths, policy_name, config.regime.name, eval_examples, tokenizer, chat,
        every_steps=validation_interval(cadence, config.validation.every_steps),  # optimizer steps
        max_new_tokens=config.validation.max_new_tokens or args.max_completion_length,
        batch_size=config.validation.batch_size, at_start=config.validation.at_start, status=status,
        verifier=scoring, group_of=task_groups(config.task.name, eval_examples, config.task.group_column),
        exchange=exchange,
    )


def train_and_save(trainer: Any, tokenizer: Any, resume_from: str | None, validation: Any, stop: Any,
                   final: Path) -> int | None:
    """Train (or finish) and save the final model; a policy the launcher stopped at a step (training/stop_request.py)
    saves none (its run is not finished) and that step is returned, else None."""
    train_or_finish(trainer, resume_from, validation)
    if stop.stopped_at is None:
        save_outputs(trainer, tokenizer, final)
    return stop.stopped_at


def open_exchange(config: Any, paths: RunPaths, policy: Any, rank: int, world_size: int, args: Any,
                  resume_from: str | None) -> Any:
    """This rank's SEE (paper, "Shared Experience Exchange"), heartbeat started; None when the regime shares
    nothing and standalone records are off. A policy restarted into its running pool rejoins it first."""
    if not (get_regime(config.regime.name).needs_exchange or config.see.record_standalone):
        return None
    from mutualrl.see import ExperienceExchange
    from mutualrl.see.liveness import start_heartbeat_thread

    exchange = ExperienceExchange.from_settings(
        config.see, paths.root, run_id=run_id(paths), policy=policy.name, rank=rank, world_size=world_size,
        policies=[p.name for p in config.pool.policies],
        provenance={"model": policy.model, "tokenizer": policy.tokenizer or policy.model},
    )
    if os.environ.get(REJOIN_ENV):  # restarted into the running pool: peers readmit us once we catch up
        from mutualrl.see.rounds import round_stride
        from mutualrl.see.async_rounds.consumption import rejoin_pool

        rejoin_pool(exchange, resume_from, round_stride(args, required=False))
    start_heartbeat_thread(exchange)  # beats through long steps: silence means stopped or frozen
    return exchange


def lora_config(policy: PolicyConfig) -> Any:
    """peft's ``LoraConfig`` of a policy trained as a LoRA adapter (``pool.policies.<name>.lora``), else None."""
    if policy.lora is None:
        return None
    from peft import LoraConfig

    from mutualrl.config.lora import lora_kwargs

    return LoraConfig(**lora_kwargs(policy.lora))


def log_start(trainer: Any, policy_name: str, regime: str, n_train: int, n_eval: int) -> None:
    import torch

    plugin = trainer.accelerator.state.deepspeed_plugin
    engine = f"DeepSpeed ZeRO-{plugin.zero_stage}" if plugin is not None else str(trainer.accelerator.distributed_type)
    log.info("policy %s: %d train prompts, %d eval prompts, regime %s, %s on %s x%d, torch threads %d",
             policy_name, n_train, n_eval, regime, engine, trainer.accelerator.device,
             trainer.accelerator.num_processes, torch.get_num_threads())


def train_or_finish(trainer: Any, resume_from: str | None, validation: Any) -> None:
    """Train (from ``resume_from`` if given), or only finish from a checkpoint that already holds every step
    (the Trainer would run one more step from it). Rank 0 reads the checkpoint and decides for every rank
    (:mod:`~mutualrl.training.rank_zero`): the two paths enter different collectives."""
    from mutualrl.training.rank_zero import decided_on_rank_zero

    finished = decided_on_rank_zero(trainer.accelerator, lambda: finished_checkpoint(resume_from, trainer.args.max_steps))
    if finished is not None:
        finish_from_checkpoint(trainer, resume_from, finished, validation)
    else:
        trainer.train(resume_from_checkpoint=resume_from)


def finished_checkpoint(resume_from: str | None, max_steps: int) -> Any:
    """The ``TrainerState`` of ``resume_from`` where it already holds ``max_steps`` (> 0), else None; a checkpoint
    that cannot be resumed exactly is refused (:func:`check_resumable`)."""
    if resume_from is None:
        return None
    check_resumable(resume_from)
    state = checkpoint_state(resume_from)
    return state if 0 < max_steps <= state.global_step else None


def save_outputs(trainer: Any, tokenizer: Any, folder: Path) -> None:
    """The final model, its tokenizer, and the steps actually trained (for the summary: logged rows depend on
    logging_steps)."""
    with storage_errors(folder):
        save_final_model(trainer, folder)
        if trainer.accelerator.is_main_process:
            tokenizer.save_pretrained(str(folder))
            trainer.state.save_to_json(str(folder / "trainer_state.json"))

def check_resumable(checkpoint: str) -> None:
    """Refuse a checkpoint that is incomplete or damaged: TRL would fail on it at every retry, or resume
    without its optimizer state (a fresh AdamW) and say nothing."""
    from mutualrl.ops.checkpoint_files import checkpoint_problem

    problem = checkpoint_problem(Path(checkpoint))
    if problem is not None:
        raise UsageError(f"--resume-from: cannot resume exactly from {problem}; `mutualrl train --resume` "
                         "picks the newest complete checkpoint")


def load_policy(policy: Any, args: Any) -> tuple[Any, Any]:
    """A policy's tokenizer and model (its ``init_adapter`` merged in); code shipped with them runs only when the
    recipe sets ``grpo.trust_remote_code`` (the plan names it)."""
    from mutualrl.pools.loading import load_model, merge_init_adapter

    trust = args.trust_remote_code is True
    tokenizer = load_tokenizer_only(policy, args)
    model = load_model(policy.model, training_dtype(policy.dtype), device="cpu" if args.use_cpu else None,
                       trust_remote_code=trust)
    return tokenizer, merge_init_adapter(model, policy.init_adapter)  # a warm start: training starts from it


def checkpoint_state(checkpoint: str) -> Any:
    """The ``TrainerState`` a checkpoint was saved with."""
    from transformers import TrainerState

    return TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))


def training_dtype(dtype: str) -> str:
    """The dtype a policy's weights are loaded in for training: ``auto`` is float32 on every device, as TRL loads a
    model by name (``model_init_kwargs`` dtype). With ``grpo.bf16`` the Trainer computes in bf16 under autocast
    (DeepSpeed: bf16 with fp32 master weights); weights loaded in bf16 without DeepSpeed would be updated in bf16,
    where lr 1e-6 steps fall below bf16's spacing and nothing is learned."""
    return "float32" if dtype == "auto" else dtype


def finish_from_checkpoint(trainer: Any, checkpoint: str, state: Any, validation: Any) -> None:
    """A run stopped after its last checkpoint: load it, validate at the end (unless done), train nothing. The state
    is the checkpoint's with this run's ``max_steps`` (a resume with ``--max-steps N`` at checkpoint N ends there:
    the final trainer state and status then say it trained every step it had).

    Under ZeRO-3 the model's parameters are partitioned from the start (``zero.Init``: shape [0] on every rank)
    and nothing has prepared DeepSpeed yet, so the weights are loaded into the gathered parameters, which rank
    0's copy then re-partitions (DeepSpeed's ``GatheredParameters(modifier_rank=0)``)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(trainer.model.parameters()), modifier_rank=0):
            trainer._load_from_checkpoint(checkpoint)
    else:
        trainer._load_from_checkpoint(checkpoint)
    state.is_world_process_zero = trainer.is_world_process_zero()
    state.max_steps = trainer.args.max_steps  # this run's count, which a resume may have changed (--max-steps)
    trainer.state = state
    validation.validate(state)
    log.info("checkpoint %s already holds step %d of %d: nothing left to train", checkpoint, state.global_step,
             trainer.args.max_steps)


def save_final_model(trainer: Any, folder: Path) -> None:
    """``trainer.save_model``, or after :func:`finish_from_checkpoint` under DeepSpeed (no engine yet: transformers'
    ``save_model`` asks ``model_wrapped.save_checkpoint`` of the bare model and fails) the weights gathered on every
    rank (``GatheredParameters``: a collective; ZeRO-3's partitions, nothing to gather under ZeRO-2) and saved by the
    main process as ``save_model`` would. The weights then get the mode the user's umask gives (not transformers'
    0600)."""
    from mutualrl.assets.cache import umask_file_modes

    if not (trainer.is_deepspeed_enabled and getattr(trainer, "deepspeed", None) is None):
        trainer.save_model(str(folder))
    else:
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(trainer.model.parameters())):
            state = ({k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}
                     if trainer.args.should_save else None)
        if trainer.args.should_save:
            trainer.model.save_pretrained(str(folder), state_dict=state)
    if trainer.args.should_save:
        umask_file_modes(folder)  # transformers writes the weights 0600, the rest under the umask


def close_process_group() -> None:
    """Tear the rank's process group down before exit (a multi-rank worker; nothing for a single process)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # every rank has written its outputs
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    note_start()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--resume-from", default=None, help="Checkpoint folder to resume from.")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stdout)
    paths = RunPaths(ns.run_dir.resolve())
    start_launcher_watchdog()
    install_stop_handlers(paths)  # a scheduler's SIGTERM to every process: saved at the launcher's step
    report_thread_write_failures()  # TensorBoard's writer thread on a full disk: no traceback
    try:
        if in_preflight():  # `mutualrl train --preflight`: check up to the first GPU touch, then leave
            preflight_policy(paths, ns.policy)
            close_process_group()  # every rank checked (GRPOConfig joined the group)
            return 0
        with collector_paused_for_imports():  # until run_policy has imported torch, transformers and TRL
            stopped = run_policy(paths, ns.policy, ns.resume_from)
        close_process_group()  # then __main__ leaves without the teardown (exit_without_teardown)
    except BaseException as err:  # leave a marker so that peers' barriers fail fast and name us
        err = as_storage_error(err, paths.root)
        reason = f"{type(err).__name__}: {err}"
        if not isinstance(err, (MutualRLError, KeyboardInterrupt)):
            traceback.print_exc()
        else:
            print(f"error: {err}", file=sys.stderr)
        try:
            mark_this_policy_failed(paths, ns.policy, reason)
        except Exception:  # pragma: no cover - best effort
            pass
        if isinstance(err, StorageError):
            return DISK_FULL_EXIT  # the launcher says "no space left" even if this log could not hold the line
        return err.exit_code if isinstance(err, MutualRLError) else 1
    if stopped is not None:
        print(f"policy {ns.policy}: stopped on request at step {stopped}", file=sys.stderr, flush=True)
        return STOPPED_EXIT
    return 0


def as_storage_error(err: BaseException, root: Path) -> BaseException:
    """A write that failed for space or I/O anywhere (TRL, datasets, the SEE) as one line naming the path."""
    if isinstance(err, Exception) and not isinstance(err, MutualRLError):
        return storage_error(err, root) or err
    return err


def mark_this_policy_failed(paths: RunPaths, policy: str, reason: str) -> None:
    """The SEE's failure marker for this worker's policy, where the run's config puts the SEE."""
    from mutualrl.see.liveness import mark_policy_failed

    mark_policy_failed(paths.see_root(load_resolved_config(paths, grpo=False).see.dir), policy, reason)


if __name__ == "__main__":
    status = main()
    if status == 0:
        exit_without_teardown(0)  # a finished worker: nothing left to write
    sys.exit(status)
