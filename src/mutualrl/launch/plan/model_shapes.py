"""A policy model's shape as the plan sizes memory with it: layers, heads, KV heads, head size, MLP width, vocabulary.

Read from the model's ``config.json`` when it is on this machine (a local folder, the hub cache, a built builtin),
else from the model cards of the paper's pools, else from a tiny model's recipe; unknown otherwise (sizes that need
it are then left out of the plan, and the plan says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """What the KV cache, the activations and the logits of one model take per token."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    hidden: int
    heads: int
    intermediate: int
    """The MLP's inner width (``intermediate_size``; GPT-2: ``n_inner`` or 4 x hidden)."""
    source: str
    gated_mlp: bool = True
    """SwiGLU (Llama, Qwen, Phi-3, Mistral): gate and up projections multiplied; False: GPT-2's GeLU MLP."""
    qk_norm: bool = False
    """Queries and keys RMS-normalised per head (Qwen3)."""

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of every layer for one token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


# (layers, KV heads, head size, vocabulary, hidden size, attention heads, intermediate size, q/k norm) from the
# config.json of each paper model (the hub's, 2025); every one has a SwiGLU MLP.
KNOWN_SHAPES: dict[str, tuple[int, int, int, int, int, int, int, bool]] = {
    "Qwen/Qwen2.5-Math-1.5B": (28, 2, 128, 151936, 1536, 12, 8960, False),
    "Qwen/Qwen2.5-1.5B-Instruct": (28, 2, 128, 151936, 1536, 12, 8960, False),
    "Qwen/Qwen2.5-Coder-1.5B": (28, 2, 128, 151936, 1536, 12, 8960, False),
    "Qwen/Qwen3-1.7B-Base": (28, 8, 128, 151936, 2048, 16, 6144, True),
    "Qwen/Qwen3-4B-Base": (36, 8, 128, 151936, 2560, 32, 9728, True),
    "meta-llama/Llama-3.2-3B-Instruct": (28, 8, 128, 128256, 3072, 24, 8192, False),
    "microsoft/Phi-4-mini-instruct": (32, 8, 128, 200064, 3072, 24, 8192, False),
    # A community model (MistralForCausalLM, "finetuned from mistralai/Mistral-7B-v0.1"), not Mistral AI's
    # Ministral-3B: its config.json on the hub (commit 2c95908929198d6e69af8638f0dbbd9bc6b93f9e, main in 2025) has 14
    # layers of Mistral-7B's width: hidden 4096, 32 heads (head size 4096 / 32 = 128), 8 KV heads, intermediate
    # 14336, Mistral v1's 32,000-token vocabulary, untied embeddings, max_position_embeddings 131072, sliding_window
    # 4096. Its three safetensors files (2.96 + 2.97 + 0.70 GB in bf16) hold the 3.32e9 parameters those give.
    "ministral/Ministral-3b-instruct": (14, 8, 128, 32000, 4096, 32, 14336, False),
}
GELU_MLP_TYPES = {"gpt2"}
"""``model_type`` values whose MLP is one GeLU projection of ``n_inner`` (4 x hidden by default), not SwiGLU."""
QK_NORM_TYPES = {"qwen3", "qwen3_moe"}
"""``model_type`` values that RMS-normalise queries and keys per head."""
# The vocabularies of the offline tokenizers the tiny models are built on (mutualrl.assets.tokenizers), for a tiny
# model not built yet.
TINY_TOKENIZER_VOCAB = {"gpt2": 50257, "mistral-sp": 32000}


def shape_from_config(config: dict[str, Any], source: str) -> ModelShape | None:
    """The shape in a transformers ``config.json`` (Llama/Qwen/Mistral/Phi and GPT-2 names); None if it lacks one."""
    def first(*keys: str) -> int | None:
        for key in keys:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    found = [first("num_hidden_layers", "n_layer"), first("num_attention_heads", "n_head"),
             first("hidden_size", "n_embd"), first("vocab_size")]
    if None in found:
        return None
    layers, heads, hidden, vocab = (int(v or 0) for v in found)
    kv_heads = first("num_key_value_heads") or heads
    kind = config.get("model_type")
    gated = kind not in GELU_MLP_TYPES
    intermediate = first("intermediate_size", "n_inner") or (8 * hidden // 3 if gated else 4 * hidden)
    return ModelShape(layers, kv_heads, first("head_dim") or hidden // heads, vocab, hidden, heads, intermediate,
                      source, gated_mlp=gated, qk_norm=kind in QK_NORM_TYPES)


def model_shape(model: str) -> ModelShape | None:
    """The shape of ``model`` (see the module's docstring for where it is read), or None when unknown here."""
    from mutualrl.pools.loading import BUILTIN_PREFIX, cached_model_config

    found = cached_model_config(model)
    if found is not None:
        shape = shape_from_config(*found)
        if shape is not None:
            return shape
    if model in KNOWN_SHAPES:
        layers, kv_heads, head_dim, vocab, hidden, heads, intermediate, qk_norm = KNOWN_SHAPES[model]
        return ModelShape(layers, kv_heads, head_dim, vocab, hidden, heads, intermediate, "model card",
                          qk_norm=qk_norm)
    if model.startswith(BUILTIN_PREFIX):
        from mutualrl.pools.tiny import TINY_MODELS

        spec = TINY_MODELS.get(model[len(BUILTIN_PREFIX):])
        if spec is not None and spec.tokenizer in TINY_TOKENIZER_VOCAB:
            gated = spec.architecture != "gpt2"  # tiny_warm_start.tiny_config: Llama's MLP is 2 x hidden wide
            return ModelShape(spec.num_layers, spec.num_heads, spec.hidden_size // spec.num_heads,
                              TINY_TOKENIZER_VOCAB[spec.tokenizer], spec.hidden_size, spec.num_heads,
                              (2 if gated else 4) * spec.hidden_size, f"tiny recipe {spec.name}", gated_mlp=gated)
    return None
