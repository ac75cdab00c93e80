"""Leases on cached files, so ranks and workers sharing a cache never delete a file another one reads.

A consumer holds a shared `flock` on a file's `.lease` from before it looks for the file until it
has unmapped it; eviction deletes the file only under an exclusive lock, so never under a live
reader (the last holder out deletes). The kernel drops a dead holder's lock: leases expire with
their process, and nothing lives outside the cache directory.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


def lease_path(path: Path) -> Path:
    return path.with_name(path.name + ".lease")


def _still_linked(fd: int, path: Path) -> bool:
    """Whether `fd` is the file now at `path` (an evictor may have removed it between open and lock)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


@dataclass
class Lease:
    """A shared lock on one cached file's lease; the file stays on disk while it is held."""

    fd: int

    def release(self) -> None:
        """Let go of the file, stamping the lease with the time (eviction takes the least recently released first)."""
        os.utime(self.fd)
        os.close(self.fd)


def hold(path: Path) -> Lease:
    """Take a shared lease on `path` (which need not exist yet: the holder may be about to download it)."""
    lease = lease_path(path)
    lease.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lease, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if _still_linked(fd, lease):
            return Lease(fd)
        os.close(fd)


def evict(path: Path, companions: Iterable[Path] = ()) -> bool:
    """Delete `path`, its `companions` and its lease unless a live consumer holds the lease; True if deleted."""
    lease = lease_path(path)
    try:
        fd = os.open(lease, os.O_RDWR)
    except FileNotFoundError:
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if not _still_linked(fd, lease):
                return False
        for p in (path, *companions):
            p.unlink(missing_ok=True)
        lease.unlink(missing_ok=True)
        return True
    finally:
        if fd is not None:
            os.close(fd)
