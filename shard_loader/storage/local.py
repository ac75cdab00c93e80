"""A dataset root that is a folder on this machine: read in place, and only regular files inside it are opened."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from io import BufferedReader

from ..errors import NotFoundError, UnsafeFileError
from ..format import check_key
from .retry import RequestStats, RetryPolicy, retried
from .transfer import MAX_OBJECT_BYTES, check_size, collect, iter_body


class LocalStore:
    """A dataset root that is a folder on this machine; only regular files inside it are ever opened."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.url = str(self.root)
        self.retry, self.stats = RetryPolicy(), RequestStats()

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
            kind = (
                "symlink"
                if stat.S_ISLNK(mode)
                else "FIFO"
                if stat.S_ISFIFO(mode)
                else "device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "non-regular file"
            )
            raise UnsafeFileError(
                f"{self.root}: key {key} is a {kind}; a dataset holds regular files only, refusing it"
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
