"""The CPU weight sync into a colocated vLLM engine leaves out the embeddings a LoRA policy never trains (issue 40).

`training.vllm_engine.cpu_sync_weights` goes through vLLM's layerwise reload. The fake worker below keeps the part
of that contract the skip relies on (vllm/model_executor/model_loader/reload/layerwise.py,
``finalize_layerwise_processing``): a layer that got no weight is put back as it was; a stacked layer (q/k/v into
``qkv_proj``) that got only some of its weights would be re-processed with the rest uninitialised, so the sync may
only leave out whole vLLM layers, which the input and output embeddings are. The real engine runs the same sync in
tests/test_vllm_cpu.py::test_a_lora_policy_syncs_its_adapted_layers_and_keeps_its_frozen_embeddings.
"""

from __future__ import annotations

import logging
import types

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from mutualrl.training.vllm_engine import RELOAD_LOGGERS, cpu_sync_weights, frozen_embedding_storages

STACKED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
           "up_proj": "gate_up_proj"}


def vllm_layer(name: str) -> str:
    """The vLLM layer a Hugging Face weight name loads into (stacked projections share one)."""
    module = name.rsplit(".", 1)[0]
    prefix, _, leaf = module.rpartition(".")
    return f"{prefix}.{STACKED.get(leaf, leaf)}"


class FakeWorker:
    """vLLM's in-place layerwise reload, as far as the sync depends on it: every weight of a stacked layer or none."""

    def __init__(self, names: list[str]) -> None:
        self.layers: dict[str, set[str]] = {}
        for name in names:
            self.layers.setdefault(vllm_layer(name), set()).add(name)
        self.received: list[list[str]] = []

    def reload_weights(self, weights_iterator, is_checkpoint_format: bool) -> None:
        assert is_checkpoint_format
        got = [name for name, _ in weights_iterator]
        for layer, names in self.layers.items():
            sent = names & set(got)
            assert not sent or sent == names, f"{layer} would be re-processed from part of its weights: {sorted(sent)}"
        logging.getLogger(RELOAD_LOGGERS[0]).warning("Embedding: Failed to load weights")  # as vLLM does
        self.received.append(got)


def trl_iterator(model):
    """What TRL's ``VLLMGeneration._iter_named_params`` yields for a PEFT model (merged, vLLM's names)."""
    yielded = []

    def iterate(self):
        for name, param in model.named_parameters():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in name or "original_module" in name:
                continue
            yielded.append(name)
            yield name.replace("modules_to_save.default.", ""), param.data
    return iterate, yielded


def fake_generation(model):
    iterate, yielded = trl_iterator(model)
    names = [name for name, _ in iterate(None)]
    yielded.clear()
    worker = FakeWorker(names)
    llm = types.SimpleNamespace(llm_engine=types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker)),
                                reset_prefix_cache=lambda: None)
    generation = types.SimpleNamespace(llm=llm, model=model)
    generation._iter_named_params = types.MethodType(iterate, generation)
    return generation, worker, yielded


@pytest.fixture
def base(tiny_bpe_folder):
    return AutoModelForCausalLM.from_pretrained(tiny_bpe_folder, dtype=torch.float32)


@pytest.fixture
def tiny_bpe_folder():
    from mutualrl.pools.loading import resolve_model_path

    return resolve_model_path("builtin:tiny-bpe")


def test_a_lora_policy_sends_everything_once_then_all_but_its_frozen_embeddings(base, caplog):
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    embedding = model.get_input_embeddings().weight
    assert frozen_embedding_storages(model) >= {embedding.data_ptr()}
    generation, worker, yielded = fake_generation(model)
    with caplog.at_level(logging.INFO):
        cpu_sync_weights(generation)
        first = list(yielded)
        cpu_sync_weights(generation)
    assert worker.received[0] == first  # the first sync: every weight TRL yields
    frozen = {name.removeprefix("base_model.model.") for name, p in model.named_parameters()
              if p.data_ptr() in frozen_embedding_storages(model)}
    assert frozen and worker.received[1] == [name for name in first if name not in frozen]  # all the rest still goes
    assert len(yielded) == 2 * len(first)  # TRL's iterator is run to its end both times (ZeRO-3 gathers)
    assert "frozen embedding weight(s) stay in the engine" in caplog.text
    assert "Failed to load weights" not in caplog.text  # vLLM's expected per-layer warning is filtered


def test_a_trained_embedding_is_sent_every_time(base):
    full = base  # full fine-tuning: every weight trains
    assert frozen_embedding_storages(full) == set()
    generation, worker, _ = fake_generation(get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", modules_to_save=["lm_head"],
                         lora_dropout=0.0)))
    head = generation.model.get_output_embeddings().weight
    assert head.requires_grad and head.data_ptr() not in frozen_embedding_storages(generation.model)
    cpu_sync_weights(generation)
    cpu_sync_weights(generation)
    assert any("lm_head" in name for name in worker.received[1])


def test_the_warning_filter_is_removed_after_the_sync(base):
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    generation, _, _ = fake_generation(model)
    cpu_sync_weights(generation)
    assert all(not logging.getLogger(name).filters for name in RELOAD_LOGGERS)
