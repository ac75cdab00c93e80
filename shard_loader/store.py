"""Where a dataset lives: a URL resolved to a store that reads keys under the dataset root.

Local paths and `file://` are read in place; `s3://`/`r2://` and `http(s)://` are remote
and are downloaded into a cache before use (see `cache.py`).
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from .errors import StoreError
from .format import LATEST_KEY, VERSIONS_DIR, check_key


class Store(Protocol):
    """Read access to the keys under one dataset root."""

    url: str

    def read_bytes(self, key: str) -> bytes: ...

    def size(self, key: str) -> int: ...

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of a key."""
        ...

    def local_path(self, key: str) -> Path | None:
        """The key's file when the store is a local folder (read in place), else None."""
        ...


class LocalStore:
    """A dataset root that is a folder on this machine."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key, f"key under {self.root}")

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise StoreError(f"{self.root}: no file for key {key}") from None

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise StoreError(f"{self.root}: no file for key {key}") from None

    def read_range(self, key: str, start: int, end: int) -> bytes:
        with open(self._path(key), "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def local_path(self, key: str) -> Path:
        return self._path(key)


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


def open_store(root_url: str, **options) -> Store:
    """The store for a dataset root URL; remote schemes need their optional extras."""
    scheme = urlparse(root_url).scheme
    if scheme in ("", "file") or len(scheme) == 1:
        return LocalStore(urlparse(root_url).path if scheme == "file" else root_url)
    if scheme in ("s3", "r2"):
        from .store_s3 import S3Store

        return S3Store(root_url, **options)
    if scheme in ("http", "https"):
        from .store_http import HttpStore

        return HttpStore(root_url, **options)
    raise StoreError(f"{root_url}: unsupported URL scheme {scheme!r}; use a path, file://, s3://, r2:// or https://")
