"""Leases on cached files, so ranks and workers sharing a cache never delete a file another one reads.

A consumer holds a shared `flock` on a file's `.lease` from before it looks for the file until it
has unmapped it; eviction deletes the file only under an exclusive lock, so never under a live
reader (the last holder out deletes). The kernel drops a dead holder's lock: leases expire with
their process, and nothing lives outside the cache directory. A lease goes away with the file it
guards: eviction removes both, and the last holder of a lease whose file never arrived removes it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import CacheFileError
from .files import CachePath


def lease_path(path: CachePath) -> CachePath:
    return path.plus(".lease")


@dataclass
class Lease:
    """A shared lock on one cached file's lease; the file stays on disk while it is held."""

    fd: int
    path: CachePath  # the file it keeps

    def release(self) -> None:
        """Let go of the file, stamping the lease with the time (eviction takes the least recently released first).
        A lease whose file is not there (never fetched, or evicted) is removed by the last holder out."""
        lease = lease_path(self.path)
        try:
            with lease.mapped():
                os.utime(self.fd)
            if self.path.stat() is None:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by nobody else
                except BlockingIOError:
                    return
                if lease.holds(self.fd):
                    lease.unlink()
        except CacheFileError:
            # something planted where the file or its lease belongs is not a release's to tidy: its next use refuses it
            pass
        finally:
            os.close(self.fd)


def hold(path: CachePath) -> Lease:
    """Take a shared lease on `path` (which need not exist yet: the holder may be about to download it)."""
    lease = lease_path(path)
    while True:
        fd = lease.open(os.O_RDWR | os.O_CREAT)
        try:
            with lease.mapped():
                fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        if lease.holds(fd):
            return Lease(fd, path)
        os.close(fd)  # removed by an evictor between open and lock: take the lease file now at the path


def evict(path: CachePath, companions: Iterable[CachePath] = ()) -> bool:
    """Delete `path`, its `companions` and its lease unless a live consumer holds the lease; True if deleted."""
    lease = lease_path(path)
    # made if absent, so a consumer cannot take it between our look and the delete
    fd = lease.open(os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if not lease.holds(fd):
            return False
        for p in (path, *companions):
            p.unlink()
        lease.unlink()
        return True
    finally:
        os.close(fd)
