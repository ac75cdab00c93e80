"""Where a dataset lives: a URL resolved to the store that reads keys under the dataset root.

Local paths and `file://` are read in place; `s3://`/`r2://` and `http(s)://` are remote and are
downloaded into a cache before use (see `shard_loader.cache`).
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..errors import StoreError
from ..format import LATEST_KEY, VERSIONS_DIR
from .base import Store
from .local import LocalStore


def url_path(url: str) -> tuple[bool, str]:
    """Whether a URL is a local path (or file://, or a Windows drive), and its path."""
    parsed = urlparse(url)
    local = parsed.scheme in ("", "file") or len(parsed.scheme) == 1
    return local, (parsed.path if parsed.scheme == "file" else url if local else parsed.path)


def split_manifest_url(url: str) -> tuple[str, str]:
    """Split a manifest URL into (dataset root URL, manifest key).

    A URL naming a folder means its `manifest.json`; a manifest inside `manifests/`
    belongs to the folder above it.
    """
    is_local, path = url_path(url)
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
    return urlparse(url)._replace(path=folder).geturl(), key


def is_remote(root_url: str) -> bool:
    """Whether a dataset root is read through a cache (s3, r2, http) rather than in place."""
    scheme = urlparse(root_url).scheme
    return not (scheme in ("", "file") or len(scheme) == 1)


def open_store(root_url: str, **options: Any) -> Store:
    """The store for a dataset root URL; remote schemes need their optional extras."""
    scheme = urlparse(root_url).scheme
    if not is_remote(root_url):
        return LocalStore(urlparse(root_url).path if scheme == "file" else root_url)
    if scheme in ("s3", "r2"):
        from .s3 import S3Store

        return S3Store(root_url, **options)
    if scheme in ("http", "https"):
        from .https import HttpStore

        return HttpStore(root_url, **options)
    raise StoreError(f"{root_url}: unsupported URL scheme {scheme!r}; use a path, file://, s3://, r2:// or https://")
