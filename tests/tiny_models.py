"""Tiny random causal LMs on real tokenizers, for tests (built from configs, saved to a folder)."""

from __future__ import annotations

from pathlib import Path

import torch


def build_tiny_lm(tokenizer_name: str, folder: Path, seed: int = 0, arch: str = "llama") -> Path:
    """A ~2-layer, 32-wide model over a real vocabulary, saved with its tokenizer into ``folder``."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from mutualrl.assets.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_name)
    torch.manual_seed(seed)
    common = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                  tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
