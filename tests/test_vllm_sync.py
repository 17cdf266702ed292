"""The CPU weight sync into a colocated vLLM engine (training/vllm_cpu_sync.py, issue 40).

The fake worker keeps the part of vLLM's layerwise in-place reload the sync relies on
(vllm/model_executor/model_loader/reload/layerwise.py, ``finalize_layerwise_processing``): a layer that got none
of its weights is put back as it was, and a layer that got only some of them (q/k/v stacked into ``qkv_proj``,
or a head's bias without its weight) is re-processed from uninitialised memory, so the sync may only leave out
whole vLLM layers. The real engine runs the sync in tests/test_vllm_cpu.py (a LoRA run, and a full fine-tune
whose tied head must be re-packed).
"""

from __future__ import annotations

import logging
import types

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, PhiConfig, PhiForCausalLM

from mutualrl.host import vllm_cpu_sync
from mutualrl.host.vllm_cpu_sync import RELOAD_LOGGERS, ReloadWarnings, cpu_sync_weights, frozen_embedding_layers

STACKED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
           "up_proj": "gate_up_proj"}
LORA = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0}


def vllm_layer(name: str) -> str:
    """The vLLM layer a Hugging Face weight name loads into (stacked projections share one; weight and bias too)."""
    prefix, _, leaf = name.rsplit(".", 1)[0].rpartition(".")
    return f"{prefix}.{STACKED.get(leaf, leaf)}"


class FakeWorker:
    """vLLM's in-place layerwise reload, as far as the sync depends on it: every weight of a layer or none."""

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
        logger = logging.getLogger(RELOAD_LOGGERS[0])
        for layer, names in self.layers.items():  # as vLLM warns about each layer that got nothing
            if not names & set(got):
                logger.warning("%s: Failed to load weights", "VocabParallelEmbedding")
        self.received.append(got)

    def get_model(self) -> torch.nn.Module:
        return torch.nn.Module()


def trl_iterator(model, yielded: list[str]):
    """TRL 1.16's ``VLLMGeneration._iter_named_params`` for a PEFT model without FSDP (merged, vLLM's names);
    test_the_fake_iterator_is_trls checks it against TRL's own."""
    def iterate(self):
        if not hasattr(model, "merge_adapter"):  # full fine-tuning: every parameter as it is
            for name, param in model.named_parameters():
                yielded.append(name)
                yield name, param.data
            return
        model.merge_adapter()
        for name, param in model.named_parameters():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in name or "original_module" in name:
                continue
            name = name.replace("modules_to_save.default.", "")
            yielded.append(name)
            yield name, param.data
        model.unmerge_adapter()
    return iterate


def fake_generation(model):
    yielded: list[str] = []
    iterate = trl_iterator(model, yielded)
    worker = FakeWorker([name for name, _ in iterate(None)])
    yielded.clear()
    engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker))
    generation = types.SimpleNamespace(llm=types.SimpleNamespace(llm_engine=engine, reset_prefix_cache=lambda: None),
                                       model=model)
    generation._iter_named_params = types.MethodType(iterate, generation)
    return generation, worker, yielded


@pytest.fixture
def repacks(monkeypatch) -> list[int]:
    """Each sync's call to re-pack the engine's tied heads (the real one imports vLLM)."""
    calls: list[int] = []
    monkeypatch.setattr(vllm_cpu_sync, "repack_tied_heads", lambda model: calls.append(1) or 0)
    return calls


@pytest.fixture
def gpt2():
    """tiny-bpe: GPT-2 layout, its head tied to ``transformer.wte``."""
    from mutualrl.pools.loading import resolve_model_path

    return AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny-bpe"), dtype=torch.float32)


@pytest.fixture
def phi():
    """A random tiny Phi: an untied head with a bias (vLLM's ``ParallelLMHead(bias=True)``)."""
    torch.manual_seed(0)
    return PhiForCausalLM(PhiConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                    num_attention_heads=2, max_position_embeddings=64))


