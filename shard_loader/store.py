"""Where a dataset lives: a URL resolved to a store that reads keys under the dataset root.

Local paths and `file://` are read in place; `s3://`/`r2://` and `http(s)://` are remote
and are downloaded into a cache before use (see `cache.py`). Every store streams byte ranges
in chunks, so the downloader can enforce a deadline between chunks and never holds a whole
part in memory.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import urlparse

from .errors import IntegrityError, RangeNotSupportedError, StoreError, TooLargeError, TransientStoreError, UnsafeFileError
from .format import LATEST_KEY, VERSIONS_DIR, check_key
from .retry import Deadline

CHUNK = 1 << 20  # the most one socket read returns; the deadline is checked between reads
MAX_OBJECT_BYTES = 512 << 20  # read_bytes is for manifests and small records: anything larger is refused unread
READ_BYTES_SECONDS = 300.0  # the deadline of one read_bytes


class Store(Protocol):
    """Read access to the keys under one dataset root."""

    url: str

    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes:
        """The whole object, refused with TooLargeError (before reading it) when over `limit` bytes."""
        ...

    def size(self, key: str) -> int: ...

    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]:
        """Bytes [start, end) of a key in chunks; RangeNotSupportedError when the server ignores Range."""
        ...

    def local_path(self, key: str) -> Path | None:
        """The key's file when the store is a local folder (read in place), else None."""
        ...


def iter_body(read1: Callable[[int], bytes], length: int | None, where: str, errors: tuple[type[BaseException], ...],
              limit: int | None = None) -> Iterator[bytes]:
    """Exactly `length` bytes from `read1` (one socket read per call) as chunks, or with `length` None all bytes up to
    end of stream, refused past `limit`; a body that ends short is a TransientStoreError."""
    received = 0
    while length is None or received < length:
        try:
            chunk = read1(CHUNK if length is None else min(CHUNK, length - received))
        except errors as exc:
            raise TransientStoreError(f"{where}: {type(exc).__name__} after {received:,} of {length or 'unsized'} bytes: {exc}") from None
        if not chunk and length is None:
            return
        if not chunk:
            raise TransientStoreError(f"{where}: connection closed after {received:,} of {length:,} bytes")
        received += len(chunk)
        if limit is not None:
            check_size(where, received, limit)
        yield chunk


def collect(chunks: Iterator[bytes], where: str) -> bytes:
    """A small object's chunks joined, failing with DeadlineError when they take over READ_BYTES_SECONDS (a trickle)."""
    deadline = Deadline.after(READ_BYTES_SECONDS, where, "check the server or network")
    parts = []
    for chunk in chunks:
        parts.append(chunk)
        deadline.check()
    return b"".join(parts)


def check_range_answer(where: str, status: int, length: int | None, start: int, end: int) -> None:
    """Refuse an answer to `Range: bytes=start-(end-1)` that is not those bytes: a 200 with more means no Range support,
    a 206 with fewer means the object is shorter than the manifest says (permanent, not retried)."""
    if status == 200 and (start > 0 or (length is not None and length != end - start)):
        raise RangeNotSupportedError(
            f"{where}: the server ignored Range (HTTP 200 with the whole {length or 'unsized'}-byte body for bytes "
            f"{start}-{end - 1}); it must be read in one streamed GET"
        )
    if status == 206 and length is not None and length < end - start:
        raise IntegrityError(f"{where}: the object ends at byte {start + length:,}, before {end:,}: it is shorter than the manifest says")
    if length is not None and length != end - start:
        raise TransientStoreError(f"{where}: asked for {end - start:,} bytes at {start:,}, the server announced {length:,}")


def check_size(where: str, size: int | None, limit: int) -> None:
    """Refuse an object announced as larger than `limit` before a byte of it is read."""
    if size is not None and size > limit:
        raise TooLargeError(f"{where}: {size:,} bytes is over the {limit:,}-byte cap for this read; refusing it unread")


class LocalStore:
    """A dataset root that is a folder on this machine; only regular files inside it are ever opened."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.url = str(self.root)

    def local_path(self, key: str) -> Path:
        """The key's path, refused if it resolves outside the root or names anything but a regular file (or nothing yet)."""
        path = self.root / check_key(key, f"key under {self.root}")
        resolved = path.resolve()
        if not resolved.is_relative_to(self.root):
            raise UnsafeFileError(f"{self.root}: key {key} resolves to {resolved}, outside the dataset root; refusing it")
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return path
        if not stat.S_ISREG(mode):
            kind = "symlink" if stat.S_ISLNK(mode) else "FIFO" if stat.S_ISFIFO(mode) else "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "non-regular file"
            raise UnsafeFileError(f"{self.root}: key {key} is a {kind}; a dataset holds regular files only, refusing it")
        return path

    def _open(self, key: str) -> BinaryIO:
        """The key's regular file, opened without following a symlink or blocking on a FIFO swapped in since the check."""
        path = self.local_path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise StoreError(f"{self.root}: no file for key {key}") from None
        except OSError as exc:
            raise UnsafeFileError(f"{self.root}: key {key} cannot be opened as a regular file: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafeFileError(f"{self.root}: key {key} is not a regular file; refusing it")
        return os.fdopen(fd, "rb")

    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes:
        with self._open(key) as f:
            check_size(f"{self.root}/{key}", os.fstat(f.fileno()).st_size, limit)
            return collect(iter_body(f.read1, None, f"{self.root}/{key}", (OSError,), limit), f"{self.root}/{key}")

    def size(self, key: str) -> int:
        with self._open(key) as f:
            return os.fstat(f.fileno()).st_size

    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]:
        with self._open(key) as f:
            f.seek(start)
            yield from iter_body(f.read1, end - start, f"{self.root}/{key}", (OSError,))


def split_manifest_url(url: str) -> tuple[str, str]:
    """Split a manifest URL into (dataset root URL, manifest key).

    A URL naming a folder means its `manifest.json`; a manifest inside `manifests/`
    belongs to the folder above it.
    """
    parsed = urlparse(url)
    is_local = parsed.scheme in ("", "file") or len(parsed.scheme) == 1  # 1 letter: a Windows drive
    path = parsed.path if parsed.scheme == "file" else (url if is_local else parsed.path)
    if is_local and Path(path).is_dir():
        return str(Path(path)), LATEST_KEY
    if not path.endswith(".json"):
        path = posixpath.join(path, LATEST_KEY) if path else LATEST_KEY
    folder, name = posixpath.split(path)
    key = name
    if posixpath.basename(folder) == VERSIONS_DIR:
        folder, key = posixpath.dirname(folder), f"{VERSIONS_DIR}/{name}"
    if is_local:
        return folder or ".", key
    return parsed._replace(path=folder).geturl(), key


def is_remote(root_url: str) -> bool:
    """Whether a dataset root is read through a cache (s3, r2, http) rather than in place."""
    scheme = urlparse(root_url).scheme
    return not (scheme in ("", "file") or len(scheme) == 1)


def open_store(root_url: str, **options) -> Store:
    """The store for a dataset root URL; remote schemes need their optional extras."""
    scheme = urlparse(root_url).scheme
    if not is_remote(root_url):
        return LocalStore(urlparse(root_url).path if scheme == "file" else root_url)
    if scheme in ("s3", "r2"):
        from .store_s3 import S3Store

        return S3Store(root_url, **options)
    if scheme in ("http", "https"):
        from .store_http import HttpStore

        return HttpStore(root_url, **options)
    raise StoreError(f"{root_url}: unsupported URL scheme {scheme!r}; use a path, file://, s3://, r2:// or https://")
