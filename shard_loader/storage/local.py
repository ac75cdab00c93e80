"""A dataset root that is a folder on this machine: read in place, and only regular files inside it are opened;
written (a reader's lease, the builder's files) through a synced temp file renamed into place."""

from __future__ import annotations

import math
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from io import BufferedReader
from typing import BinaryIO

from ..cache.files import describe
from ..errors import NotFoundError, StoreError, UnsafeFileError
from ..format import check_key
from .retry import RequestStats, RetryPolicy, retried
from .transfer import MAX_OBJECT_BYTES, check_size, collect, iter_body


def _umask() -> int:
    """The process's umask, read where Linux shows it (/proc/self/status), so a thread creating a file meanwhile never
    sees it cleared; elsewhere set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # written files readable by others (0644 under the usual umask), not mkstemp's 0600
STALE_TEMP_SECONDS = 3600  # a temp file this old has no live writer: its process was killed mid-write


def sweep_stale_temps(folder: Path) -> None:
    """Delete the temp files in `folder` left by writers killed mid-write (SIGKILL skips their cleanup)."""
    cutoff = time.time() - STALE_TEMP_SECONDS
    for tmp in folder.glob(".*.tmp"):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
        except FileNotFoundError:  # another writer swept it first
            pass


class LocalStore:
    """A dataset root that is a folder on this machine; only regular files inside it are ever opened."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.url = str(self.root)
        self.retry, self.stats = RetryPolicy(), RequestStats()
        self._swept: dict[Path, float] = {}  # folder -> when this store last swept it (time.monotonic)

    def local_path(self, key: str) -> Path:
        """The key's path, refused if it resolves outside the root or names anything but a regular file (or nothing
        yet)."""
        path = self.root / check_key(key, f"key under {self.root}")
        resolved = path.resolve()
        if not resolved.is_relative_to(self.root):
            raise UnsafeFileError(
                f"{self.root}: key {key} resolves to {resolved}, outside the dataset root; refusing it"
            )
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return path
        if not stat.S_ISREG(mode):
            raise UnsafeFileError(
                f"{self.root}: key {key} is {describe(mode)}; a dataset holds regular files only, refusing it"
            )
        return path

    def _open(self, key: str) -> BufferedReader:
        """The key's regular file, opened without following a symlink or blocking on a FIFO swapped in since the
        check."""
        path = self.local_path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            if not Path(self.root).is_dir():
                raise NotFoundError(
                    f"{self.root}: the folder does not exist, so it holds no dataset; check the path (or build one "
                    "there)"
                ) from None
            raise NotFoundError(
                f"{self.root}: no file for key {key}; check that a dataset is published there"
            ) from None
        except OSError as exc:
            raise UnsafeFileError(
                f"{self.root}: key {key} cannot be opened as a regular file: {exc.strerror}"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafeFileError(f"{self.root}: key {key} is not a regular file; refusing it")
        return os.fdopen(fd, "rb")

    @retried("get")
    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes:
        with self._open(key) as f:
            check_size(f"{self.root}/{key}", os.fstat(f.fileno()).st_size, limit)
            return collect(iter_body(f.read1, None, f"{self.root}/{key}", (OSError,), limit), f"{self.root}/{key}")

    @retried("head")
    def size(self, key: str) -> int:
        with self._open(key) as f:
            return os.fstat(f.fileno()).st_size

    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]:
        with self._open(key) as f:
            f.seek(start)
            yield from iter_body(f.read1, end - start, f"{self.root}/{key}", (OSError,))

    @contextmanager
    def _os_errors(self, action: str, key: str) -> Iterator[None]:
        """An OSError of the file system (full disk, no permission) as a StoreError naming the key."""
        try:
            yield
        except OSError as exc:
            raise StoreError(f"{self.root}: {action} {key} failed: {exc.strerror or exc}") from exc

    def _sweep_once(self, folder: Path) -> None:
        """Sweep a folder's stale temps on this store's first write there, then at most once per
        STALE_TEMP_SECONDS: a write costs O(1), not a listing of its folder (30,000 part records share one)."""
        now = time.monotonic()
        if now - self._swept.get(folder, -math.inf) >= STALE_TEMP_SECONDS:
            self._swept[folder] = now
            sweep_stale_temps(folder)

    def _atomic_write(self, key: str, write: Callable[[BinaryIO], object]) -> Path:
        """A whole, synced temp file beside the key's file (not yet in place); the caller renames or links it."""
        dest = self.local_path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        self._sweep_once(dest.parent)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), FILE_MODE)
                write(f)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
        return Path(tmp)

    @retried("put")
    def write_bytes(self, key: str, data: bytes) -> None:
        """Replace the file at `key` with `data` atomically: a reader sees the old bytes or the new, never a part."""
        with self._os_errors("put", key):
            os.replace(self._atomic_write(key, lambda f: f.write(data)), self.local_path(key))

    @retried("delete")
    def remove(self, key: str) -> None:
        """Remove the file at `key`; a missing one is not an error."""
        with self._os_errors("delete", key):
            self.local_path(key).unlink(missing_ok=True)
