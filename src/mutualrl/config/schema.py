"""Typed configuration of a mutual-RL run.

A run is described by a YAML recipe (``recipes/pools/*.yaml``) that is loaded into
:class:`RunConfig`. Every field carries a ``help`` string (TRL style) that ``mutualrl
pools show NAME --explain`` prints and what the rest of mutualrl asks of it (may it change on resume, does it send
data off this machine, its heading on the settings page, the regimes that read it: :mod:`mutualrl.config.field_rules`).
GRPO settings are *not* re-declared here: the ``grpo``
mapping is passed through to TRL's :class:`~trl.GRPOConfig` (its keys are checked
against that dataclass when the recipe is resolved, :mod:`mutualrl.config.validate`), so every TRL option keeps
working.

Defaults are the paper's (App. "Implementation details", App. "Implementation details
for Success-Gated Transfer"), except where a comment says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mutualrl.config.field_rules import IDENTITY, MAY_CHANGE, rules
from mutualrl.config.grpo_schema import GRPO
from mutualrl.regimes.core.registry import get_regime, regime_names, settings_regimes
from mutualrl.regimes.standalone.spec import STANDALONE


@dataclass
class PolicyConfig:
    """One policy of the pool: its own weights, tokenizer and GRPO overrides."""

    name: str = field(metadata={"help": "Unique policy name; names SEE shards, logs and output folders.",
                                **rules("Pool", resume=IDENTITY)})
    model: str = field(
        metadata={
            "help": "Model to train: a hub id (Qwen/Qwen3-1.7B-Base), a local folder, or a builtin "
            "model of mutualrl (builtin:tiny-bpe, builtin:tiny-sp, builtin:smollm2-135m, ...).",
            **rules("Pool", resume=IDENTITY),
        }
    )
    tokenizer: str | None = field(
        default=None,
        metadata={
            "help": "Tokenizer: a named offline vocabulary (qwen3, llama3, mistral-sp, mistral-tekken, phi3, "
            "gpt2), a local folder or a hub id. Default: the model's own.",
            **rules("Pool", resume=IDENTITY),
        },
    )
    device_share: float = field(
        default=1.0,
        metadata={"gt": 0, "help": "Relative share of the devices for this policy when MWRA splits them (default: even).",
                  **rules("Pool", resume=IDENTITY)},
    )
    grpo: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Per-policy overrides of TRL GRPOConfig fields (e.g. learning_rate).",
                  **rules("Pool", resume=IDENTITY)},
    )
    lora: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "Train a LoRA adapter instead of the full weights: peft LoraConfig fields (r, lora_alpha or "
                  "alpha, lora_dropout or dropout, target_modules, use_rslora, ...); unset ones take r 16, alpha 32, "
                  "dropout 0.05, all-linear. `lora: {}` uses those defaults.", **rules("Pool", resume=IDENTITY)},
    )
    init_adapter: str | None = field(
        default=None,
        metadata={"help": "A peft LoRA adapter folder merged into the model before training (a supervised warm start "
                  "made elsewhere): the policy starts from model + adapter, and `mutualrl eval` of the run merges "
                  "it under a LoRA policy's trained adapter too. A relative path is from the working directory.",
                  **rules("Pool", resume=IDENTITY)},
    )
    init_adapter_build: str | None = field(
        default=None,
        metadata={"help": "The command that builds init_adapter, named in the one-line error when that folder "
                  "holds no adapter.", **rules("Pool", resume=MAY_CHANGE)},
    )
    chat_template: bool | None = field(
        default=None,
        metadata={
            "help": "Wrap prompts in the tokenizer's chat template (instruct models; the paper pools set it). "
            "Default: plain text, as the paper prompts base models.",
            **rules("Pool", resume=IDENTITY),
        },
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(
        default="auto", metadata={"help": "Weights dtype when loading the model for training ('auto': float32, as TRL "
                                   "loads a model; grpo.bf16 then computes in bf16 with fp32 weights).",
                                   **rules("Pool", resume=IDENTITY)}
    )


@dataclass
class PoolConfig:
    """A pool of policies trained together (paper Tab. "Policy pools")."""

    name: str = field(metadata={"help": "Pool name (tiny, smol, 2qwen, 3qwen, 4qwen, llama-mist, qwen-phi4, ...).",
                                **rules("Pool", resume=IDENTITY)})
    policies: list[PolicyConfig] = field(metadata={"help": "The policies of the pool (at least one).",
                                                   **rules("Pool", resume=IDENTITY)})
    description: str = field(default="", metadata={"help": "One line shown by `mutualrl pools`.",
                                                   **rules("Pool", resume=MAY_CHANGE)})


@dataclass
class RegimeConfig:
    """Which sharing regime runs, and the settings of every registered regime (``regime.<key>``).

    The regimes and their settings come from :mod:`mutualrl.regimes.core.registry`: a recipe's
    ``regime.sgt.lam`` is the ``lam`` field of the settings dataclass the regime registered under
    the key ``sgt``, read back as ``config.regime.sgt.lam``.
    """

    name: str = field(default=STANDALONE.name, metadata={"help": "Sharing regime (see `mutualrl train --help`).",
                                                         **rules("Regime", resume=IDENTITY)})
    settings: dict[str, Any] = field(default_factory=dict, repr=False,
                                     metadata={"help": "Settings by regime key (regime.<key> in a recipe).",
                                               **rules("Regime", resume=IDENTITY, regimes="own")})

    def __post_init__(self) -> None:
        for spec in settings_regimes():
            if self.settings.get(spec.settings_key) is None:
                self.settings[spec.settings_key] = spec.settings()

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_") or key in ("name", "settings"):
            raise AttributeError(key)
        for spec in settings_regimes():
            if spec.settings_key == key:
                return self.settings.setdefault(key, spec.settings())
        raise AttributeError(f"{type(self).__name__} has no attribute {key!r} (no regime has settings {key!r})")

    # -- the recipe's shape, {name: ..., <key>: {...}} (config.typed uses these hooks) ----------
    @classmethod
    def from_config_data(cls, data: Any, source: str, path: str) -> RegimeConfig:
        from mutualrl.config.typed import ConfigError, build_dataclass, convert
        from mutualrl.errors import UnknownNameError

        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise ConfigError(source, path, f"expected a mapping (RegimeConfig), got {type(data).__name__} {data!r}")
        name = convert(data.get("name", STANDALONE.name), str, source, f"{path}.name")
        try:
            get_regime(name)
        except UnknownNameError as err:
            raise ConfigError(source, f"{path}.name", str(err).split(": ", 1)[-1]) from None
        specs = {spec.settings_key: spec for spec in settings_regimes()}
        for key in data:
            if key != "name" and key not in specs:
                import difflib

                close = difflib.get_close_matches(str(key), ["name", *specs], n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(source, f"{path}.{key}",
                                  f"unknown key (expected one of: {', '.join(['name', *specs])}){hint}")
        settings = {key: build_dataclass(spec.settings, inherited_section(data, spec, source, path,
                                                                          chosen=spec.name == name),
                                         source, f"{path}.{key}")
                    for key, spec in specs.items()}
        return cls(name=name, settings=settings)

    def to_config_data(self) -> dict[str, Any]:
        return {"name": self.name, **self.settings}

    @classmethod
    def field_help(cls, prefix: str) -> list[tuple[str, str, str, Any]]:
        """(dotted name, type, help, default) rows for ``mutualrl pools show NAME --explain``."""
        from mutualrl.config.typed import describe_type, iter_field_help

        rows: list[tuple[str, str, str, Any]] = [
            (f"{prefix}.name", "a string", "Sharing regime: " + ", ".join(regime_names()) + ".", STANDALONE.name)]
        for spec in settings_regimes():
            key = f"{prefix}.{spec.settings_key}"
            rows.append((key, describe_type(spec.settings), f"{spec.name} settings.", None))
            rows.extend(iter_field_help(spec.settings, key))
        return rows


def inherited_section(data: dict[str, Any], spec: Any, source: str, path: str,
                      chosen: bool = True) -> dict[str, Any]:
    """A regime's recipe section over its parents' (a variant: ``regime.sgt.lam`` reaches ``sgt-half``'s ``lam``
    unless ``regime.sgt_half.lam`` is set; grandparent first, the nearest last, the variant's own on top).

    A broken chain (an unknown parent, settings that do not subclass its) is refused only for the ``chosen`` regime:
    a plug-in variant's mistake must not stop every other run from reading its config; unchosen, its own section."""
    from mutualrl.config.typed import ConfigError
    from mutualrl.errors import UsageError
    from mutualrl.regimes.core.registry import parent_chain

    try:
        chain = parent_chain(spec)
    except UsageError as err:
        if not chosen:
            own = data.get(spec.settings_key)
            return own if isinstance(own, dict) else {}
        raise ConfigError(source, f"{path}.name", str(err)) from None
    own = data.get(spec.settings_key)
    if not chain or (own is not None and not isinstance(own, dict)):
        return own or {}  # the builder names a section that is not a mapping
    merged: dict[str, Any] = {}
    for parent in chain:
        section = data.get(parent.settings_key)
        merged.update(section if isinstance(section, dict) else {})
    return {**merged, **(own or {})}


@dataclass
class TaskConfig:
    """The verifiable task: where prompts come from and how answers are checked."""

    name: str = field(
        default="synthetic-arith",
        metadata={
            "help": "Task: math, gsm8k, arc, openbookqa, boolq, piqa, hellaswag, siqa, qa-mix (the six QA tasks), "
            "math-qa-mix (MATH + the six QA tasks, the paper's commonsense experiment), synthetic-arith, "
            "invented-lexicon (two invented languages to translate, results per language); "
            "<qa task>-line (arc-easy-line, openbookqa-line, ...): the QA task with an answer line instead of "
            "\\boxed{}; dataset: your own rows (task.source, task.reward_funcs); package.module:Class: your "
            "Task subclass.",
            **rules("Task", resume=IDENTITY),
        },
    )
    source: str | None = field(default=None, metadata={
        "help": "Where the data comes from: a hub dataset id, a local jsonl/parquet/arrow file or folder, or "
        "'offline' (the registry package described in the README). Default: the task's own default.",
        **rules("Task", resume=IDENTITY)})
    train_split: str = field(default="train", metadata={"help": "Split used for training prompts.",
                                                        **rules("Task", resume=IDENTITY)})
    eval_split: str = field(default="test", metadata={"help": "Split used for held-out validation.",
                                                      **rules("Task", resume=IDENTITY)})
    train_limit: int | None = field(default=None, metadata={"ge": 1, "help": "Use at most this many training prompts.",
                                                            **rules("Task", resume=IDENTITY)})
    eval_limit: int | None = field(default=None, metadata={"ge": 1, "help": "Keep at most this many held-out prompts, "
                                                          "the first N in the split's order (validation.limit wins "
                                                          "when it is set).",
                                                          **rules("Task", resume=IDENTITY)})
    max_prompt_tokens: int = field(default=1024, metadata={"ge": 1, "help": "Prompts longer than this for ANY "
                                   "policy's tokenizer are dropped for all (joint filter).",
                                   **rules("Task", resume=IDENTITY)})
    max_prompt_chars: int = field(default=200_000, metadata={"ge": 1, "help": "Longest text (characters) a data row's "
                                  "prompt or other column may hold; longer is refused before tokenization.",
                                  **rules("Task", resume=IDENTITY)})
    verifier: Literal["default", "exact", "equiv"] = field(default="default", metadata={
        "help": "Answer check: 'exact' string match, 'equiv' (math-verify), or the task's default.",
        **rules("Task", resume=IDENTITY)})
    reward_funcs: list[str] = field(
        default_factory=list,
        metadata={"help": "Reward functions as `trl grpo --reward_funcs` names them: import paths module.function "
                  "(from the working directory and PYTHONPATH) or TRL's own (accuracy_reward, think_format_reward, "
                  "...); called fn(prompts, completions, completion_ids, **columns). With a built-in task they are "
                  "added to its verifier; weights: grpo.reward_weights (docs/tasks.md).",
                  **rules("Task", resume=IDENTITY)},
    )
    eval_fraction: float | None = field(
        default=None,
        metadata={"gt": 0, "lt": 1, "help": "task 'dataset': hold out this fraction of the training split for "
                  "validation (seeded by split_seed). Unset: the eval_split, or 0.1 when the source has none.",
                  **rules("Task", resume=IDENTITY)},
    )
    split_seed: int = field(default=0, metadata={"help": "task 'dataset': seed of the held-out rows' draw.",
                                                 **rules("Task", resume=IDENTITY)})
    group_column: str | None = field(default=None, metadata={"help": "A column of your rows (task 'dataset') whose "
        "values split held-out reward@1 into groups: in validation, the end-of-run table and `mutualrl eval`.",
        **rules("Task", resume=IDENTITY)})
    stop_after_no_reward_steps: int | None = field(default=30, metadata={"ge": 0, "help": "Stop the run when no "
        "completion of a policy scored above 0 for this many steps in a row, showing one (0 or null: never). "
        "mutualrl sweep sets 0 unless a --set or --grid names it: a baseline that reads no peer is not stopped where "
        "the sharing regimes go on.",
        **rules("Task", resume=MAY_CHANGE)})


@dataclass
class SEESettings:
    """Shared Experience Exchange: the file-backed store of typed rollout records."""

    dir: str | None = field(
        default=None,
        metadata={"help": "Exchange folder; default <output_dir>/see. May be a shared filesystem path (multi-node).",
                  **rules("Exchange", resume=IDENTITY, leaves="path", regimes="exchange")},
    )
    barrier_timeout_s: float = field(
        default=1800.0, metadata={"gt": 0, "help": "Seconds the barrier waits while no missing peer gets on (a step, validation progress, training work), then fails.",
                                  **rules("Timeouts", resume=MAY_CHANGE, regimes="peers")}
    )
    peer_timeout_s: float = field(
        default=300.0,
        metadata={"gt": 0, "help": "The launcher stops the pool, naming the policy, when a policy process sends no "
                  "heartbeat (every few seconds, also mid-step) for this long: hung or stopped, though alive.",
                  **rules("Timeouts", resume=MAY_CHANGE)},
    )
    poll_interval_s: float = field(default=0.02, metadata={"gt": 0, "help": "Barrier polling interval in seconds.",
                                                           **rules("Timeouts", resume=MAY_CHANGE, regimes="peers")})
    retention_steps: int | None = field(
        default=16, metadata={"ge": 1, "help": "Keep only the last N steps of records on disk (None: keep everything).",
                              **rules("Exchange", resume=IDENTITY, regimes="exchange")}
    )
    max_staleness: int = field(
        default=0,
        metadata={"ge": 0, "help": "Bounded staleness, in exchange rounds: a policy at round i reads the newest peer "
                  "records of rounds >= i - S without waiting, and waits only for a peer more than S rounds behind; "
                  "each peer round is read once. 0: the paper's lock-step barrier (bit-identical). SGT rescues "
                  "stale rounds' prompts; XGRPO and PRP use peer data of the same round only (docs/see.md).",
                  **rules("Bounded staleness", resume=IDENTITY, regimes="peers", lock_step=0)},
    )
    on_peer_failure: Literal["stop", "continue"] = field(
        default="stop",
        metadata={"help": "When a peer dies or stops beating: 'stop' the whole pool (default), or 'continue': drop "
                  "it, survivors train on (standalone for steps without peer data) and finish; the summary names "
                  "who left and when.", **rules("Peer failures", resume=MAY_CHANGE, lock_step="stop")},
    )
    max_restarts: int = field(
        default=0,
        metadata={"ge": 0, "help": "With on_peer_failure=continue: the launcher starts a policy that left again, from "
                  "its newest checkpoint, up to this many times; it rejoins the pool once it has caught up with "
                  "its peers' rounds (docs/see.md 'Rejoining').", **rules("Peer failures", resume=MAY_CHANGE)},
    )
    catch_up: bool = field(
        default=False,
        metadata={"help": "With max_staleness >= 1: a policy that a persistently faster peer would keep waiting for "
                  "skips rounds (no generation, no update; data and LR schedule move on) so that its next records "
                  "land within the bound: the fast peer stops waiting, the slow one trains fewer rounds "
                  "(SAPO-style; docs/see.md 'Catching up').",
                  **rules("Bounded staleness", resume=MAY_CHANGE, regimes="peers")},
    )
    replay_consumption: str | None = field(
        default=None,
        metadata={"help": "Replay an earlier run's peer-round choices: its run folder (or its see/ or see/_consumed "
                  "folder). Each step waits for and reads exactly the round that run read, so a bounded-staleness "
                  "run is reproduced bit for bit (same seed and settings) for debugging.",
                  **rules("Bounded staleness", resume=IDENTITY, regimes="peers", lock_step=None)},
    )
    record_standalone: bool = field(
        default=False,
        metadata={"help": "In standalone runs, still publish rollout records to the SEE (for `see inspect` and "
                  "offline analysis). Off by default: standalone GRPO then does exactly what vanilla TRL does.",
                  **rules("Exchange", resume=IDENTITY, regimes="alone")},
    )


MAX_NODE_GPUS = 1024
"""More GPUs than any one machine holds: ``--gpus`` beyond it is a typo (the plan lists every GPU)."""


@dataclass
class LaunchConfig:
    """MWRA placement and process launch."""

    gpus: int | None = field(
        default=None,
        metadata={"ge": 0, "le": MAX_NODE_GPUS, "help": "Number of GPUs to place policies on. Default: all visible. "
                  "Set it with --dry-run to simulate a node (e.g. 8).", **rules("Placement", resume=MAY_CHANGE, flag="--gpus")},
    )
    gpu_memory_gib: float | None = field(
        default=None,
        metadata={"gt": 0, "help": "Memory of each GPU in GiB for the plan's memory check. Default: detected on a "
                  "real node; give it with --dry-run --gpus N to check the card you will get, vLLM's share counted.",
                  **rules("Placement", resume=MAY_CHANGE, flag="--gpu-memory")},
    )
    ram_gib: float | None = field(
        default=None,
        metadata={"gt": 0, "help": "RAM of each machine in GiB for the plan's host-memory check. Default: detected "
                  "on a real node; give it with --dry-run --gpus N to check the node you will get (the dry run's "
                  "'Host RAM' line).", **rules("Placement", resume=MAY_CHANGE, flag="--ram")},
    )
    device_map: dict[str, list[int]] | None = field(
        default=None,
        metadata={"help": "Explicit placement {policy: [gpu ids]} overriding the even split.",
                  **rules("Placement", resume=MAY_CHANGE)},
    )
    deepspeed: Literal["none", "zero2", "zero3"] = field(
        default="none", metadata={"help": "DeepSpeed ZeRO stage per policy ('none': DDP / single process).",
                                  **rules("Placement", resume=MAY_CHANGE)}
    )
    threads_per_policy: int | None = field(
        default=None, metadata={"ge": 1, "help": "CPU threads per policy process (default: the cores split by device_share; equal shares: evenly).",
                                **rules("Placement", resume=MAY_CHANGE)}
    )
    force: bool = field(
        default=False,
        metadata={"help": "Start even when the admission check finds that this machine cannot hold the pool "
                  "(CPU: more than 4 policy processes per core, or more RAM than it has).",
                  **rules("Placement", resume=MAY_CHANGE, flag="--force")},
    )
    cpu_processes: int = field(
        default=1,
        metadata={"ge": 1, "help": "On CPU: ranks per policy (torch.distributed with gloo), to exercise the "
                  "multi-rank path without GPUs. Each rank gets per_device_train_batch_size / N, so every step "
                  "draws the same prompts as one rank. Ignored on GPUs (ranks = the policy's GPUs).",
                  **rules("Placement", resume=MAY_CHANGE)},
    )
    main_process_port: int = field(
        default=29500, metadata={"ge": 1, "le": 65535, "help": "First rendezvous port; policy i uses port + i.",
                                 **rules("Placement", resume=MAY_CHANGE)}
    )
    nodes: int = field(
        default=1,
        metadata={"ge": 1, "help": "Machines the pool runs on, each with `gpus` GPUs; the run folder must be on a "
                  "filesystem every machine mounts at the same path. Start `mutualrl train` on every machine with "
                  "the same options and its own --machine-rank.",
                  **rules("Several machines", resume=MAY_CHANGE, flag="--nodes")},
    )
    machine_rank: int = field(
        default=0,
        metadata={"ge": 0, "help": "Which machine this launcher is, 0..nodes-1. Machine 0 creates the run (config, "
                  "plan, run.json, summary); the others join it and start only their workers.",
                  **rules("Several machines", resume=MAY_CHANGE, flag="--machine-rank")},
    )
    main_address: str = field(
        default="127.0.0.1",
        metadata={"help": "Address of machine 0 as the other machines reach it: the rendezvous address of every "
                  "policy whose ranks span machine 0 and others. 127.0.0.1 simulates several machines on one.",
                  **rules("Several machines", resume=MAY_CHANGE, leaves="address", flag="--main-address")},
    )
    join_timeout_s: float = field(
        default=600.0,
        metadata={"gt": 0, "help": "With nodes > 1: how long machine 0 waits for the other machines to join, and "
                  "they for machine 0 to plan the run.", **rules("Several machines", resume=MAY_CHANGE)},
    )
    stall_timeout_s: float | None = field(
        default=None,
        metadata={"gt": 0, "help": "Fail the run when no policy on any machine got on (a step, a phase, training work) this long (default: see.barrier_timeout_s + 60).",
                  **rules("Timeouts", resume=MAY_CHANGE)},
    )
    vllm_max_num_seqs: int | None = field(
        default=None,
        metadata={"ge": 1, "help": "Colocated vLLM engine: most sequences scheduled at once (vLLM's max_num_seqs; the "
                  "paper's rollout cap is 1024). Default: TRL's (per-device batch x TP x steps_per_generation), capped "
                  "at vllm_max_num_batched_tokens, which vLLM requires.", **rules("vLLM", resume=MAY_CHANGE)},
    )
    vllm_max_num_batched_tokens: int | None = field(
        default=None,
        metadata={"ge": 1, "help": "Colocated vLLM engine: most tokens per scheduler step (vLLM's max_num_batched_tokens; the paper's rollout cap is 8192). Default: TRL's 4096.",
                  **rules("vLLM", resume=MAY_CHANGE)},
    )


@dataclass
class ValidationConfig:
    """Held-out validation during training (greedy decoding, reward@1; paper: every 5 steps)."""

    every_steps: int | None = field(
        default=None,
        metadata={"ge": 0, "help": "Validate every N OPTIMIZER steps (0: start and end only). Default: "
                  "`schedule.validate_every` (in `schedule.unit`) when the recipe has a schedule, else 5. "
                  "Set one of the two, not both.", **rules("Validation", resume=MAY_CHANGE)},
    )
    limit: int | None = field(default=None, metadata={"ge": 1, "help": "Validate on at most this many held-out "
                                                     "prompts: the first N of the held-out split, in its order "
                                                     "(not a random sample); wins over task.eval_limit.",
                                                     **rules("Validation", resume=MAY_CHANGE)})
    max_new_tokens: int | None = field(
        default=None, metadata={"ge": 1, "help": "Generation length for validation (default: grpo.max_completion_length).",
                                **rules("Validation", resume=MAY_CHANGE)}
    )
    batch_size: int = field(default=16, metadata={"ge": 1, "help": "Prompts per generation batch during validation.",
                                                  **rules("Validation", resume=MAY_CHANGE)})
    at_start: bool = field(default=True, metadata={"help": "Validate before the first step (the 'No Train' point).",
                                                   **rules("Validation", resume=MAY_CHANGE)})


@dataclass
class BatchConfig:
    """Paper-style batch sizes in prompts, turned into TRL's per-device sizes for each policy's world size.

    The paper (App. "Implementation details") states its batch as 1024 prompts per step in 4 mini-batches,
    with micro-batches of 2 prompts per GPU. TRL counts completions per device, so the launcher derives
    ``per_device_train_batch_size``, ``gradient_accumulation_steps`` and ``steps_per_generation`` from these
    and the number of devices MWRA gives the policy. Leave unset to use the ``grpo`` values as written.
    """

    prompts_per_step: int = field(metadata={"ge": 1, "help": "Prompts per generation step (each gets K rollouts).",
                                            **rules("Batch and schedule", resume=IDENTITY)})
    mini_batches_per_step: int = field(default=1, metadata={"ge": 1, "help": "Optimizer updates per generation step.",
                                                            **rules("Batch and schedule", resume=IDENTITY)})
    micro_batch_prompts_per_device: int = field(
        default=1, metadata={"ge": 1, "help": "Prompts per device per forward/backward pass (x K completions).",
                             **rules("Batch and schedule", resume=IDENTITY)}
    )


SCHEDULE_GRPO_FIELDS = {"max_steps": "max_steps", "warmup_steps": "warmup_steps", "save_every": "save_steps",
                        "log_every": "logging_steps"}
"""``schedule`` count -> the GRPOConfig field (optimizer steps) it sets; ``validate_every`` sets
``validation.every_steps``."""


@dataclass
class ScheduleConfig:
    """Run length and cadence, counted in ``unit`` steps (paper App. "Implementation details").

    One *paper step* is one GRPO update of the paper: ``batch.prompts_per_step`` prompts
    (1024) generated once and trained in ``batch.mini_batches_per_step`` (4) mini-batches,
    i.e. ``mini_batches_per_step x grpo.num_iterations`` optimizer steps (TRL's
    ``global_step``). The launcher converts every count here to optimizer steps
    (``mutualrl.config.cadence``) and the dry run shows both. A recipe without ``schedule``
    sets TRL's ``grpo.max_steps`` / ``save_steps`` / ... directly, in optimizer steps.
    """

    unit: Literal["paper", "optimizer"] = field(
        default="paper",
        metadata={"help": "Unit of every count in `schedule`: 'paper' (one step = batch.prompts_per_step prompts = "
                  "batch.mini_batches_per_step x grpo.num_iterations optimizer steps; needs `batch`) or "
                  "'optimizer' (TRL's global_step).", **rules("Batch and schedule", resume=IDENTITY)},
    )
    max_steps: int | None = field(
        default=None,
        metadata={"ge": 1, "help": "Run length in `unit` steps; also the length of the learning-rate schedule. "
                  "None: grpo.num_train_epochs decides (each epoch = floor(train prompts / prompts_per_step) paper "
                  "steps). Sets grpo.max_steps (optimizer steps): set one of the two.",
                  **rules("Batch and schedule", resume=MAY_CHANGE)},
    )
    warmup_steps: int | None = field(
        default=None,
        metadata={"ge": 0, "help": "Learning-rate warm-up in `unit` steps (paper: 0). Sets grpo.warmup_steps "
                  "(optimizer steps): set one of the two.", **rules("Batch and schedule", resume=IDENTITY)},
    )
    save_every: int | None = field(
        default=None,
        metadata={"ge": 1, "help": "Checkpoint every N `unit` steps (paper: 20 paper steps). Sets grpo.save_steps "
                  "(optimizer steps): set one of the two.", **rules("Batch and schedule", resume=MAY_CHANGE)},
    )
    log_every: int | None = field(
        default=None,
        metadata={"ge": 1, "help": "Log training metrics every N `unit` steps (paper: every paper step). Sets "
                  "grpo.logging_steps (optimizer steps): set one of the two.",
                  **rules("Batch and schedule", resume=MAY_CHANGE)},
    )
    validate_every: int | None = field(
        default=None,
        metadata={"ge": 0, "help": "Validate every N `unit` steps (paper: 5 paper steps; 0: start and end only). "
                  "Sets validation.every_steps (optimizer steps): set one of the two.",
                  **rules("Batch and schedule", resume=MAY_CHANGE)},
    )


@dataclass
class RunConfig:
    """Everything a `mutualrl train` run needs."""

    pool: PoolConfig = field(metadata={"help": "The policy pool.", **rules("Pool", resume=IDENTITY)})
    regime: RegimeConfig = field(default_factory=RegimeConfig, metadata={"help": "The sharing regime.",
                                                                         **rules("Regime", resume=IDENTITY)})
    task: TaskConfig = field(default_factory=TaskConfig, metadata={"help": "The verifiable task.",
                                                                   **rules("Task", resume=IDENTITY)})
    grpo: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "TRL GRPOConfig fields shared by every policy (checked against GRPOConfig).",
                  **rules(GRPO, resume=IDENTITY)},
    )
    batch: BatchConfig | None = field(
        default=None, metadata={"help": "Batch sizes in prompts (paper style); derived per policy world size.",
                                **rules("Batch and schedule", resume=IDENTITY)}
    )
    schedule: ScheduleConfig | None = field(
        default=None,
        metadata={"help": "Run length and cadence in paper steps (or optimizer steps), converted for TRL. "
                  "Unset: the grpo/validation counts as written, in optimizer steps.",
                  **rules("Batch and schedule", resume=IDENTITY)},
    )
    see: SEESettings = field(default_factory=SEESettings, metadata={"help": "Shared Experience Exchange.",
                                                                    **rules("Exchange", resume=IDENTITY)})
    launch: LaunchConfig = field(default_factory=LaunchConfig, metadata={"help": "Placement and launch.",
                                                                         **rules("Placement", resume=MAY_CHANGE)})
    validation: ValidationConfig = field(default_factory=ValidationConfig, metadata={"help": "Validation.",
                                                                                     **rules("Validation", resume=MAY_CHANGE)})
    output_dir: str = field(
        default="runs/{pool}-{regime}", metadata={"help": "Run folder; {pool} and {regime} are filled in.",
                                                  **rules("Run folder", resume=MAY_CHANGE)}
    )
    description: str = field(default="", metadata={"help": "Free text describing the recipe.",
                                                   **rules("Run folder", resume=IDENTITY)})
    plugins: list[str] = field(
        default_factory=list,
        metadata={"help": "Modules (or .py files) imported by the launcher, every policy process and `mutualrl "
                  "eval` before the rest of the recipe is read: register_task / register_regime calls live there.",
                  **rules("Run folder", resume=IDENTITY)},
    )
