"""Download one file into the cache: parallel ranged GETs into a preallocated part file, retried,
resumable, verified (size and sha256) before an atomic rename. Nothing unverified enters the cache.

Next to `<dest>` live `<dest>.part` (the preallocated data), `<dest>.journal` (indices of the
parts already written, so an interrupted download resumes) and `<dest>.lock` while it runs. Every
one is opened without following a symlink (files.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from .checksum import sha256_file
from ..errors import DiskBudgetError, IntegrityError, RangeNotSupportedError
from .files import CachePath, walk
from .locking import file_lock, lock_if_free
from ..format import FileRef
from ..storage.retry import Deadline, RequestStats, RetryPolicy, with_retries
from ..storage import Store


@dataclass(frozen=True)
class DownloadConfig:
    """How files are fetched. A file must arrive within `deadline_base + size / min_rate` seconds, retries included;
    the per-read stall timeout is the store's `timeout`."""

    part_size: int = 8 << 20
    concurrency: int = 8
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    progress: bool | None = None  # None: only when stderr is a terminal
    min_rate: float = 256 << 10  # bytes/s a whole file must average
    deadline_base: float = 120.0  # seconds every file gets on top of size / min_rate


DEFAULT_CONFIG = DownloadConfig()
STATS = RequestStats()  # process-wide request counts, reported by `shard-loader` and the benchmarks
log = logging.getLogger(__name__)


