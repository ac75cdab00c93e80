"""One shard's two files: the reader (memory-mapped tokens and offsets, checked against the manifest) and
the writer the builder streams documents into.

The `.npy` header is written last into space reserved up front: a 1-D header always fits
in 128 bytes, so tokens stream to their final place without being held in memory. The header
holds the token count and comes first, and sha256 is sequential, so the `.npy`'s digest cannot
start before the count is known: it is taken once at close over the page cache through mmap (no
read copy: it costs what hashing from memory costs); the `.bin`'s is computed while writing.
"""

from __future__ import annotations

import errno
import hashlib
import io
import math
import mmap
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import MissingFileError, ShardFormatError, ShardLoaderError, UnsafeFileError
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


def open_regular(path: str | Path) -> int:
    """A read descriptor of the regular file at `path`, opened without following a symlink at its last step or blocking
    on a FIFO; FileNotFoundError when it is absent, UnsafeFileError when it is anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            raise UnsafeFileError(f"{path} is a symlink or a FIFO; refusing to follow or open it") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafeFileError(f"{path} is not a regular file; refusing it")
    return fd


@contextmanager
def copy_errors(path: object, key: str, unreadable: type[ShardLoaderError]) -> Iterator[None]:
    """Opening the local copy of the published file `key`: absent is a MissingFileError naming both, any other failure
    an `unreadable` one."""
    try:
        yield
    except FileNotFoundError:
        raise MissingFileError(
            f"{key}: no file at {path}; it was deleted (a version removed by gc?) or never copied"
        ) from None
    except OSError as exc:
        raise unreadable(f"{key}: cannot read {path} ({exc.strerror})") from None


def _open(path: str | Path, key: str) -> BinaryIO:
    with copy_errors(path, key, ShardFormatError):
        return os.fdopen(open_regular(path), "rb")


# What numpy writes as a `.npy` header: `{'descr': ..., 'fortran_order': ..., 'shape': (...), }`, padded with spaces to
# a newline; `descr` is a dtype string or a list of (name, dtype string) fields.
_NPY_HEADER = re.compile(
    r"\{'descr': (?P<descr>'[^']+'|\[(?:\('[^']*', '[^']+'\)(?:, )?)*\]), 'fortran_order': (?P<fortran>True|False), "
    r"'shape': \((?P<shape>(?:\d+, ?)*\d*)\), \} *\n"
)
_FIELD = re.compile(r"\('([^']*)', '([^']+)'\)")


def read_npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """(shape, fortran order, dtype) from a `.npy` header at `f`'s position (format 1.0 or 2.0), leaving `f` at the
    data. Parsed here, not by numpy's `ast.literal_eval`: CPython before 3.11.8 / 3.12.1 can fail an `ast.parse` that
    runs while another thread's does (gh-106905), and a prefetch thread opens shards while anything else in the
    process may parse (3.11's tracebacks do)."""
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f".npy format version {version[0]}.{version[1]} is not read here")
    width = 2 if version == (1, 0) else 4
    length = f.read(width)
    if len(length) != width:
        raise EOFError("the .npy header's length is cut short")
    text = f.read(int.from_bytes(length, "little"))
    found = _NPY_HEADER.fullmatch(text.decode("latin1"))
    if found is None:
        raise ValueError(f"its header {text[:120]!r} is not a header numpy writes")
    descr = found["descr"]
    dtype = np.dtype(descr[1:-1] if descr.startswith("'") else _FIELD.findall(descr))
    shape = tuple(int(n) for n in found["shape"].replace(" ", "").split(",") if n)
    return shape, found["fortran"] == "True", dtype


def load_npy(raw: bytes) -> np.ndarray:
    """The (read-only) array of an in-memory `.npy`, its header read as `read_npy_header` reads it; an array of
    Python objects is never loaded."""
    f = io.BytesIO(raw)
    shape, fortran, dtype = read_npy_header(f)
    if dtype.hasobject:
        raise ValueError("it holds Python objects (a pickle), which are never loaded")
    flat = np.frombuffer(raw, dtype=dtype, count=math.prod(shape), offset=f.tell())
    return flat.reshape(shape, order="F" if fortran else "C")


def map_npy(path: str | Path, key: str, dtype: str) -> np.ndarray:
    """Memory-map the 1-D `dtype` array of a `.npy` file (read-only); its header is checked against the file's size
    before anything is mapped, and a file holding Python objects is never loaded."""
    with _open(path, key) as f:
        try:
            shape, fortran, found = read_npy_header(f)
        except (ValueError, OSError, EOFError) as exc:
            raise ShardFormatError(f"{key}: not a readable .npy token array ({exc})") from None
        if found.hasobject:
            raise ShardFormatError(
                f"{key}: not a readable .npy token array: it holds Python objects (a pickle), which are never loaded"
            )
        if len(shape) != 1 or found != np.dtype(dtype) or (fortran and len(shape) > 1):
            raise ShardFormatError(f"{key}: expected a 1-D C-ordered {dtype} array, found {len(shape)}-D {found}")
        start, size = f.tell(), os.fstat(f.fileno()).st_size
        if start + shape[0] * found.itemsize > size:
            raise ShardFormatError(
                f"{key}: its header says {shape[0]:,} tokens, but the file holds {size - start:,} bytes after the "
                "header"
            )
        return np.memmap(f, dtype=found, mode="r", offset=start, shape=shape)


def open_shard(
    entry: ShardEntry, npy_path: str | Path, bin_path: str | Path, dtype: str, vocab_size: int | None = None
) -> Shard:
    """Memory-map a shard's files and check them against its manifest entry.

    Offsets must start at 0, never decrease and end at the token count. With
    `vocab_size`, every token id is also checked (a full scan: builder checks use it).
    Neither file is opened through a symlink at its last step.
    """
    key = entry.npy.key
    tokens = map_npy(npy_path, key, dtype)
    if tokens.shape[0] != entry.tokens:
        raise ShardFormatError(f"{key}: holds {tokens.shape[0]} tokens, manifest says {entry.tokens}")
    bkey = entry.bin.key
    with _open(bin_path, bkey) as f:
        offsets = np.fromfile(f, dtype="<i8")
    if offsets.shape[0] != entry.documents + 1:
        raise ShardFormatError(
            f"{bkey}: holds {offsets.shape[0]} offsets, expected documents + 1 = {entry.documents + 1}"
        )
    if offsets[0] != 0 or offsets[-1] != entry.tokens:
        raise ShardFormatError(
            f"{bkey}: offsets must run from 0 to the token count {entry.tokens}, run from {offsets[0]} to {offsets[-1]}"
        )
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
        data = offsets.astype("<i8", copy=False).data
        self._bin.write(data)
        self._bin_hash.update(data)

    def append(self, tokens: np.ndarray, doc_lengths: np.ndarray) -> None:
        """`tokens` is the concatenation of documents whose lengths (EOD included) are `doc_lengths`."""
        self._npy.write(np.ascontiguousarray(tokens, dtype=self.dtype).data)  # no copy when already contiguous
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
            # hashing releases the GIL: it runs beside the guard's last comparison
            self.npy_sha256 = hashlib.sha256(pages).hexdigest()
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
