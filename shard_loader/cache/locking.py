"""An exclusive lock on a file inside the cache: ranks sharing a cache download each file once.

It is an fcntl lock, so the kernel drops it when its holder dies: no stale lock survives a crash, and nothing lives
outside the cache directory. The lock file goes away with its use: the holder removes it before letting go, and a
waiter that then gets the lock on the removed file sees that it is no longer the file at the path and tries again,
so zero-byte lock files do not pile up beside the files they guarded.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from .files import CachePath


def _lock(path: CachePath, wait: bool) -> int | None:
    """A descriptor of the lock file now at `path`, locked exclusively; None when another holds it and not `wait`."""
    while True:
        fd = path.open(os.O_RDWR | os.O_CREAT)
        try:
            with path.mapped():
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if path.holds(fd):
            return fd
        os.close(fd)  # removed by the holder we waited for: lock the file now at the path


def _unlock(path: CachePath, fd: int) -> None:
    try:
        path.unlink()  # still held, so nobody can be using this file as the lock: later lockers make a new one
    finally:
        os.close(fd)


@contextlib.contextmanager
def file_lock(path: CachePath) -> Iterator[None]:
    fd = _lock(path, wait=True)
    assert fd is not None
    try:
        yield
    finally:
        _unlock(path, fd)


@contextlib.contextmanager
def lock_if_free(path: CachePath) -> Iterator[bool]:
    """The lock at once if nobody holds it (True inside), else False without waiting."""
    fd = _lock(path, wait=False)
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        _unlock(path, fd)
