"""Download one file into the cache: parallel ranged GETs into a preallocated part file, retried,
resumable, verified (size and sha256) before an atomic rename. Nothing unverified enters the cache.

Next to `<dest>` live `<dest>.part` (the preallocated data), `<dest>.journal` (indices of the
parts already written, so an interrupted download resumes) and `<dest>.lock`.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .checksum import sha256_file
from .errors import DiskBudgetError, IntegrityError
from .locking import file_lock
from .format import FileRef
from .retry import RequestStats, RetryPolicy, with_retries
from .store import Store


@dataclass(frozen=True)
class DownloadConfig:
    part_size: int = 8 << 20
    concurrency: int = 8
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    progress: bool | None = None  # None: only when stderr is a terminal


DEFAULT_CONFIG = DownloadConfig()
STATS = RequestStats()  # process-wide request counts, reported by `shard-loader` and the benchmarks


def _sidecar(dest: Path, suffix: str) -> Path:
    return dest.with_name(dest.name + suffix)


def _done_parts(journal: Path, count: int) -> set[int]:
    if not journal.exists():
        return set()
    done = set()
    for line in journal.read_text().splitlines():
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


def _fetch_parts(store: Store, ref: FileRef, part_path: Path, journal: Path, config: DownloadConfig, stats: RequestStats) -> None:
    count = max(1, -(-ref.size // config.part_size))
    done = _done_parts(journal, count)
    todo = [i for i in range(count) if i not in done]
    needed = len(todo) * config.part_size
    free = shutil.disk_usage(part_path.parent).free
    if free < min(needed, ref.size):
        raise DiskBudgetError(
            f"{ref.key}: needs {min(needed, ref.size):,} bytes in {part_path.parent}, only {free:,} are free"
        )
    fd = os.open(part_path, os.O_RDWR | os.O_CREAT, 0o644)
    journal_lock = threading.Lock()
    progress = _Progress(ref.key, ref.size, sys.stderr.isatty() if config.progress is None else config.progress)
    try:
        if os.fstat(fd).st_size != ref.size:
            os.ftruncate(fd, ref.size)

        def fetch(i: int) -> None:
            start, end = i * config.part_size, min(ref.size, (i + 1) * config.part_size)
            data = with_retries(lambda: store.read_range(ref.key, start, end), f"{ref.key} bytes {start}-{end}", config.retry, stats)
            os.pwrite(fd, data, start)
            os.fdatasync(fd)
            stats.add(bytes=len(data))
            progress.add(len(data))
            with journal_lock, open(journal, "a") as j:
                j.write(f"{i}\n")

        if ref.size and todo:
            with ThreadPoolExecutor(max_workers=min(config.concurrency, len(todo))) as pool:
                for future in [pool.submit(fetch, i) for i in todo]:
                    future.result()
    finally:
        os.close(fd)


def download_file(store: Store, ref: FileRef, dest: Path, config: DownloadConfig = DEFAULT_CONFIG, stats: RequestStats = STATS) -> Path:
    """Bring `ref` to `dest`, verified. A file already at `dest` was verified before its rename and
    is reused (after a restart too); ranks sharing the cache wait on the lock for the one that downloads."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part, journal = _sidecar(dest, ".part"), _sidecar(dest, ".journal")
    with file_lock(_sidecar(dest, ".lock")):
        if dest.exists():
            if dest.stat().st_size == ref.size:
                return dest  # only a verified download is ever renamed to dest
            dest.unlink()
        _fetch_parts(store, ref, part, journal, config, stats)
        digest = sha256_file(part)
        if digest != ref.sha256:
            part.unlink(missing_ok=True)
            journal.unlink(missing_ok=True)
            raise IntegrityError(f"{ref.key}: downloaded sha256 is {digest}, manifest says {ref.sha256}; discarded, not cached")
        os.replace(part, dest)
        journal.unlink(missing_ok=True)
    return dest
