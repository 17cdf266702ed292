"""A Hugging Face hub cache holding the paper models' tokenizers and configs (no weights), for tests that start
workers of a paper recipe on a machine without the hub: ``mutualrl train --preflight`` loads each policy's tokenizer
and config by its hub id, exactly as on a GPU node, and never its weights.

Each model gets the real vocabulary of its family from the offline assets (Qwen2.5 and Qwen3: the Qwen BPE;
Llama-3.2: Llama-3's; Ministral: Mistral's Tekken; Phi-4-mini: GPT-4o's o200k, the base of its vocabulary), its
config's architecture fields as the model cards give them, and for an instruct model a plain chat template (the
offline vocabularies carry none). The layout is huggingface_hub's cache (``models--owner--name/refs/main``,
``snapshots/<revision>/``), read with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mutualrl.assets.tokenizers import fetch_tokenizer

REVISION = "0" * 40
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")

# hub id -> (offline vocabulary, model_type, architecture, context, instruct)
PAPER_MODELS = {
    "Qwen/Qwen2.5-Math-1.5B": ("qwen2", "qwen2", "Qwen2ForCausalLM", 4096, False),
    "Qwen/Qwen2.5-1.5B-Instruct": ("qwen2", "qwen2", "Qwen2ForCausalLM", 32768, True),
    "Qwen/Qwen2.5-Coder-1.5B": ("qwen2", "qwen2", "Qwen2ForCausalLM", 32768, False),
    "Qwen/Qwen3-1.7B-Base": ("qwen3", "qwen3", "Qwen3ForCausalLM", 32768, False),
    "Qwen/Qwen3-4B-Base": ("qwen3", "qwen3", "Qwen3ForCausalLM", 32768, False),
    "meta-llama/Llama-3.2-3B-Instruct": ("llama3", "llama", "LlamaForCausalLM", 131072, True),
    "ministral/Ministral-3b-instruct": ("mistral-tekken", "mistral", "MistralForCausalLM", 32768, True),
    "microsoft/Phi-4-mini-instruct": ("gpt4o", "phi3", "Phi3ForCausalLM", 131072, True),
}


def write_hub_cache(cache: Path) -> Path:
    """``cache`` (a ``HF_HUB_CACHE`` folder) holding every model of :data:`PAPER_MODELS`; returns it."""
    for repo, (vocabulary, model_type, architecture, context, instruct) in PAPER_MODELS.items():
        owner, name = repo.split("/")
        root = cache / f"models--{owner}--{name}"
        snapshot = root / "snapshots" / REVISION
        snapshot.mkdir(parents=True, exist_ok=True)
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(REVISION)
        source = fetch_tokenizer(vocabulary)
        for file in source.iterdir():
            shutil.copy(file, snapshot / file.name)
        settings = json.loads((snapshot / "tokenizer_config.json").read_text())
        if instruct:
            settings["chat_template"] = CHAT_TEMPLATE
        (snapshot / "tokenizer_config.json").write_text(json.dumps(settings))
        (snapshot / "config.json").write_text(json.dumps({
            "model_type": model_type, "architectures": [architecture], "max_position_embeddings": context}))
    return cache
