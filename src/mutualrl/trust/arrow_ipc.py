"""Arrow IPC files from another process, checked from their metadata before pyarrow reads them.

Why by hand: pyarrow's file reader inflates an lz4/zstd body while it reads it, to whatever size the body declares,
with no cap and no way to ask first: a few kB from a peer become gigabytes before any check runs. mutualrl writes
uncompressed shards, so :func:`check_uncompressed` reads only the metadata (the footer and each block's message
header, flatbuffers laid out by Arrow's format/File.fbs and format/Message.fbs) and refuses a file whose batches
declare compression, or whose blocks reach past the file. Every offset is checked against the bytes it points into:
a malformed footer is an :class:`UnsafeIpcFile`, never a read out of bounds. The SEE's reader
(:func:`mutualrl.see.shards.load_shard`) calls it after the checksum and before pyarrow opens the file.
"""

from __future__ import annotations

import struct

MAGIC = b"ARROW1"
_U8, _I16, _U16, _I32, _U32, _I64 = (struct.Struct(f) for f in ("<B", "<h", "<H", "<i", "<I", "<q"))
_BLOCK = struct.Struct("<qi4xq")  # Block: offset, metaDataLength, (padding), bodyLength
_CONTINUATION = 0xFFFFFFFF  # before a message's length since Arrow 0.15; without it, the older 4-byte prefix
_V5 = 4  # MetadataVersion.V5; a V4 message may declare compression in its custom metadata (Arrow 0.17's form)
_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3  # MessageHeader union
_CODECS = {0: "lz4", 1: "zstd"}  # CompressionType


class UnsafeIpcFile(ValueError):
    """Why the file is refused, in words (the caller names the file); ``problem``: "compressed" or "unreadable"."""

    def __init__(self, problem: str, detail: str):
        super().__init__(detail)
        self.problem = problem


def _unreadable(detail: str) -> UnsafeIpcFile:
    return UnsafeIpcFile("unreadable", f"not a readable Arrow IPC file ({detail})")


class _Flatbuffer:
    """The tables of one flatbuffer inside ``view[lo:hi]``, each read bounds-checked (offsets are relative)."""

    def __init__(self, view: memoryview, lo: int, hi: int, what: str):
        self.view, self.lo, self.hi, self.what = view, lo, hi, what

    def read(self, fmt: struct.Struct, at: int) -> int:
        if at < self.lo or at + fmt.size > self.hi:
            raise _unreadable(f"the {self.what} points outside itself (byte {at})")
        return fmt.unpack_from(self.view, at)[0]

    def root(self) -> int:
        return self.lo + self.read(_U32, self.lo)

    def field(self, table: int, index: int) -> int | None:
        """Where field ``index`` of the table at ``table`` is stored, or None when it is absent (its default)."""
        vtable = table - self.read(_I32, table)
        if 4 + 2 * index + 2 > self.read(_U16, vtable):
            return None
        relative = self.read(_U16, vtable + 4 + 2 * index)
        return table + relative if relative else None

    def scalar(self, table: int, index: int, fmt: struct.Struct, default: int) -> int:
        at = self.field(table, index)
        return default if at is None else self.read(fmt, at)

    def table(self, table: int, index: int) -> int | None:
        at = self.field(table, index)
        return None if at is None else at + self.read(_U32, at)

    def vector(self, table: int, index: int, item_size: int) -> list[int]:
        """Where each item of the vector field ``index`` starts (none when it is absent)."""
        at = self.table(table, index)
        if at is None:
            return []
        count = self.read(_U32, at)
        if at + 4 + count * item_size > self.hi:
            raise _unreadable(f"the {self.what} declares {count} items past its end")
        return [at + 4 + i * item_size for i in range(count)]


def _footer(view: memoryview) -> tuple[_Flatbuffer, int]:
    """The footer's flatbuffer and the byte where it starts (the blocks end there)."""
    size = len(view)
    if size < 2 * len(MAGIC) + 6 or bytes(view[:6]) != MAGIC or bytes(view[size - 6:]) != MAGIC:
        raise _unreadable("no ARROW1 at its start and end")
    length = _I32.unpack_from(view, size - 10)[0]
    start = size - 10 - length
    if length <= 0 or start < 8:
        raise _unreadable(f"its footer length {length} does not fit the file's {size} bytes")
    return _Flatbuffer(view, start, start + length, "footer"), start


def _message(view: memoryview, block: tuple[int, int, int], end: int, what: str) -> tuple[_Flatbuffer, int]:
    """The header flatbuffer of the message a footer block points at, and its Message table; all before ``end``."""
    offset, metadata_length, body_length = block
    if offset < 8 or metadata_length < 8 or body_length < 0 or offset + metadata_length + body_length > end:
        raise _unreadable(f"{what} (bytes {offset}+{metadata_length}+{body_length}) reaches past the file's {end} "
                          "bytes of batches")
    prefix = 8 if _U32.unpack_from(view, offset)[0] == _CONTINUATION else 4
    length = _I32.unpack_from(view, offset + prefix - 4)[0]
    if length <= 0 or prefix + length > metadata_length:
        raise _unreadable(f"{what} has a header of {length} bytes in {metadata_length}")
    header = _Flatbuffer(view, offset + prefix, offset + prefix + length, what)
    message = header.root()
    declared = header.scalar(message, 3, _I64, 0)  # Message.bodyLength: what the reader reads as the body
    if declared < 0 or offset + metadata_length + declared > end:
        raise _unreadable(f"{what} declares a body of {declared} bytes past the file's end")
    return header, message


def _check_batch(header: _Flatbuffer, message: int, kind: int, what: str) -> None:
    """Refuse a batch whose header declares compression (or a version that may declare it elsewhere)."""
    version = header.scalar(message, 0, _I16, 0)  # Message.version
    if version != _V5:
        raise _unreadable(f"{what} has metadata version V{version + 1}; mutualrl writes V5")
    if header.scalar(message, 1, _U8, 0) != kind:  # Message.header_type
        raise _unreadable(f"{what} is not the batch its footer says it is")
    batch = header.table(message, 2)  # Message.header
    if batch is not None and kind == _DICTIONARY_BATCH:
        batch = header.table(batch, 1)  # DictionaryBatch.data
    if batch is None:
        raise _unreadable(f"{what} has no batch header")
    compression = header.table(batch, 3)  # RecordBatch.compression
    if compression is not None:
        codec = header.scalar(compression, 0, _U8, 0)  # BodyCompression.codec
        raise UnsafeIpcFile("compressed", f"{what} is compressed ({_CODECS.get(codec, f'codec {codec}')}); mutualrl "
                                          "writes uncompressed shards, and pyarrow would inflate the body, to any "
                                          "size it declares, before any check")


def check_uncompressed(buffer: object) -> None:
    """Refuse (:class:`UnsafeIpcFile`) an IPC file whose record or dictionary batches are compressed or out of bounds.

    Reads the footer and one header per batch (a few hundred bytes each), never a body.
    """
    view = memoryview(buffer).cast("B")  # (file bytes,) uint8, zero-copy over the memory map
    footer, end = _footer(view)
    root = footer.root()
    for index, kind, name in ((2, _DICTIONARY_BATCH, "dictionary batch"), (3, _RECORD_BATCH, "record batch")):
        for number, at in enumerate(footer.vector(root, index, _BLOCK.size)):
            what = f"{name} {number}"
            header, message = _message(view, _BLOCK.unpack_from(view, at), end, what)
            _check_batch(header, message, kind, what)
