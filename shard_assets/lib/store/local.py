"""The default store: a folder on this machine, written with temp files and atomic renames."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

from shard_loader.format import check_key

from ..errors import ObjectStoreError

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


class LocalFolderStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self._swept: dict[Path, float] = {}  # folder -> when this store last swept it (time.monotonic)

    def describe(self) -> str:
        return f"local folder {self.root}"

    def loader_url(self) -> str:
        return str(self.root)

    def path(self, key: str) -> Path:
        return self.root / check_key(key, f"store key under {self.root}")

    def _sweep_once(self, folder: Path) -> None:
        """Sweep a folder's stale temps on this store's first write there, then at most once per
        STALE_TEMP_SECONDS: a write costs O(1), not a listing of its folder (30,000 part records share one)."""
        now = time.monotonic()
        if now - self._swept.get(folder, -math.inf) >= STALE_TEMP_SECONDS:
            self._swept[folder] = now
            sweep_stale_temps(folder)

    def _atomic_write(self, key: str, write) -> Path:
        dest = self.path(key)
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

    def put_file(self, key: str, path: Path) -> None:
        def copy(f):
            with open(path, "rb") as src:
                shutil.copyfileobj(src, f, 8 << 20)

        os.replace(self._atomic_write(key, copy), self.path(key))

    def put_bytes(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        tmp = self._atomic_write(key, lambda f: f.write(data))
        if not if_absent:
            os.replace(tmp, self.path(key))
            return True
        try:
            os.link(tmp, self.path(key))  # fails if the key exists: first writer wins, whole
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError:
            raise self._missing(key) from None

    def _missing(self, key: str) -> ObjectStoreError:
        return ObjectStoreError(f"{self.describe()}: no object at key {key}")

    def get_file(self, key: str, path: Path) -> None:
        try:
            shutil.copyfile(self.path(key), path)
        except FileNotFoundError:
            raise self._missing(key) from None

    def open_read(self, key: str) -> BinaryIO:
        try:
            return open(self.path(key), "rb")
        except FileNotFoundError:
            raise self._missing(key) from None

    def local_path(self, key: str) -> Path:
        return self.path(key)

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def modified(self, key: str) -> float:
        try:
            return self.path(key).stat().st_mtime
        except FileNotFoundError:
            raise self._missing(key) from None

    def list(self, prefix: str) -> list[tuple[str, int]]:
        folder = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not folder.is_dir():
            return []
        found, pending = [], [(folder, folder.relative_to(self.root).as_posix())]
        while pending:  # scandir, not rglob: one stat per entry, reused (a folder of 30,000 shards is listed per publish)
            path, rel = pending.pop()
            with os.scandir(path) as entries:
                for entry in entries:
                    key = f"{rel}/{entry.name}" if rel != "." else entry.name
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((Path(entry.path), key))
                    elif entry.is_file() and not entry.name.startswith(".") and key.startswith(prefix):
                        found.append((key, entry.stat().st_size))
        return sorted(found)

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self.path(key).stat().st_size
        except FileNotFoundError:
            raise self._missing(key) from None
