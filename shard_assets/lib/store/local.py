"""The default store: a folder on this machine. Reads and key refusals are the loader's LocalStore (regular files
inside the root only); writes go through temp files and atomic renames, a write-once put through a hard link."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import BinaryIO

from shard_loader.builder_api import FileRef, LocalStore, NotFoundError, RequestStats, RetryPolicy, StoreError

from .base import STORE_RETRY, ObjectInfo, ObjectStore, file_sha256


class LocalFolderStore(LocalStore, ObjectStore):
    """The loader's LocalStore (reads, atomic writes, removal) with the builder's retries, uploads, write-once puts,
    listing and content checks."""

    def __init__(self, root: str | Path, retry: RetryPolicy = STORE_RETRY):
        super().__init__(root)
        self.retry, self.stats = retry, RequestStats()

    def describe(self) -> str:
        return f"local folder {self.root}"

    def loader_url(self) -> str:
        return str(self.root)

    def _download(self, key: str, path: Path) -> None:
        with self._open(key) as src, self._os_errors("download", key), open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)

    def _write_file(self, key: str, path: Path) -> None:
        def copy(f: BinaryIO) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, f, 8 << 20)

        with self._os_errors("upload", key):
            os.replace(self._atomic_write(key, copy), self.local_path(key))

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
        return self._walk(prefix)[0]

    def unlisted(self, prefix: str) -> list[tuple[str, str]]:
        return self._walk(prefix)[1]

    def _walk(self, prefix: str) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
        """(key, size) of each plain file under `prefix`, and (key, what it is) of each entry there that is not one."""
        folder = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not folder.is_dir():
            return [], []
        found, odd, pending = [], [], [(folder, folder.relative_to(self.root).as_posix())]
        with self._os_errors("list", prefix):
            # scandir, not rglob: one stat per entry, reused (a folder of 30,000 shards is listed per publish)
            while pending:
                path, rel = pending.pop()
                with os.scandir(path) as entries:
                    for entry in entries:
                        key = f"{rel}/{entry.name}" if rel != "." else entry.name
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((Path(entry.path), key))
                        if not key.startswith(prefix):
                            continue
                        if entry.is_file(follow_symlinks=False) and not entry.name.startswith("."):
                            found.append((key, entry.stat(follow_symlinks=False).st_size))
                        else:
                            what = "a folder" if entry.is_dir(follow_symlinks=False) else "a link"
                            odd.append((key, what if not entry.is_file(follow_symlinks=False) else "a hidden file"))
        return sorted(found), sorted(odd)

    def _holds(self, key: str, info: ObjectInfo, path: Path, ref: FileRef) -> bool:
        """A local file has no stored checksum: it is hashed again (a local read, cheaper than any upload)."""
        with self._os_errors("hash", key):
            return file_sha256(self.local_path(key)) == ref.sha256
