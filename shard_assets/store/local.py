"""The default store: a folder on this machine, written with temp files and atomic renames."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

from shard_loader.format import check_key

from .base import ObjectStoreError

STALE_TEMP_SECONDS = 3600  # a temp file this old has no live writer: its process was killed mid-write


def sweep_stale_temps(dest: Path) -> None:
    """Delete temp files of `dest` left by writers killed mid-write (SIGKILL skips their cleanup)."""
    cutoff = time.time() - STALE_TEMP_SECONDS
    for tmp in dest.parent.glob(f".{dest.name}.*.tmp"):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
        except FileNotFoundError:  # another writer swept it first
            pass


class LocalFolderStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def describe(self) -> str:
        return f"local folder {self.root}"

    def loader_url(self) -> str:
        return str(self.root)

    def path(self, key: str) -> Path:
        return self.root / check_key(key, f"store key under {self.root}")

    def _atomic_write(self, key: str, write) -> Path:
        dest = self.path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale_temps(dest)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
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
            raise ObjectStoreError(f"{self.describe()}: no object at key {key}") from None

    def get_file(self, key: str, path: Path) -> None:
        shutil.copyfile(self.path(key), path)

    def open_read(self, key: str) -> BinaryIO:
        return open(self.path(key), "rb")

    def local_path(self, key: str) -> Path:
        return self.path(key)

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def size(self, key: str) -> int:
        return self.path(key).stat().st_size