def sync_twice(model):
    generation, worker, yielded = fake_generation(model)
    cpu_sync_weights(generation)
    first = list(yielded)
    cpu_sync_weights(generation)
    return worker, first, yielded


def test_lora_sends_everything_once_then_all_but_the_tied_frozen_embedding(gpt2, repacks, caplog):
    model = get_peft_model(gpt2, LoraConfig(target_modules="all-linear", **LORA))
    with caplog.at_level(logging.INFO):
        worker, first, yielded = sync_twice(model)
    assert worker.received[0] == first  # the first sync: every weight TRL yields
    assert set(first) - set(worker.received[1]) == {"transformer.wte.weight"}
    assert worker.received[1] == [name for name in first if name != "transformer.wte.weight"]
    assert len(yielded) == 2 * len(first)  # TRL's iterator runs to its end both times (ZeRO-3 gathers)
    assert repacks == [1]  # the first sync sent the embedding, so its tied head is packed again; not the second
    assert "transformer.wte.weight stay in the engine" in caplog.text


def test_an_untied_head_is_left_out_with_its_bias(phi, repacks):
    model = get_peft_model(phi, LoraConfig(target_modules=["q_proj", "k_proj", "v_proj", "dense"], **LORA))
    worker, first, _ = sync_twice(model)  # the fake fails on a head sent without its bias
    assert set(first) - set(worker.received[1]) == {"model.embed_tokens.weight", "lm_head.weight", "lm_head.bias"}


@pytest.mark.parametrize("lora", [
    {"target_modules": ["c_attn", "wte"]},  # LoRA on the embedding merges into the base weight in place
    {"target_modules": "all-linear", "modules_to_save": ["wte"]},
    {"target_modules": "all-linear", "trainable_token_indices": [1, 2]},
])
def test_an_embedding_that_trains_through_peft_is_sent_every_time(gpt2, repacks, lora):
    model = get_peft_model(gpt2, LoraConfig(**{**LORA, **lora}))
    assert frozen_embedding_layers(model) == set()
    worker, first, _ = sync_twice(model)
    assert worker.received == [first, first]
    assert repacks == [1, 1]


def test_full_fine_tuning_sends_everything_and_repacks_the_tied_head_every_time(gpt2, repacks):
    worker, first, _ = sync_twice(gpt2)
    assert worker.received == [first, first] and first == [name for name, _ in gpt2.named_parameters()]
    assert repacks == [1, 1]


def test_an_embedding_frozen_after_a_sync_is_sent_once_more(gpt2, repacks):
    model = get_peft_model(gpt2, LoraConfig(target_modules="all-linear", **LORA))
    embedding = model.get_input_embeddings().weight
    embedding.requires_grad_(True)  # trained until the first sync
    generation, worker, _ = fake_generation(model)
    cpu_sync_weights(generation)
    embedding.requires_grad_(False)  # its last update is not in the engine yet
    cpu_sync_weights(generation)
    cpu_sync_weights(generation)
    assert ["transformer.wte.weight" in names for names in worker.received] == [True, True, False]


