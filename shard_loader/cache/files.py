"""Paths inside a cache directory, and file operations on them that never follow a symlink planted there.

A `CachePath` is the cache's root (the directory the caller chose, which may itself be a symlink) and a path below it.
Every operation walks from the root one folder at a time with `O_NOFOLLOW | O_DIRECTORY` and acts on the last name
relative to its folder's descriptor (openat, fstatat, unlinkat, renameat), so a symlink swapped in for any part of the
path between a check and its use is refused, not followed. A file is opened with `O_NOFOLLOW | O_NONBLOCK` and used
only if `fstat` says it is a regular file, and opened for writing only if it has one name (a hard link planted there
may be another file's inode). Anything else where the cache keeps a file or a folder (a symlink, a
directory, a FIFO, a device) raises `UnsafeCacheFileError` naming the path, and nothing is read, written or deleted
through it; other refusals of the file system (permissions, a read-only disk) raise `CacheFileError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ..errors import CacheFileError, DiskBudgetError, UnsafeCacheFileError

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: a FIFO swapped in is refused, not awaited
# a link, or a non-file, where a file or folder belongs
_NOT_FOLLOWED = (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO)
_FULL = (errno.ENOSPC, errno.EDQUOT)


def describe(mode: int) -> str:
    """What a file mode is, in words."""
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "a regular file"


@dataclass(frozen=True)
class CachePath:
    """A file (or folder) `rel` under the cache directory `root`; `rel` is '/'-separated and never leaves the root."""

    root: Path
    rel: str

    def __post_init__(self) -> None:
        if not self.rel or self.rel.startswith("/") or any(p in ("", ".", "..") for p in self.rel.split("/")):
            raise ValueError(f"{self.rel!r} is not a relative path inside the cache {self.root}")

    def __str__(self) -> str:
        return str(self.path)

    @property
    def path(self) -> Path:
        """The path as the rest of the world names it (readers, messages)."""
        return self.root / self.rel

    @property
    def name(self) -> str:
        return self.rel.rpartition("/")[2]

    def plus(self, suffix: str) -> CachePath:
        """A sidecar of this file: the same name with `suffix` appended, in the same folder."""
        return CachePath(self.root, self.rel + suffix)

    def child(self, name: str) -> CachePath:
        return CachePath(self.root, f"{self.rel}/{name}")

    def siblings(self, prefix: str) -> list[CachePath]:
        """The entries of this path's folder whose names start with `prefix` ([] when the folder is absent)."""
        folder, _, _ = self.rel.rpartition("/")
        with self._folder(create=False) as fd:
            names = [] if fd is None else os.listdir(fd)
        return [CachePath(self.root, f"{folder}/{n}" if folder else n) for n in names if n.startswith(prefix)]

    def refuse(self, kind: str, wanted: str = "a regular file") -> NoReturn:
        raise UnsafeCacheFileError(
            f"{self.path} is {kind} where the cache keeps {wanted} of its own; it never follows or uses what it did "
            "not make: remove it (and check who else writes to this cache directory)"
        )

    def _fail(self, exc: OSError, folder: int | None, wanted: str = "a regular file") -> NoReturn:
        """Raise the loader's error for an OSError on this path. Callers let FileNotFoundError through themselves, with
        a bare `raise`: re-raising it from here would keep this frame, which holds it, in its traceback, a reference
        cycle that keeps every caller's frame (and a window's memory maps) alive until the cyclic garbage collector
        runs."""
        if exc.errno in _NOT_FOLLOWED and folder is not None:
            kind = "something else"
            with contextlib.suppress(OSError):
                kind = describe(os.stat(self.name, dir_fd=folder, follow_symlinks=False).st_mode)
            self.refuse(kind, wanted)
        if exc.errno in _FULL:
            raise DiskBudgetError(
                f"{self.path}: the disk of the cache directory {self.root} is full ({exc.strerror}); free space there "
                "or choose another cache_dir"
            ) from None
        raise CacheFileError(
            f"{self.path}: {exc.strerror}; the cache needs to read and write its own files here"
        ) from None

    @contextlib.contextmanager
    def mapped(self) -> Iterator[None]:
        """The loader's error for an OSError raised inside while using this file's descriptor (a write, a sync, a
        truncate, a lock): a full disk is a DiskBudgetError naming the cache directory, never a raw OSError."""
        try:
            yield
        except (FileNotFoundError, BlockingIOError):
            raise  # absent, or a lock held by another: the caller's to handle
        except OSError as exc:
            self._fail(exc, None)

    @contextlib.contextmanager
    def _folder(self, create: bool) -> Iterator[int | None]:
        """A descriptor of the folder holding this path, walked from the root without following any link (made when
        `create`); None when a folder on the way does not exist."""
        if create:
            try:  # the root is the caller's choice: followed if it is a link
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CacheFileError(f"{self.root}: cannot make the cache directory ({exc.strerror})") from None
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = -1  # yielded below, not from inside the handler: a generator suspended there keeps the exception alive
        except OSError as exc:
            raise CacheFileError(f"{self.root}: cannot use it as the cache directory ({exc.strerror})") from None
        if fd < 0:
            yield None
            return
        parts = self.rel.split("/")[:-1]
        try:
            for i, name in enumerate(parts):
                sub = _open_folder(fd, name, create, CachePath(self.root, "/".join(parts[: i + 1])))
                os.close(fd)
                fd = sub
                if fd < 0:
                    break
            yield fd if fd >= 0 else None
        finally:
            if fd >= 0:
                os.close(fd)

    def open(self, flags: int, mode: int = 0o644) -> int:
        """A descriptor of this regular file, made with its folders under O_CREAT; FileNotFoundError when it is
        absent."""
        with self._folder(create=bool(flags & os.O_CREAT)) as folder:
            if folder is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", str(self.path))
            try:  # O_TRUNC waits for the checks below: a hard link's other inode is never truncated
                fd = os.open(self.name, (flags & ~os.O_TRUNC) | _FILE_FLAGS, mode, dir_fd=folder)
            except FileNotFoundError:
                raise
            except OSError as exc:
                self._fail(exc, folder)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            self.refuse(describe(st.st_mode))
        if flags & (os.O_WRONLY | os.O_RDWR) and st.st_nlink > 1:  # O_NOFOLLOW does not see a hard link
            os.close(fd)
            self.refuse(f"a file that has {st.st_nlink} names (a hard link, perhaps to a file outside the cache)")
        if flags & os.O_TRUNC:
            with self.mapped():
                os.ftruncate(fd, 0)
        return fd

    def stat(self) -> os.stat_result | None:
        """This regular file's status, None when it is absent; anything but a regular file is refused."""
        with self._folder(create=False) as folder:
            if folder is None:
                return None
            try:
                st = os.stat(self.name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                return None
            except OSError as exc:
                self._fail(exc, folder)
        if not stat.S_ISREG(st.st_mode):
            self.refuse(describe(st.st_mode))
        return st

    def holds(self, fd: int) -> bool:
        """Whether `fd` is the file now at this path (another process may have removed or replaced it since it was
        opened)."""
        st, mine = self.stat(), os.fstat(fd)
        return st is not None and (st.st_ino, st.st_dev) == (mine.st_ino, mine.st_dev)

    def unlink(self) -> bool:
        """Remove this file if it is there (a link in its place is removed itself, never followed); True if it was."""
        with self._folder(create=False) as folder:
            if folder is None:
                return False
            try:
                os.unlink(self.name, dir_fd=folder)
            except FileNotFoundError:
                return False
            except OSError as exc:
                self._fail(exc, folder)
        return True

    def replace(self, dest: CachePath) -> None:
        """Rename this file to `dest` atomically (a link at `dest` is replaced, never followed)."""
        with self._folder(create=False) as src, dest._folder(create=True) as dst:
            if src is None or dst is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", str(self.path))
            try:
                os.replace(self.name, dest.name, src_dir_fd=src, dst_dir_fd=dst)
            except FileNotFoundError:
                raise
            except OSError as exc:
                (dest if exc.errno == errno.EISDIR else self)._fail(exc, dst if exc.errno == errno.EISDIR else src)

    def read_bytes(self, limit: int = 1 << 16) -> bytes | None:
        """The first `limit` bytes of this small file (a marker, a journal), None when it is absent."""
        try:
            fd = self.open(os.O_RDONLY)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read(limit)

    def write_bytes(self, data: bytes, append: bool = False) -> None:
        """Write (or append) `data` to this file, made with its folders if absent."""
        fd = self.open(os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC))
        with self.mapped(), os.fdopen(fd, "wb") as f:
            f.write(data)

    def names(self) -> list[str]:
        """The entries of this folder ([] when it is absent); the folder must be a real one, not a link."""
        with self._folder(create=False) as folder:
            if folder is None:
                return []
            try:
                fd = os.open(self.name, _FOLDER_FLAGS, dir_fd=folder)
            except FileNotFoundError:
                return []
            except OSError as exc:
                self._fail(exc, folder, "a folder")
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)


def _open_folder(parent: int, name: str, create: bool, where: CachePath) -> int:
    """A descriptor of the folder `name` in `parent`, made when absent and `create`; -1 when absent otherwise."""
    for attempt in range(2):
        try:
            return os.open(name, _FOLDER_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create or attempt:
                return -1
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:
                pass  # made meanwhile by another consumer (or planted: the next open refuses a link)
            except OSError as exc:
                where._fail(exc, parent, "a folder")
        except OSError as exc:
            where._fail(exc, parent, "a folder")
    return -1


def walk(root: Path) -> Iterator[tuple[CachePath, os.stat_result]]:
    """Every regular file under `root` with its status, without following a link (links and other odd entries are
    skipped: nothing here uses them). Used to measure and tidy the cache, never to read a file's content."""
    for folder, dirs, files in os.walk(root):  # os.walk never descends into a link to a folder
        base = Path(folder).relative_to(root).as_posix()
        for name in files:
            try:
                st = os.stat(os.path.join(folder, name), follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield CachePath(root, name if base == "." else f"{base}/{name}"), st
