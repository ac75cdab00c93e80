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
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import urlparse

from .errors import StoreError, UnsafeFileError
from .format import LATEST_KEY, VERSIONS_DIR, check_key
from .transfer import MAX_OBJECT_BYTES, check_size, collect, iter_body

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
            if not Path(self.root).is_dir():
                raise StoreError(f"{self.root}: the folder does not exist, so it holds no dataset; check the path (or build one there)") from None
            raise StoreError(f"{self.root}: no file for key {key}; check that a dataset is published there") from None
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