def journal_bound(size: int, config: DownloadConfig = DEFAULT_CONFIG) -> int:
    """The most bytes the journal of a download of `size` bytes holds (a line per part): disk it needs besides the
    file."""
    return 21 * max(1, -(-size // config.part_size))


def discard_abandoned(folder: Path) -> int:
    """Delete part files (and journals) no live download holds, left by killed downloaders; the bytes freed.
    They count against a disk budget, and only a fetch of the same file would otherwise ever remove them."""
    freed = 0
    for part in [p for p, _ in walk(Path(folder)) if p.rel.endswith(".part")]:
        dest = CachePath(part.root, part.rel.removesuffix(".part"))
        with lock_if_free(dest.plus(".lock")) as free:
            st = part.stat() if free else None
            if st is not None:
                freed += st.st_size
                part.unlink()
                dest.plus(".journal").unlink()
    return freed


def _done_parts(journal: CachePath, count: int) -> set[int]:
    text = journal.read_bytes(limit=32 * count)  # a line per part
    done = set()
    for line in (text or b"").decode(errors="replace").splitlines():
        if line.strip().isdigit() and int(line) < count:
            done.add(int(line))
    return done


class _Progress:
    """A one-line progress bar with bytes/s on a terminal."""

    def __init__(self, key: str, total: int, enabled: bool):
        self.key, self.total, self.enabled = key, total, enabled
        self.done, self.started, self.lock = 0, time.monotonic(), threading.Lock()

    def add(self, n: int) -> None:
        if not self.enabled:
            return
        with self.lock:
            self.done += n
            rate = self.done / max(time.monotonic() - self.started, 1e-6)
            sys.stderr.write(f"\r{self.key}: {self.done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB  {rate / 1e6:,.1f} MB/s")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _check_disk(ref: FileRef, folder: Path, needed: int) -> None:
    """Refuse a file that cannot fit before anything is allocated for it (a manifest may claim 2**63 bytes)."""
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise DiskBudgetError(f"{ref.key}: needs {needed:,} bytes in {folder}, only {free:,} are free")


@dataclass(frozen=True)
class _Transfer:
    """One file's bytes on their way into its part file `fd`: what each of its spans needs."""

    store: Store
    ref: FileRef
    fd: int
    journal: CachePath
    config: DownloadConfig
    stats: RequestStats
    deadline: Deadline
    progress: _Progress

    def span(self, start: int, end: int) -> None:
        """Stream bytes [start, end) into the part file at their offset, checking the deadline after every chunk.
        `stats.bytes` counts a span once it is complete, so bytes of failed attempts are not counted twice."""
        offset = start
        chunks = self.store.stream(self.ref.key, start, end)
        try:
            for chunk in chunks:
                os.pwrite(self.fd, chunk, offset)
                offset += len(chunk)
                self.progress.add(len(chunk))
                self.deadline.check()
        finally:
            if isinstance(chunks, Generator):
                chunks.close()  # ends the request at once, also when a chunk fails
        os.fdatasync(self.fd)
        self.stats.add(bytes=end - start)

    def retried(self, start: int, end: int, what: str) -> None:
        with_retries(partial(self.span, start, end), what, self.config.retry, self.stats, self.deadline)

    def parts(self, count: int) -> None:
        """Parallel ranged GETs of the parts not yet in the journal; after the first failure no further part starts."""
        todo = [i for i in range(count) if i not in _done_parts(self.journal, count)]
        journal_lock, failed, size = threading.Lock(), threading.Event(), self.config.part_size

        def fetch(i: int) -> None:
            if failed.is_set():
                return
            start, end = i * size, min(self.ref.size, (i + 1) * size)
            try:
                self.retried(start, end, f"{self.ref.key} bytes {start}-{end}")
            except BaseException:
                failed.set()
                raise
            with journal_lock:
                self.journal.write_bytes(f"{i}\n".encode(), append=True)

        with ThreadPoolExecutor(max_workers=max(1, min(self.config.concurrency, len(todo)))) as pool:
            for future in [pool.submit(fetch, i) for i in todo]:
                future.result()

    def whole(self, reason: RangeNotSupportedError) -> None:
        """The fallback for a server without Range: one streamed GET of the whole file (verified by the caller's
        sha256)."""
        log.warning("%s; reading %s in one streamed GET instead of parallel ranges", reason, self.ref.key)
        self.stats.add(range_fallbacks=1)
        self.journal.unlink()
        self.retried(0, self.ref.size, f"{self.ref.key} (whole file, no Range support)")


def _fetch(
    store: Store, ref: FileRef, part: CachePath, journal: CachePath, config: DownloadConfig, stats: RequestStats
) -> None:
    """Fill the part file with the key's bytes: parallel ranges, or one whole GET when the server ignores Range."""
    count = max(1, -(-ref.size // config.part_size))
    remaining = count - len(_done_parts(journal, count)) if part.stat() is not None else count
    _check_disk(ref, part.root, min(ref.size, remaining * config.part_size))
    remedy = "check the server or network, or give slow links more time (DownloadConfig.min_rate, deadline_base)"
    deadline = Deadline.after(config.deadline_base + ref.size / config.min_rate, ref.key, remedy)
    progress = _Progress(ref.key, ref.size, sys.stderr.isatty() if config.progress is None else config.progress)
    fd = part.open(os.O_RDWR | os.O_CREAT)
    try:
        with part.mapped():  # a write or sync that finds the disk full is a DiskBudgetError naming the cache
            if os.fstat(fd).st_size != ref.size:
                os.ftruncate(fd, ref.size)
            if not ref.size:
                return
            transfer = _Transfer(store, ref, fd, journal, config, stats, deadline, progress)
            try:
                transfer.parts(count)
            except RangeNotSupportedError as reason:
                transfer.whole(reason)
    finally:
        os.close(fd)


def download_file(
    store: Store,
    ref: FileRef,
    dest: Path | CachePath,
    config: DownloadConfig = DEFAULT_CONFIG,
    stats: RequestStats = STATS,
) -> Path:
    """Bring `ref` to `dest`, verified. A file already at `dest` was verified before its rename and
    is reused (after a restart too); ranks sharing the cache wait on the lock for the one that downloads.
    A plain path is taken as a file in its folder, opened without following a link there."""
    target = dest if isinstance(dest, CachePath) else CachePath(Path(dest).parent, Path(dest).name)
    part, journal = target.plus(".part"), target.plus(".journal")
    with file_lock(target.plus(".lock")):
        st = target.stat()
        if st is not None:
            if st.st_size == ref.size:
                return target.path  # only a verified download is ever renamed to dest
            target.unlink()
        _fetch(store, ref, part, journal, config, stats)
        digest = sha256_file(part)
        if digest != ref.sha256:
            part.unlink()
            journal.unlink()
            raise IntegrityError(
                f"{ref.key}: downloaded sha256 is {digest}, manifest says {ref.sha256}; discarded, not cached"
            )
        part.replace(target)
        journal.unlink()
    return target.path
