"""A reader protects the version it reads: the process that opens a dataset writes a lease on its version
(`readers/<version>/<holder>.json`, see shard_loader.format.leases) where it can write (a local folder, a bucket
with keys that may write), renews it from a daemon thread, and removes it when closed (`close()`, the end of a `with`
block) or at interpreter exit; a killed process's lease lapses by itself. Retention keeps any version with a live
lease. Where it cannot write (read-only R2 keys, an https URL, a read-only folder) it says so once and
what protects it instead: gc's grace period, or a pin (`shard-loader pin URL --for 30d`) written with write keys.

Once the lease is written, the reader looks for gc's mark on the version (and, opened by its pinned URL, for its
manifest): gc marks a version before it reads the leases and deletes, so either gc sees this lease and keeps the
version, or this reader sees the mark and refuses to start (never mid-epoch)."""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import socket
import threading
from typing import Any, Protocol
from urllib.parse import urlparse

from ..errors import NotFoundError, ShardLoaderError, StoreError
from ..format import VERSIONS_DIR
from ..format.leases import Lease, collecting_key, lease_key
from .base import Store
from .local import LocalStore

# a reader's lease outlives its last renewal by this long (a killed trainer's lapses within the hour)
LEASE_SECONDS = 3600.0
RENEW_SECONDS = 600.0
log = logging.getLogger(__name__)


class WritableStore(Store, Protocol):
    """A store leases can be written into: a folder or a bucket (https cannot be written to)."""

    def write_bytes(self, key: str, data: bytes) -> None: ...

    def remove(self, key: str) -> None: ...


def writer_for(store: Store) -> WritableStore | None:
    """`store` when leases can be written into it, None for one nothing can be written to (https)."""
    from .s3 import S3Store

    return store if isinstance(store, (LocalStore, S3Store)) else None


def _holder() -> str:
    """This process, readably and uniquely: host, pid and a random suffix."""
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())[:60] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}"


class ReaderLease:
    """A lease on one version, written at `acquire`, renewed every `renew` seconds from a daemon thread, removed at
    `release`; one never released lapses `seconds` after its last renewal. `refused` says why none could be written."""

    def __init__(
        self,
        store: Store,
        version: str,
        seconds: float = LEASE_SECONDS,
        renew: float = RENEW_SECONDS,
        kind: str = "reader",
        holder: str | None = None,
        note: str = "",
    ):
        self.store, self.writer = store, writer_for(store)
        holder = holder or _holder()
        self.lease = Lease(version, holder, kind, seconds, note or f"{kind} {holder}")
        self.key = lease_key(version, holder)
        self.renew, self.refused = renew, ""
        self._stop, self._pid = threading.Event(), os.getpid()
        self._thread: threading.Thread | None = None

    def acquire(self) -> bool:
        """Write the lease; whether it could (else `refused` says why)."""
        if self.writer is None:
            self.refused = f"{self.store.url} cannot be written to"
        else:
            try:
                self.writer.write_bytes(self.key, self.lease.to_bytes())
                return True
            except (StoreError, OSError) as exc:
                self.refused = " ".join(str(exc).split())
        return False

    def start(self) -> None:
        """Renew the lease from a daemon thread until `release`."""
        if self.writer is None:
            raise StoreError(f"{self.store.url} cannot be written to: there is no lease {self.key} to renew")
        self._thread = threading.Thread(
            target=self._renew_loop, args=(self.writer,), name=f"lease-{self.lease.version}", daemon=True
        )
        self._thread.start()

    def _renew_loop(self, writer: WritableStore) -> None:
        failing = False
        while not self._stop.wait(self.renew):
            try:
                writer.write_bytes(self.key, self.lease.to_bytes())
                failing = False
            except (StoreError, OSError) as exc:
                if not failing:
                    log.warning(
                        "%s: cannot renew the reader lease %s (%s); it lapses %.0f s after its last renewal",
                        self.store.url,
                        self.key,
                        exc,
                        self.lease.seconds,
                    )
                failing = True

    def release(self) -> None:
        """Stop renewing, then remove the lease (best effort; once; never a parent's lease in a forked child)."""
        if self._stop.is_set() or os.getpid() != self._pid:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)  # a renewal in flight lands before the delete
        if self.writer is not None:
            try:
                self.writer.remove(self.key)
            except (StoreError, OSError):
                pass  # best effort: an unremoved lease lapses by itself


def _being_collected(store: Store, version: str, opened_key: str) -> bool:
    """Whether gc has marked `version` for deletion, or (opened by its pinned URL) its manifest is gone."""
    try:
        store.size(collecting_key(version))
        return True
    except NotFoundError:
        pass
    if opened_key.startswith(f"{VERSIONS_DIR}/"):
        try:
            store.size(opened_key)
        except NotFoundError:
            return True
    return False


