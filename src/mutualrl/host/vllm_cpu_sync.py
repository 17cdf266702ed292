"""The trainer's weights into a colocated vLLM engine on a CPU (docs/launch.md "vLLM on a CPU").

vLLM's CPU backend packs every linear weight for its GEMM kernels when it builds a layer
(``dispatch_cpu_unquantized_gemm``: a oneDNN copy held by ``layer.cpu_linear``) and drops the parameter
TRL's sync would write into. :func:`cpu_sync_weights` pushes the tensors TRL would send (its
``_iter_named_params``: PEFT merge and DeepSpeed gather included) through vLLM's own layerwise in-place
reload (``Worker.reload_weights``), which re-packs each layer it loads, with three corrections:

- **A tied LM head is re-packed** (:func:`repack_tied_heads`). vLLM builds it as a layer of its own
  (``ParallelLMHead``) sharing the embedding's parameter; Hugging Face yields the shared weight once, under the
  embedding's name, so the reload re-packs the embedding and the head kept the copy packed when the engine was
  built: with the embedding trained, the engine sampled from a stale head (log-prob gap 0.03-0.05 after two
  steps of a tiny full fine-tune at lr 1e-2; 1e-5 with the re-pack).
- **Frozen embeddings stay in the engine** (:func:`kept_embedding_storages`). From the second sync on, an input
  or output embedding layer that is a plain torch layer with nothing trainable (LoRA leaves both so) is not sent:
  vLLM puts a layer that got none of its weights back as it was (``finalize_layerwise_processing``). Every
  parameter of such a layer is left out (a head's bias too: a bias sent without its weight would make vLLM
  re-process the layer from an uninitialised weight), and only a layer frozen at the previous sync and now.
  Gemma-3-270M's sync 2.5-6 s -> 0.4 s (its 262k-row table is 168M of its 268M weights).
- **vLLM's reload warnings** (:class:`ReloadWarnings`): every warning of the first sync is logged; later syncs
  log each new one once and drop those about the embeddings kept on purpose.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

log = logging.getLogger(__name__)

#: vLLM's loggers of an in-place reload's per-layer and per-weight warnings.
RELOAD_LOGGERS = ("vllm.model_executor.model_loader.reload.layerwise", "vllm.v1.worker.gpu_model_runner")
LAYER_NOT_LOADED = "Failed to load weights"  # layerwise.py: "%s: Failed to load weights" (a layer got none)
WEIGHTS_NOT_LOADED = "were not loaded from checkpoint"  # gpu_model_runner.py: "...checkpoint: %s" (a set of names)
EMBEDDING_LAYERS = ("VocabParallelEmbedding", "ParallelLMHead")


def embedding_modules(model: Any) -> list[torch.nn.Module]:
    """The model's input and output embedding modules (either may be missing or unsupported)."""
    modules = []
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        try:
            module = getattr(model, getter)()
        except (AttributeError, NotImplementedError):
            continue
        if isinstance(module, torch.nn.Module):
            modules.append(module)
    return modules


def frozen_embedding_layers(model: Any) -> set[frozenset[int]]:
    """Each embedding module that is a plain ``nn.Embedding`` or ``nn.Linear`` with nothing trainable, as the
    ``data_ptr()`` of all its parameters. A PEFT wrapper (LoRA on the embedding merges into the base weight in
    place; ``modules_to_save``; trainable tokens) is not a plain layer: what it holds is always sent, also through a
    plain head tied to it."""
    layers: set[frozenset[int]] = set()
    wrapped: set[int] = set()
    for module in embedding_modules(model):
        storages = frozenset(p.data_ptr() for p in module.parameters() if p.numel() > 0)
        if not isinstance(module, (torch.nn.Embedding, torch.nn.Linear)) or hasattr(module, "base_layer"):
            wrapped |= storages
        elif storages and not any(p.requires_grad for p in module.parameters()):
            layers.add(storages)
    return {layer for layer in layers if not layer & wrapped}


def kept_embedding_storages(previous: set[frozenset[int]] | None, now: set[frozenset[int]]) -> set[int]:
    """What a sync leaves in the engine: the whole layers frozen at the previous sync of this process and now
    (nothing at the first, so the engine holds the trainer's weights whatever it was built from)."""
    return set() if previous is None else {ptr for layer in now & previous for ptr in layer}


