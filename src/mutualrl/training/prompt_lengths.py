"""A policy's prompt lengths for the launcher's joint length filter, remembered across launches.

The filter (:func:`mutualrl.training.data.joint_length_filter`) needs every prompt's token count under every
policy's tokenizer, and loading a tokenizer imports transformers, torch and DeepSpeed: about 3 s of CPU in
every launch, for counts that depend only on the tokenizer's files, the tokenizer libraries' versions and the
prompt. So the counts are kept under ``$MUTUALRL_CACHE/prompt-lengths/<fingerprint>.json``; a launch whose
prompts were all counted before loads no tokenizer. A tokenizer that is not a local folder (a hub id) is
counted every time. The memo is shared (another process, another account may write it): a remembered count that
would drop a prompt is counted again with the tokenizer before it does, and a memo another account could have
written (not this account's, or writable by its group or others) is not read at all, since a count saying a long
prompt is short would change which prompts train; this account's memo is written owner-writable only. A memo that
cannot be read is ignored and one that cannot be written is skipped: it is a cache, never a reason for a run to
fail.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
from pathlib import Path
from typing import Any

from mutualrl.assets.cache import cache_dir, process_umask
from mutualrl.atomic_io import write_text_atomic
from mutualrl.errors import StorageError, UsageError
from mutualrl.tasks.base import TaskExample

MEMO_FORMAT = 1
WEIGHT_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx"})
"""Files of a model folder that no tokenizer reads (a builtin model's folder holds its tokenizer and weights)."""
MAX_REMEMBERED = 500_000
"""Above this many prompts a memo is not written (a few tens of MB of JSON)."""


COUNTING_LIBRARIES = ("transformers", "tokenizers", "sentencepiece", "protobuf", "jinja2")
"""Libraries whose version can change a count: loading (a SentencePiece model is converted at load), encoding,
chat templates."""


def library_versions() -> str:
    versions = []
    for name in COUNTING_LIBRARIES:
        try:
            versions.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name}=-")
    return ";".join(versions)


def counting_code() -> str:
    """mutualrl's own part of a count (a change to it makes every memo stale)."""
    from mutualrl.training import data

    return inspect.getsource(data.prompt_token_length) + inspect.getsource(data.chat_messages)


def tokenizer_fingerprint(folder: Path) -> str:
    """A hash of everything a tokenizer's counts depend on: every non-weight file under its folder (subfolders
    too: transformers reads ``additional_chat_templates/``), the libraries' versions and mutualrl's counting code."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{library_versions()}|{counting_code()}|".encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix not in WEIGHT_SUFFIXES):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(folder).as_posix()}:{len(data)};".encode())
        digest.update(data)
    return f"v{MEMO_FORMAT}-{digest.hexdigest()}"


def prompt_key(chat: bool, prompt: str | list[dict[str, str]]) -> str:
    text = json.dumps([chat, prompt], ensure_ascii=False, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def read_own_file(path: Path) -> str | None:
    """The text of ``path`` when it is a regular file of this account that no other account may write (None: it is
    missing, another's, or group- or world-writable); opened without following a link or waiting on a FIFO."""
    from mutualrl.host.file_lock import open_safely

    try:
        fd = open_safely(path, os.O_RDONLY, what="a prompt-length memo")
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as memo:
        info = os.fstat(memo.fileno())
        if info.st_uid != os.getuid() or info.st_mode & 0o022:
            return None
        return memo.read().decode()


def memo_path(folder: Path) -> Path | None:
    """Where ``folder``'s counts are remembered; None when the folder cannot be read whole (it is counted)."""
    try:
        return cache_dir() / "prompt-lengths" / f"{tokenizer_fingerprint(folder)}.json"
    except OSError:
        return None


class PromptLengths:
    """Token counts of prompts under one policy's tokenizer, as TRL will tokenize them (chat template or plain
    text with specials, :func:`~mutualrl.training.data.prompt_token_length`); the tokenizer is loaded only for
    a prompt the memo has not seen. ``source`` is what :func:`~mutualrl.assets.tokenizers.load_tokenizer`
    takes; ``chat_template`` the policy's setting (None: plain text). The memo is a shared cache, trusted only
    where a wrong count costs nothing: a remembered count over ``max_tokens`` (which would drop the prompt from
    training or the held-out set) is counted again by the tokenizer, and the memo corrected."""

    def __init__(self, source: str, chat_template: bool | None, max_tokens: int | None = None) -> None:
        from mutualrl.assets.tokenizers import tokenizer_folder

        self.source = source
        self.chat_template = chat_template
        self.max_tokens = max_tokens
        self._tokenizer: Any = None
        folder = tokenizer_folder(source)  # a name load_tokenizer would refuse is refused here, before any data
        self.memo_path = memo_path(folder) if folder else None
        self._memo = self._read()
        self._changed = False

    def _read(self) -> dict[str, Any]:
        """The memo, when this account alone could have written it; else (another's, missing, unreadable) empty."""
        try:
            text = read_own_file(self.memo_path) if self.memo_path is not None else None
            memo = json.loads(text) if text is not None else {}
        except (OSError, ValueError, RecursionError, UsageError):
            return {"lengths": {}}
        ok = isinstance(memo, dict) and isinstance(memo.get("lengths"), dict)
        return memo if ok else {"lengths": {}}

    @property
    def tokenizer_loaded(self) -> bool:
        return self._tokenizer is not None

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from mutualrl.assets.tokenizers import load_tokenizer

            self._tokenizer = load_tokenizer(self.source)
            self._memo["has_chat_template"] = bool(getattr(self._tokenizer, "chat_template", None))
        return self._tokenizer

    def uses_chat(self) -> bool:
        """Whether prompts go through the chat template (:func:`~mutualrl.training.data.uses_chat_template`); a
        template asked of a tokenizer without one is a ``DataError`` (call it before loading data to fail early)."""
        from mutualrl.training.data import chat_template_choice

        if not self.chat_template:
            return False
        has_template = self._memo.get("has_chat_template")
        if not isinstance(has_template, bool):
            self._changed = True
            has_template = bool(getattr(self.tokenizer, "chat_template", None))
        return chat_template_choice(self.chat_template, has_template)

    def __call__(self, example: TaskExample) -> int:
        from mutualrl.training.data import prompt_token_length

        chat = self.uses_chat()
        prompt = example.for_policy(chat)
        key = prompt_key(chat, prompt)
        lengths = self._memo["lengths"]
        known = lengths.get(key)
        if isinstance(known, int) and not isinstance(known, bool) and known >= 0 and (
                self.max_tokens is None or known <= self.max_tokens):
            return known  # a count that keeps the prompt: a wrong one is caught where TRL tokenizes it
        lengths[key] = prompt_token_length(self.tokenizer, prompt, chat)
        self._changed = True
        return lengths[key]

    def save(self) -> None:
        """Write what this launch counted, merged with what another process may have written meanwhile."""
        if not self._changed or self.memo_path is None:
            return
        merged = {**self._read()["lengths"], **self._memo["lengths"]}
        if len(merged) > MAX_REMEMBERED:
            return
        try:
            write_text_atomic(self.memo_path, json.dumps({**self._memo, "lengths": merged}))
            os.chmod(self.memo_path, 0o644 & ~process_umask())  # trusted next time: writable by this account only
        except (OSError, StorageError):  # a full or read-only cache: the next launch counts again
            pass
        self._changed = False
