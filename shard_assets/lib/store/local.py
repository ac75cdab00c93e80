"""The default store: a folder on this machine. Reads and key refusals are the loader's LocalStore (regular files
inside the root only); writes go through temp files and atomic renames, a write-once put through a hard link."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from shard_loader.errors import NotFoundError, StoreError
from shard_loader.format import FileRef
from shard_loader.storage import LocalStore
from shard_loader.storage.retry import RequestStats, RetryPolicy

from .base import STORE_RETRY, ObjectInfo, ObjectStore, file_sha256


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # published files readable by others (0644 under the usual umask), not mkstemp's 0600
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


class LocalFolderStore(LocalStore, ObjectStore):
    def __init__(self, root: str | Path, retry: RetryPolicy = STORE_RETRY):
        super().__init__(root)
        self.retry, self.stats = retry, RequestStats()
        self._swept: dict[Path, float] = {}  # folder -> when this store last swept it (time.monotonic)

    def describe(self) -> str:
        return f"local folder {self.root}"

    def loader_url(self) -> str:
        return str(self.root)

    @contextmanager
    def _os_errors(self, action: str, key: str) -> Iterator[None]:
        """An OSError of the file system (full disk, no permission) as the loader's StoreError naming the key."""
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

    def _download(self, key: str, path: Path) -> None:
        with self._open(key) as src, self._os_errors("download", key), open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)

    def _write_file(self, key: str, path: Path) -> None:
        def copy(f: BinaryIO) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, f, 8 << 20)

        with self._os_errors("upload", key):
            os.replace(self._atomic_write(key, copy), self.local_path(key))

    def _write(self, key: str, data: bytes) -> None:
        with self._os_errors("put", key):
            os.replace(self._atomic_write(key, lambda f: f.write(data)), self.local_path(key))

    def _create(self, key: str, data: bytes) -> bool:
        with self._os_errors("put", key):
            tmp = self._atomic_write(key, lambda f: f.write(data))
            try:
                os.link(tmp, self.local_path(key))  # fails if the key exists: first writer wins, whole
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)

    def _remove(self, key: str) -> None:
        with self._os_errors("delete", key):
            self.local_path(key).unlink(missing_ok=True)

    def _info(self, key: str) -> ObjectInfo:
        path = self.local_path(key)  # a symlink or FIFO is refused here, as the loader refuses it
        try:
            st = path.stat()
        except FileNotFoundError:
            raise NotFoundError(f"{self.root}: no file for key {key}") from None
        except OSError as exc:
            raise StoreError(f"{self.root}: head {key} failed: {exc.strerror or exc}") from exc
        return ObjectInfo(st.st_size, st.st_mtime)

    def _listing(self, prefix: str) -> list[tuple[str, int]]:
        folder = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not folder.is_dir():
            return []
        found, pending = [], [(folder, folder.relative_to(self.root).as_posix())]
        with self._os_errors("list", prefix):
            while (
                pending
            ):  # scandir, not rglob: one stat per entry, reused (a folder of 30,000 shards is listed per publish)
                path, rel = pending.pop()
                with os.scandir(path) as entries:
                    for entry in entries:
                        key = f"{rel}/{entry.name}" if rel != "." else entry.name
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((Path(entry.path), key))
                        elif (
                            entry.is_file(follow_symlinks=False)
                            and not entry.name.startswith(".")
                            and key.startswith(prefix)
                        ):
                            found.append((key, entry.stat(follow_symlinks=False).st_size))
        return sorted(found)

    def _holds(self, key: str, info: ObjectInfo, path: Path, ref: FileRef) -> bool:
        """A local file has no stored checksum: it is hashed again (a local read, cheaper than any upload)."""
        with self._os_errors("hash", key):
            return file_sha256(self.local_path(key)) == ref.sha256