class ReloadWarnings(logging.Filter):
    """vLLM's warnings about layers and weights a reload did not get: all logged at the first sync; afterwards only
    those that are new (a weight renamed by a library upgrade still shows)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = True
        self.seen: set[str] = set()
        self.missing_at_first: set[str] = set()
        self.kept: set[str] = set()  # names this sync left out on purpose

    def filter(self, record: logging.LogRecord) -> bool:
        try:  # logging does not catch a filter's error: it would surface inside vLLM's reload
            return self._keep(record)
        except Exception:  # noqa: BLE001 - a record of another shape is logged as it is
            return True

    def _keep(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if LAYER_NOT_LOADED not in message and WEIGHTS_NOT_LOADED not in message:
            return True
        first_arg = record.args[0] if isinstance(record.args, tuple) and record.args else None
        names = set(first_arg) if isinstance(first_arg, (set, frozenset, list, tuple)) else set()
        text = record.getMessage()
        if self.first:
            self.missing_at_first |= names
        elif text in self.seen or (names and names <= self.missing_at_first | self.kept) or (
                not names and self.kept and first_arg in EMBEDDING_LAYERS):
            return False
        self.seen.add(text)  # each warning once
        return True


def repack_tied_heads(engine_model: torch.nn.Module) -> int:
    """Re-pack each ``ParallelLMHead`` that shares its weight with an embedding layer (the packing its own
    ``process_weights_after_loading`` made when the engine was built); returns how many."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (ParallelLMHead, UnquantizedEmbeddingMethod,
                                                                     VocabParallelEmbedding)

    embeddings = {id(getattr(m, "weight", None)) for m in engine_model.modules()
                  if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead)}
    heads = [m for m in engine_model.modules() if isinstance(m, ParallelLMHead)
             and isinstance(m.quant_method, UnquantizedEmbeddingMethod)  # a quantized one is packed once only
             and id(getattr(m, "weight", None)) in embeddings]
    for head in heads:
        head.quant_method.process_weights_after_loading(head)
    return len(heads)


@dataclass
class SyncState:
    """What one policy process's syncs remember (kept on TRL's ``VLLMGeneration`` as ``_mutualrl_sync``)."""

    warnings: ReloadWarnings = field(default_factory=ReloadWarnings)
    frozen: set[frozenset[int]] | None = None  # the frozen embedding layers at the last sync that went through
    kept_logged: bool = False


def cpu_sync_weights(generation: Any) -> None:
    """Push the trainer's current weights into ``generation.llm`` (installed as TRL's ``sync_weights``)."""
    worker = generation.llm.llm_engine.model_executor.driver_worker
    state = getattr(generation, "_mutualrl_sync", None) or SyncState()
    generation._mutualrl_sync = state
    warnings = state.warnings
    frozen = frozen_embedding_layers(generation.model)
    kept = kept_embedding_storages(state.frozen, frozen)
    warnings.kept = set()

    def weights() -> Iterator[tuple[str, torch.Tensor]]:
        # TRL's iterator runs to its end (under ZeRO-3 each gather is a collective every rank joins). Cloned: a
        # gathered tensor is freed once the iterator moves on; the layerwise reload keeps a layer's until it is done.
        for name, tensor in generation._iter_named_params():
            if tensor.data_ptr() in kept:
                warnings.kept.add(name)
            else:
                yield name, tensor.detach().clone()

    for name in RELOAD_LOGGERS:
        logging.getLogger(name).addFilter(warnings)
    try:
        worker.reload_weights(weights_iterator=weights(), is_checkpoint_format=True)
    finally:
        for name in RELOAD_LOGGERS:
            logging.getLogger(name).removeFilter(warnings)
    state.frozen = frozen  # after a reload that went through
    if not warnings.kept:  # the embedding was sent, so a head tied to it must be packed again
        repacked = repack_tied_heads(worker.get_model())
        if warnings.first:
            log.info("vLLM weight sync: %d LM head(s) tied to the embedding packed again after each sync that "
                     "sends it", repacked)
    generation.llm.reset_prefix_cache()
    if warnings.kept and not state.kept_logged:
        log.info("vLLM weight sync: the frozen embedding weight(s) %s stay in the engine from the first sync",
                 ", ".join(sorted(warnings.kept)))
        state.kept_logged = True
    warnings.first = False