@pytest.fixture
def caught():
    """The records vLLM's reload loggers let through (a handler on them: vLLM's own logging set-up, once imported
    by another test in this process, stops them from reaching the root logger that caplog reads)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    loggers = [logging.getLogger(name) for name in RELOAD_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
    yield records
    for logger, level in zip(loggers, levels):
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_reload_warnings_first_sync_all_later_only_new(gpt2, repacks, caught):
    model = get_peft_model(gpt2, LoraConfig(target_modules="all-linear", **LORA))
    generation, worker, _ = fake_generation(model)
    logger = logging.getLogger(RELOAD_LOGGERS[1])
    original = worker.reload_weights

    def reload_with_warnings(weights_iterator, is_checkpoint_format):
        original(weights_iterator, is_checkpoint_format)
        logger.warning("Following weights were not loaded from checkpoint: %s", {"rotary.inv_freq"})
        if len(worker.received) >= 3:  # a weight renamed by an upgrade: not loaded, and new
            logger.warning("Following weights were not loaded from checkpoint: %s", {"h.0.attn.c_attn.weight"})

    worker.reload_weights = reload_with_warnings
    for _ in range(4):
        caught.clear()
        cpu_sync_weights(generation)
        logged = [r.getMessage() for r in caught]
        if len(worker.received) == 1:
            assert logged == ["Following weights were not loaded from checkpoint: {'rotary.inv_freq'}"]
        elif len(worker.received) == 3:  # new: logged, once
            assert logged == ["Following weights were not loaded from checkpoint: {'h.0.attn.c_attn.weight'}"]
        else:  # the kept embedding's layer and the warnings seen before: dropped
            assert logged == []
    assert all(not logging.getLogger(name).filters for name in RELOAD_LOGGERS)  # removed after every sync


@pytest.mark.slow
def test_the_fake_iterator_is_trls(gpt2):
    """The names and tensors :func:`trl_iterator` yields are those of TRL's own ``_iter_named_params``."""
    import contextlib

    from trl.generation.vllm_generation import VLLMGeneration

    model = get_peft_model(gpt2, LoraConfig(target_modules="all-linear", modules_to_save=["wte"], **LORA))
    trl_generation = object.__new__(VLLMGeneration)
    trl_generation.model = model
    trl_generation._dist = types.SimpleNamespace(gather_params=lambda params: contextlib.nullcontext(), is_fsdp=False)
    theirs = [(name, tensor.data_ptr()) for name, tensor in trl_generation._iter_named_params()]
    ours = [(name, tensor.data_ptr()) for name, tensor in trl_iterator(model, [])(None)]
    assert ours == theirs and theirs


@pytest.mark.parametrize("args", [(), (None,), (3,), ("VocabParallelEmbedding", "extra"), ({"a"}, {"b"})])
def test_a_warning_of_another_shape_is_logged_not_raised(args):
    warnings = ReloadWarnings()
    warnings.first = False
    record = logging.LogRecord("vllm", logging.WARNING, __file__, 1, "x %s Failed to load weights", args, None)
    record.getMessage = lambda: "x"  # whatever the arguments, formatting is not the filter's concern
    assert warnings.filter(record) is True


@pytest.mark.slow
def test_a_tied_head_is_stale_after_a_reload_until_packed_again():
    """vLLM's own layers, as its CPU backend packs them (``UnquantizedEmbeddingMethod`` -> a oneDNN/sgl copy): a
    reload writes the shared weight in place; the tied head computes from its old copy until it is packed again;
    an untied head is left alone."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (ParallelLMHead, UnquantizedEmbeddingMethod,
                                                                     VocabParallelEmbedding)

    from mutualrl.host.vllm_cpu_sync import repack_tied_heads

    def layer(cls, weight):
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module.weight, module.quant_method = weight, UnquantizedEmbeddingMethod()
        module.quant_method.process_weights_after_loading(module)  # what building the engine does
        return module

    torch.manual_seed(0)
    shared = torch.nn.Parameter(torch.randn(128, 64), requires_grad=False)
    engine = torch.nn.Module()
    engine.embed, engine.head = layer(VocabParallelEmbedding, shared), layer(ParallelLMHead, shared)
    engine.untied = layer(ParallelLMHead, torch.nn.Parameter(torch.randn(128, 64), requires_grad=False))
    x = torch.randn(3, 64)
    shared.data.copy_(torch.randn(128, 64))  # the layerwise reload copies new values into the same parameter
    assert not torch.allclose(engine.head.quant_method.apply(engine.head, x), x @ shared.t(), atol=1e-4)
    assert repack_tied_heads(engine) == 1 and engine.head.weight is shared
    assert torch.allclose(engine.head.quant_method.apply(engine.head, x), x @ shared.t(), atol=1e-4)