def collected_error(store: Store, version: str, missing: ShardLoaderError) -> ShardLoaderError:
    """`missing` (a file gone mid-epoch) said as gc's collection of `version`, with how to protect one, when gc marked
    the version or its manifest is gone; else `missing` as it is."""
    if not _being_collected(store, version, f"{VERSIONS_DIR}/{version}.json"):
        return missing
    root = "<its s3://, r2:// or folder URL>" if urlparse(store.url).scheme in ("http", "https") else store.url
    where = f"{root}/{VERSIONS_DIR}/{version}.json"
    gone = str(missing).split(";")[0]  # the file, not the store's advice to check the URL
    return NotFoundError(
        f"{store.url}: version {version} was collected by gc while this reader read it ({gone}); this reader holds "
        f"no lease (it cannot write to the store), so only gc's grace period protected it: for a run longer than that, "
        f"pin the version with write keys (shard-loader pin {where} --for 30d) or read with keys that may write"
    )


class SharedLease:
    """One holder's share of this process's lease on a version (a mixture's components often share a dataset
    version): the lease is written and renewed once, and removed when the last share is released, or at exit."""

    def __init__(self, key: tuple[int, str, str]):
        self.key, self._released = key, False

    def release(self) -> None:
        """Give this share back (once); the last one's going removes the lease (never a parent's, in a forked child)."""
        if self._released or self.key[0] != os.getpid():
            return
        self._released = True
        with _SHARED_LOCK:
            held = _SHARED.pop(self.key, None)
            if held is None:  # released at exit already
                return
            lease, shares = held
            if shares > 1:
                _SHARED[self.key] = (lease, shares - 1)
                return
        lease.release()


_SHARED: dict[tuple[int, str, str], tuple[ReaderLease, int]] = {}  # (pid, store, version) -> the lease, its shares
_SHARED_LOCK = threading.Lock()


@atexit.register
def _release_at_exit() -> None:
    """Remove this process's live leases at interpreter exit (a forked child inherits its parent's: not its own)."""
    pid = os.getpid()
    if all(key[0] != pid for key in list(_SHARED)):  # a child holding none of its own never waits for a lock that a
        return  # parent's thread held at the fork
    with _SHARED_LOCK:
        leases = [_SHARED.pop(key)[0] for key in list(_SHARED) if key[0] == pid]
    for lease in leases:
        lease.release()


def hold_reader_lease(store: Store, version: str, opened_key: str) -> SharedLease | None:
    """Protect `version` of the dataset in `store` for as long as this process reads it: a share of a renewed lease
    (one per version and process), or, where none can be written, one warning saying what protects it instead."""
    key = (os.getpid(), store.url, version)  # a forked child renews nothing of its parent's
    with _SHARED_LOCK:
        if key in _SHARED:
            lease, shares = _SHARED[key]
            _SHARED[key] = (lease, shares + 1)
            return SharedLease(key)
        held = _hold(store, version, opened_key)
        if held is None:
            return None
        _SHARED[key] = (held, 1)
        return SharedLease(key)


def _hold(store: Store, version: str, opened_key: str) -> ReaderLease | None:
    """A new renewed lease on `version`, or None with a warning where none can be written. A version opened by its
    pinned manifest is looked up again once leased, so a collection that raced the opening is found now, not
    mid-epoch."""
    lease = ReaderLease(store, version)
    if not lease.acquire():
        log.warning(
            "%s: no reader lease on %s (%s): this version is protected only by gc's grace period after it is "
            "superseded (shard-assets gc --grace, 7 days by default) and by pins; for a longer run, pin it with write "
            "keys: shard-loader pin %s/%s/%s.json --for 30d",
            store.url,
            version,
            lease.refused,
            store.url,
            VERSIONS_DIR,
            version,
        )
        return None
    if _being_collected(store, version, opened_key):
        lease.release()
        raise NotFoundError(
            f"{store.url}/{opened_key}: version {version} was collected by gc while this reader opened it; "
            f"open the live manifest.json or a version gc keeps"
        )
    lease.start()
    return lease


def pin(url: str, seconds: float, note: str = "", **store_options: Any) -> tuple[Lease, str]:
    """Pin the version a manifest URL names (the live one for a folder or manifest.json) for `seconds`, with keys that
    may write (an S3/R2 URL is opened with the write role: R2_DATASET_WRITE_*); returns the lease and its key.
    For runs whose readers cannot write a lease of their own (read-only keys, https)."""
    from urllib.parse import urlparse

    from ..format import parse_manifest
    from .urls import is_remote, open_store, split_manifest_url

    root, key = split_manifest_url(url)
    scheme = urlparse(root).scheme
    if scheme in ("http", "https"):
        raise StoreError(
            f"{url}: an https URL cannot be written to; pin the version where it is published (its s3://, r2:// or "
            "folder URL) with write keys"
        )
    store = open_store(root, **({"role": "write", **store_options} if is_remote(root) else {}))
    if is_remote(root):
        from .s3 import S3Store

        if isinstance(store, S3Store):
            store.role = "write"  # errors name the write keys' variables
    version = parse_manifest(store.read_bytes(key), origin=f"{store.url}/{key}").version
    holder = f"pin-{secrets.token_hex(6)}"
    lease = ReaderLease(
        store, version, seconds, kind="pin", holder=holder, note=note or f"pinned from {socket.gethostname()}"
    )
    if not lease.acquire():
        raise StoreError(f"{store.url}: cannot write the pin {lease.key}: {lease.refused}")
    # never released: it lapses after `seconds`, or is deleted by hand
    return lease.lease, lease.key
