"""sha256 and size checks of files against the manifest's promises."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..errors import IntegrityError, StoreError
from ..format import FileRef
from ..format.shard import copy_errors, open_regular as open_plain
from .files import CachePath


def open_regular(path: str | Path | CachePath) -> int:
    """A read descriptor of the regular file at `path`, never through a symlink nor blocking on a FIFO (a cache path is
    walked link-free from its root; another path is checked at its last step); FileNotFoundError when absent."""
    return path.open(os.O_RDONLY) if isinstance(path, CachePath) else open_plain(path)


def sha256_fd(fd: int) -> str:
    """The sha256 of the whole file open at `fd` (read from its start; the descriptor stays open)."""
    os.lseek(fd, 0, os.SEEK_SET)
    with os.fdopen(fd, "rb", closefd=False) as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_file(path: str | Path | CachePath) -> str:
    fd = open_regular(path)
    try:
        return sha256_fd(fd)
    finally:
        os.close(fd)


def check_open_file(fd: int, ref: FileRef, where: str | Path | CachePath) -> os.stat_result:
    """Raise IntegrityError naming the key unless the file open at `fd` has the manifest's size and sha256; its status
    taken before hashing (so a change made while hashing shows in a later status)."""
    st = os.fstat(fd)
    if st.st_size != ref.size:
        raise IntegrityError(f"{ref.key}: size is {st.st_size} bytes, manifest says {ref.size} ({where})")
    digest = sha256_fd(fd)
    if digest != ref.sha256:
        raise IntegrityError(f"{ref.key}: sha256 is {digest}, manifest says {ref.sha256} ({where})")
    return st


def verify_file(path: str | Path | CachePath, ref: FileRef) -> os.stat_result:
    """Raise IntegrityError naming the key unless the file has the manifest's size and sha256 (MissingFileError if it is
    gone); the file's status as it was verified."""
    with copy_errors(path, ref.key, StoreError):
        fd = open_regular(path)
    try:
        return check_open_file(fd, ref, path)
    finally:
        os.close(fd)
