"""Rotation over a remote (loopback HTTP) store: bounded measured disk, reuse after restart, no stall at swaps."""

import threading
import time

import numpy as np
import pytest

from shard_loader import DiskBudgetError, TokenDataset
from shard_loader.cache.eviction import cache_usage
from tests.support.http_server import FolderServer
from tests.support.patience import wait_for
from tests.support.synthetic import random_docs, write_dataset


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    rng = np.random.default_rng(11)
    manifest = write_dataset(root, {"train": [random_docs(rng, 120, mean_len=400) for _ in range(24)]})
    return root, manifest


class DiskSampler:
    """Measures the cache directory's bytes every few milliseconds while a loader runs."""

    def __init__(self, path):
        self.path, self.peak, self._stop = path, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, cache_usage(self.path))
            time.sleep(0.002)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()


def test_disk_budget_holds_while_rotating_through_ten_times_its_size(remote, tmp_path):
    root, manifest = remote
    sizes = sorted((e.nbytes for e in manifest.splits["train"].shards), reverse=True)
    budget = sizes[0] + sizes[1]
    total = sum(sizes)
    assert total >= 10 * budget
    with FolderServer(root) as server, DiskSampler(tmp_path) as disk:
        ds = TokenDataset(f"{server.url}/manifest.json", seq_len=64, batch_size=4, cache_dir=tmp_path, disk_budget=budget, window_shards=1)
        batches = sum(1 for _ in ds)
        ds.close()
    assert batches == len(ds) > 0
    assert 0 < disk.peak <= budget
    assert ds.stats.max_cache_bytes <= budget
    assert ds.stats.windows_fetched == 24
    npy_gets = [n for path, n in server.gets.items() if path.startswith("/tokenized/") and path.endswith(".npy")]
    assert len(npy_gets) == 24 and set(npy_gets) == {1}
    assert cache_usage(tmp_path) <= budget  # finished windows were deleted


def test_a_budget_below_two_windows_is_refused_with_the_minimum(remote, tmp_path):
    root, manifest = remote
    sizes = sorted((e.nbytes for e in manifest.splits["train"].shards), reverse=True)
    with FolderServer(root) as server:
        with pytest.raises(DiskBudgetError, match=f"minimum is {sizes[0] + sizes[1]:,} bytes"):
            TokenDataset(f"{server.url}/manifest.json", cache_dir=tmp_path, disk_budget=sizes[0] + sizes[1] - 1, window_shards=1)


def test_kept_files_are_reused_after_a_restart(remote, tmp_path):
    root, _ = remote
    with FolderServer(root) as server:
        first = TokenDataset(f"{server.url}/manifest.json", seq_len=64, batch_size=4, cache_dir=tmp_path, keep_files=True)
        a = [b["input_ids"] for b in first]
        first.close()
        gets = sum(server.gets.values())
        second = TokenDataset(f"{server.url}/manifest.json", seq_len=64, batch_size=4, cache_dir=tmp_path, keep_files=True)
        b = [x["input_ids"] for x in second]
        second.close()
        assert sum(server.gets.values()) == gets + 1  # only the manifest again
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)


def test_no_wait_at_swaps_when_the_link_outpaces_a_slow_consumer(remote, tmp_path):
    """The next window is asked for while the current one is consumed (the wait at a swap is measured by
    benchmarks/bench_loader.py, not here: a clock in a test measures the machine's load)."""
    root, manifest = remote
    largest = max(e.nbytes for e in manifest.splits["train"].shards)
    with FolderServer(root, rate=4 * largest) as server:  # a window takes about 0.25 s to arrive
        ds = TokenDataset(f"{server.url}/manifest.json", seq_len=64, batch_size=4, cache_dir=tmp_path, window_shards=1)
        lasts = np.cumsum(ds.plan().batches_per_window) - 1  # each window's last batch, in visiting order
        requested = lambda: sum(p.endswith(".npy") for p in server.gets if p.startswith("/tokenized/"))  # noqa: E731
        for i, _ in enumerate(ds):
            window = int(np.searchsorted(lasts, i))
            if window == 6:
                break
            if i == lasts[window]:  # the consumer still holds this window's last batch
                wait_for(lambda: requested() >= window + 2, f"window {window + 1}'s shard requested while window {window} is consumed")
        ds.close()
    waits = ds.stats.waits
    assert waits[0] > 0.1  # the first window really was slow to arrive
    assert len(waits) >= 6, waits
