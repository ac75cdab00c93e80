"""Make a manifest's file available as a verified local path.

Files of a local store are verified and read in place. Files of a remote store are downloaded
into the cache directory and verified before they are renamed into place. A cached file is
trusted without hashing only while a zero-byte marker binds the sha256 it was verified against
to its exact size, mtime and inode; any other cached bytes (a republish of the same key and
size, flipped bytes) are hashed again and re-fetched if they differ: never served.
"""

from __future__ import annotations

import os
from pathlib import Path

from .checksum import verify_file
from ..errors import IntegrityError
from ..errors import StoreError
from ..format import FileRef
from .locking import file_lock
from ..storage import Store


def cached_path(cache_dir: str | Path, ref: FileRef) -> Path:
    return Path(cache_dir) / ref.key


def _marker_prefix(path: Path) -> str:
    return path.name + ".ok-"


def _marker(path: Path, sha256: str) -> Path:
    """The zero-byte marker saying the bytes now at `path` (its size, mtime and inode) have this sha256."""
    st = os.stat(path)
    return path.with_name(f"{_marker_prefix(path)}{sha256}-{st.st_size}-{st.st_mtime_ns}-{st.st_ino}")


def markers(path: Path) -> list[Path]:
    """Every verified marker of `path`, current or stale."""
    return list(path.parent.glob(_marker_prefix(path) + "*")) if path.parent.exists() else []


def is_trusted(path: Path, ref: FileRef) -> bool:
    """Whether the bytes now at `path` were verified to be `ref`'s."""
    try:
        return _marker(path, ref.sha256).exists()
    except FileNotFoundError:
        return False


def mark_verified(path: Path, ref: FileRef) -> None:
    for stale in markers(path):
        stale.unlink(missing_ok=True)
    _marker(path, ref.sha256).touch()


def ensure_local(store: Store, ref: FileRef, cache_dir: str | Path | None) -> Path:
    """A local, verified copy of `ref`: the store's own file, or one in `cache_dir`."""
    path = store.local_path(ref.key)
    if path is not None:
        verify_file(path, ref)
        return path
    if cache_dir is None:
        raise StoreError(f"{store.url} is remote: pass cache_dir to download {ref.key}")
    dest = cached_path(cache_dir, ref)
    if is_trusted(dest, ref):
        return dest
    from .download import download_file

    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.with_name(dest.name + ".check")):
        if dest.exists() and not is_trusted(dest, ref):
            try:
                verify_file(dest, ref)
            except IntegrityError:
                dest.unlink()
        if not dest.exists():
            download_file(store, ref, dest)
        if not is_trusted(dest, ref):
            mark_verified(dest, ref)
    return dest
