"""One shard's two files: the reader (memory-mapped tokens and offsets, checked against the manifest) and
the writer the builder streams documents into.

The `.npy` header is written last into space reserved up front: a 1-D header always fits
in 128 bytes, so tokens stream to their final place without being held in memory. The header
holds the token count and comes first, and sha256 is sequential, so the `.npy`'s digest cannot
start before the count is known: it is taken once at close over the page cache through mmap (no
read copy: it costs what hashing from memory costs); the `.bin`'s is computed while writing.
"""

from __future__ import annotations

import hashlib
import io
import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ShardFormatError
from .entries import ShardEntry
from .keys import shard_content_hash

HEADER_BYTES = 128


@dataclass(frozen=True)
class Shard:
    """A verified shard: `tokens` is a read-only memmap, `offsets` the int64 document starts + end."""

    entry: ShardEntry
    tokens: np.ndarray
    offsets: np.ndarray

    def document(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


def open_shard(entry: ShardEntry, npy_path: str | Path, bin_path: str | Path, dtype: str, vocab_size: int | None = None) -> Shard:
    """Memory-map a shard's files and check them against its manifest entry.

    Offsets must start at 0, never decrease and end at the token count. With
    `vocab_size`, every token id is also checked (a full scan: builder checks use it).
    """
    key = entry.npy.key
    try:
        tokens = np.load(npy_path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ShardFormatError(f"{key}: not a readable .npy token array ({exc})") from None
    if tokens.ndim != 1 or tokens.dtype != np.dtype(dtype) or not tokens.flags.c_contiguous:
        raise ShardFormatError(f"{key}: expected a 1-D C-ordered {dtype} array, found {tokens.ndim}-D {tokens.dtype}")
    if tokens.shape[0] != entry.tokens:
        raise ShardFormatError(f"{key}: holds {tokens.shape[0]} tokens, manifest says {entry.tokens}")
    offsets = np.fromfile(bin_path, dtype="<i8")
    bkey = entry.bin.key
    if offsets.shape[0] != entry.documents + 1:
        raise ShardFormatError(f"{bkey}: holds {offsets.shape[0]} offsets, expected documents + 1 = {entry.documents + 1}")
    if offsets[0] != 0 or offsets[-1] != entry.tokens:
        raise ShardFormatError(f"{bkey}: offsets must run from 0 to the token count {entry.tokens}, run from {offsets[0]} to {offsets[-1]}")
    if np.any(offsets[1:] < offsets[:-1]):
        bad = int(np.argmax(offsets[1:] < offsets[:-1]))
        raise ShardFormatError(f"{bkey}: offsets decrease at document {bad} ({offsets[bad]} -> {offsets[bad + 1]})")
    if vocab_size is not None and tokens.shape[0] and int(tokens.max()) >= vocab_size:
        raise ShardFormatError(f"{key}: token id {int(tokens.max())} is not below vocab_size {vocab_size}")
    return Shard(entry=entry, tokens=tokens, offsets=offsets)


def npy_header(dtype: str, count: int) -> bytes:
    """The 128-byte `.npy` header of a 1-D array of `count` tokens."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": (count,)})
    header = buf.getvalue()
    if len(header) != HEADER_BYTES:
        raise AssertionError(f"npy header for {count} tokens is {len(header)} bytes, expected {HEADER_BYTES}")
    return header


class ShardWriter:
    """Appends documents (tokens already followed by the end-of-document id) to one shard's two files.

    `close()` fills in each file's sha256 and the shard's content hash, the part of its key
    that makes a key name exactly one content.
    """

    def __init__(self, npy_path: Path, bin_path: Path, dtype: str):
        self.npy_path, self.bin_path, self.dtype = npy_path, bin_path, dtype
        self._npy = open(npy_path, "wb")
        self._npy.write(b"\0" * HEADER_BYTES)
        self._bin = open(bin_path, "wb")
        self._bin_hash = hashlib.sha256()
        self._write_offsets(np.zeros(1, dtype="<i8"))
        self.tokens = 0
        self.documents = 0
        self.max_token_id = -1
        self.npy_sha256 = self.bin_sha256 = ""

    def _write_offsets(self, offsets: np.ndarray) -> None:
        data = memoryview(offsets.astype("<i8", copy=False))
        self._bin.write(data)
        self._bin_hash.update(data)

    def append(self, tokens: np.ndarray, doc_lengths: np.ndarray) -> None:
        """`tokens` is the concatenation of documents whose lengths (EOD included) are `doc_lengths`."""
        self._npy.write(memoryview(np.ascontiguousarray(tokens, dtype=self.dtype)))  # no copy when already contiguous
        self._write_offsets(self.tokens + np.cumsum(doc_lengths, dtype=np.int64))
        if tokens.shape[0]:
            self.max_token_id = max(self.max_token_id, int(tokens.max()))
        self.tokens += int(tokens.shape[0])
        self.documents += int(doc_lengths.shape[0])

    def close(self) -> None:
        """Write the `.npy` header, close both files and fill in their sha256."""
        self._npy.seek(0)
        self._npy.write(npy_header(self.dtype, self.tokens))
        self._npy.close()
        self._bin.close()
        with open(self.npy_path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as pages:
            self.npy_sha256 = hashlib.sha256(pages).hexdigest()  # releases the GIL: runs beside the guard's last comparison
        self.bin_sha256 = self._bin_hash.hexdigest()

    @property
    def content_hash(self) -> str:
        """16 hex digits of a hash over both files' sha256: the `<content hash>` of the shard's keys."""
        if not self.npy_sha256:
            raise ShardFormatError(f"{self.npy_path}: the shard is not closed yet; its content hash is unknown")
        return shard_content_hash(self.npy_sha256, self.bin_sha256)

    def abort(self) -> None:
        self._npy.close()
        self._bin.close()
        self.npy_path.unlink(missing_ok=True)
        self.bin_path.unlink(missing_ok=True)
