"""The builder's store: the loader's store (shard_loader.storage: key checks, refusals of symlinks and FIFOs,
size caps, S3 error parsing) extended with writes. Every public method retries transient errors and raises
the builder's ObjectStoreError, with the loader's StoreError kept as its cause; a missing object is an
ObjectMissingError, never confused with one that could not be read."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from shard_loader.builder_api import MAX_OBJECT_BYTES, FileRef, NotFoundError, RequestStats, RetryPolicy, StoreError
from shard_loader.builder_api import with_retries

from ..errors import ConditionalWriteError, ObjectMissingError, ObjectStoreError
from ..layout import probe_key

T = TypeVar("T")
log = logging.getLogger(__name__)
# a transient error (5xx, reset, a body cut mid-read) is tried 8 times, backing off up to 10 s
STORE_RETRY = RetryPolicy()
_PROBED: set[str] = set()  # stores (by description) whose writes and conditional puts this process has proven


@dataclass(frozen=True)
class ObjectInfo:
    """What a store says about one object without reading it: its size, when it was written, and its ETag
    (S3: the MD5 of its bytes, or of its parts' MD5s; None for a local file)."""

    size: int
    modified: float
    etag: str | None = None


class ObjectStore(ABC):
    """Keys are '/'-separated paths under the dataset root (see shard_loader.format.check_key).

    Every put is atomic: a reader sees the whole new object or the old one, never a part. Subclasses give the
    backend's primitives, which raise shard_loader StoreErrors; this class retries and translates them."""

    retry: RetryPolicy
    stats: RequestStats

    # -- the loader's Store (shard_loader.storage.base), which each concrete store inherits from its loader class:
    # a builder store is read wherever the loader reads one (ensure_local, the audits' sample reads); read_bytes,
    # size, write_bytes and remove retry by `retry` themselves --

    url: str

    @abstractmethod
    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes: ...

    @abstractmethod
    def size(self, key: str) -> int: ...

    @abstractmethod
    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]: ...

    @abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def remove(self, key: str) -> None: ...

    # -- backend primitives: raise shard_loader StoreErrors (NotFoundError for a missing key) --

    @abstractmethod
    def describe(self) -> str:
        """Where the store points, for logs and metadata; never contains a secret."""

    @abstractmethod
    def loader_url(self) -> str:
        """The dataset root as a URL or path that shard_loader opens."""

    @abstractmethod
    def local_path(self, key: str) -> Path | None:
        """The key's file when the store is a folder on this machine (read in place), else None."""

    @abstractmethod
    def _download(self, key: str, path: Path) -> None: ...

    @abstractmethod
    def _open(self, key: str) -> BinaryIO: ...

    @abstractmethod
    def _write_file(self, key: str, path: Path) -> None: ...

    @abstractmethod
    def _create(self, key: str, data: bytes) -> bool:
        """Write `data` only if no object is at `key`, atomically; whether it did. A server that cannot say raises
        ConditionalWriteError."""

    @abstractmethod
    def _info(self, key: str) -> ObjectInfo: ...

    @abstractmethod
    def _listing(self, prefix: str) -> list[tuple[str, int]]: ...

    @abstractmethod
    def _holds(self, key: str, info: ObjectInfo, path: Path, ref: FileRef) -> bool:
        """Whether the object at `key` (described by `info`, of `ref.size` bytes) holds exactly the bytes of `path`."""

    # -- the builder's API: retried, ObjectStoreError with the StoreError as its cause --

    def _do(self, action: str, key: str, call: Callable[[], T], retry: bool = True) -> T:
        """`call` as the builder's API: retried here (`retry`; the loader's own methods retry themselves), a missing
        key an ObjectMissingError, any other StoreError an ObjectStoreError keeping it as the cause."""
        try:
            return with_retries(call, f"{self.describe()}: {action} {key}", self.retry, self.stats) if retry else call()
        except NotFoundError as exc:
            raise ObjectMissingError(f"{self.describe()}: no object at key {key} ({exc})") from exc
        except StoreError as exc:
            raise ObjectStoreError(str(exc)) from exc

    def get_bytes(self, key: str) -> bytes:
        return self._do("get", key, lambda: self.read_bytes(key), retry=False)

    def get_file(self, key: str, path: Path) -> None:
        """Copy the object at `key` into a local file."""
        self._do("download", key, lambda: self._download(key, path))

    def local_copy(self, key: str, path: Path) -> Path:
        """The key's file: read in place where the store is a folder on this machine, else downloaded to `path`."""
        local = self.local_path(key)
        if local is not None and local.exists():
            return local
        self.get_file(key, path)
        return path

    def open_read(self, key: str) -> BinaryIO:
        """A seekable binary reader of the object (parquet is read from it in record batches)."""
        return self._do("open", key, lambda: self._open(key))

    def put_file(self, key: str, path: Path) -> None:
        self._do("upload", key, lambda: self._write_file(key, path))

    def put_bytes(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        """Write `data` at `key`; with `if_absent`, write only if no object exists and return whether it did.

        A conditional put is refused (ConditionalWriteError) on a store whose server cannot honour one (see
        `preflight`): two racing writers are never both told "written"."""
        if not if_absent:
            self._do("put", key, lambda: self.write_bytes(key, data), retry=False)
            return True
        self.preflight()
        return self._do("put", key, lambda: self._create(key, data))

    def put_if_changed(self, key: str, data: bytes) -> bool:
        """Write `data` unless the object at `key` holds it already (a GET instead of a PUT: read-only keys build
        again without a write); whether it wrote."""
        with contextlib.suppress(ObjectMissingError):
            if self.get_bytes(key) == data:
                return False
        self.put_bytes(key, data)
        return True

    def put_immutable(self, key: str, path: Path, ref: FileRef) -> bool:
        """Upload a content-addressed file unless its key holds exactly these bytes already; whether it uploaded.

        The stored object's content is compared, not only its size (its checksum where the store has one, else a
        re-hash): a stored copy that differs (corrupted in place, truncated) is replaced by the right bytes, with a
        warning, and never left for a new version to publish again."""
        info = self.info(key)
        if info is not None:
            if info.size == ref.size and self._do("check", key, lambda: self._holds(key, info, path, ref)):
                return False
            log.warning(
                f"{self.describe()}: {key} holds {info.size:,} bytes that differ from its content (sha256 "
                f"{ref.sha256}); replacing them"
            )
        self.put_file(key, path)
        return True

    def info(self, key: str) -> ObjectInfo | None:
        """The object's size, modification time and ETag; None when there is none."""
        try:
            return self._do("head", key, lambda: self._info(key))
        except ObjectMissingError:
            return None

    def exists(self, key: str) -> bool:
        return self.info(key) is not None

    def modified(self, key: str) -> float:
        """When the object at `key` was last written, in seconds since the epoch."""
        return self._do("head", key, lambda: self._info(key)).modified

    def delete(self, key: str) -> None:
        """Remove the object at `key`; a missing key is not an error."""
        self._do("delete", key, lambda: self.remove(key), retry=False)

    def unlisted(self, prefix: str) -> list[tuple[str, str]]:
        """(key, what it is) of each entry under `prefix` that `list` leaves out because it is no plain object (a
        link, a folder, a hidden file): a local folder's; an object store has none."""
        return []

    def list(self, prefix: str) -> list[tuple[str, int]]:
        """(key, size) of every object whose key starts with `prefix`, sorted by key."""
        return self._do("list", prefix, lambda: self._listing(prefix))

    def preflight(self) -> None:
        """Prove once per process, before any work, that these keys can write and delete here and that the server
        honours conditional puts (If-None-Match): a second conditional put on a probe key must be refused and
        leave the first one's bytes. Otherwise one line says what failed and what to do."""
        if self.describe() in _PROBED:
            return
        key, first, second = probe_key(secrets.token_hex(8)), b"first writer\n", b"second writer\n"
        self._do("put", key, lambda: self._create(key, first))  # read-only keys fail here, before any ingest
        try:
            refused = not self._do("put", key, lambda: self._create(key, second))
            if not refused or self.get_bytes(key) != first:
                raise ConditionalWriteError(
                    f"{self.describe()}: the server ignores If-None-Match (a conditional put over an existing object "
                    f"replaced it), so two racing publishes could both be told they wrote a version; "
                    f"use a server that honours conditional writes (R2, S3, MinIO, SeaweedFS)"
                )
        finally:
            self.delete(key)
        _PROBED.add(self.describe())


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
