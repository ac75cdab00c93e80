"""Make a manifest's file available as a verified local path.

Files of a local store are verified and read in place. Files of a remote store are downloaded into the cache
directory and verified before they are renamed into place. A cached file is trusted without hashing only while a
zero-byte marker, `<file>.ok-<sha256>-<size>-<inode>-<mtime>-<ctime>`, binds the sha256 it was verified against to
the file's status. The kernel sets a file's ctime to the current time on every change made through the file system
(a write, a truncate, a chmod, a utime that puts an old mtime back, a rename) and no call sets it to a chosen value,
so bytes changed after their verification are never trusted: they are hashed again and re-fetched if they differ,
never served (docs/loader.md says what this does not catch).
"""

from __future__ import annotations

import os
from pathlib import Path

from .checksum import check_open_file, verify_file
from ..errors import IntegrityError, MissingFileError, StoreError
from .files import CachePath
from ..format import FileRef
from .locking import file_lock
from ..storage import Store


_MARK = ".ok-"


def cached_path(cache_dir: str | Path, ref: FileRef) -> CachePath:
    return CachePath(Path(cache_dir), ref.key)


def _marker(path: CachePath, st: os.stat_result, sha256: str) -> CachePath:
    """The marker saying the bytes now at `path` (of this status) have this sha256."""
    return path.plus(f"{_MARK}{sha256}-{st.st_size}-{st.st_ino}-{st.st_mtime_ns}-{st.st_ctime_ns}")


def markers(path: CachePath) -> list[CachePath]:
    """Every verified marker of `path`, current or stale."""
    return path.siblings(path.name + _MARK)


def is_trusted(path: CachePath, ref: FileRef) -> bool:
    """Whether the bytes now at `path` were verified to be `ref`'s and have not changed since."""
    st = path.stat()
    return st is not None and _marker(path, st, ref.sha256).stat() is not None


def _mark(path: CachePath, st: os.stat_result, ref: FileRef) -> None:
    for stale in markers(path):
        stale.unlink()
    _marker(path, st, ref.sha256).write_bytes(b"")


def _verify_cached(path: CachePath, ref: FileRef) -> bool:
    """Hash the cached file and mark it verified if it holds `ref`'s bytes, with its status from before the hashing
    (a change made meanwhile leaves it untrusted); False if it holds other bytes."""
    try:
        fd = path.open(os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        st = check_open_file(fd, ref, path)
    except IntegrityError:
        return False
    finally:
        os.close(fd)
    _mark(path, st, ref)
    return True


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
        return dest.path
    from .download import download_file

    with file_lock(dest.plus(".check")):
        if is_trusted(dest, ref) or _verify_cached(dest, ref):
            return dest.path
        dest.unlink()  # other bytes (flipped, or an older publish of the key): never served
        download_file(store, ref, dest)  # verified before its rename into place
        st = dest.stat()
        if st is None:
            raise MissingFileError(
                f"{ref.key}: {dest} was removed right after its download; is another program cleaning the cache?"
            )
        _mark(dest, st, ref)
    return dest.path
