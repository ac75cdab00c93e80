"""Make a manifest's file available as a verified local path.

Files of a local store are verified and read in place; files of a remote store are
downloaded into the cache directory and verified before they are renamed into place.
"""

from __future__ import annotations

from pathlib import Path

from .checksum import verify_file
from .format import FileRef
from .store import Store


def cached_path(cache_dir: str | Path, ref: FileRef) -> Path:
    return Path(cache_dir) / ref.key


def ensure_local(store: Store, ref: FileRef, cache_dir: str | Path | None) -> Path:
    """A local, verified copy of `ref`: the store's own file, or one in `cache_dir`."""
    path = store.local_path(ref.key)
    if path is not None:
        verify_file(path, ref)
        return path
    if cache_dir is None:
        raise ValueError(f"{store.url} is remote: pass cache_dir to download {ref.key}")
    from .download import download_file

    return download_file(store, ref, cached_path(cache_dir, ref))
