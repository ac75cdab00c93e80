"""Rotation over a remote (loopback HTTP) store: bounded measured disk, reuse after restart, no stall at swaps; one
small type per mode (files read in place, fetched and evicted at release, paced under a budget), and no sidecar file
outlives the file it guards."""

import threading
import time

import numpy as np
import pytest

from shard_loader import DiskBudgetError, TokenDataset
from shard_loader.cache.eviction import cache_usage
from shard_loader.cache.fetched import FetchedFiles
from shard_loader.cache.in_place import InPlaceFiles
from shard_loader.cache.lease import hold
from shard_loader.cache.paced import PacedFiles
from shard_loader.cache.verified import cached_path
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
        ds = TokenDataset(
            f"{server.url}/manifest.json",
            seq_len=64,
            batch_size=4,
            cache_dir=tmp_path,
            disk_budget=budget,
            window_shards=1,
        )
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
            TokenDataset(
                f"{server.url}/manifest.json", cache_dir=tmp_path, disk_budget=sizes[0] + sizes[1] - 1, window_shards=1
            )


def test_kept_files_are_reused_after_a_restart(remote, tmp_path):
    root, _ = remote
    with FolderServer(root) as server:
        first = TokenDataset(
            f"{server.url}/manifest.json", seq_len=64, batch_size=4, cache_dir=tmp_path, keep_files=True
        )
        a = [b["input_ids"] for b in first]
        first.close()
        gets = sum(server.gets.values())
        second = TokenDataset(
            f"{server.url}/manifest.json", seq_len=64, batch_size=4, cache_dir=tmp_path, keep_files=True
        )
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
                wait_for(
                    lambda: requested() >= window + 2,
                    f"window {window + 1}'s shard requested while window {window} is consumed",
                )
        ds.close()
    waits = ds.stats.waits
    assert waits[0] > 0.1  # the first window really was slow to arrive
    assert len(waits) >= 6, waits


def test_one_mode_per_store_and_budget_chosen_when_the_dataset_is_made(remote, tmp_path):
    root, manifest = remote
    budget = 4 * max(e.nbytes for e in manifest.splits["train"].shards)
    with FolderServer(root) as server:
        url = f"{server.url}/manifest.json"
        modes = {
            "local folder": TokenDataset(str(root), window_shards=1).cache.files,
            "remote": TokenDataset(url, cache_dir=tmp_path, window_shards=1).cache.files,
            "remote, kept": TokenDataset(url, cache_dir=tmp_path, window_shards=1, keep_files=True).cache.files,
            "remote, budget": TokenDataset(url, cache_dir=tmp_path, window_shards=1, disk_budget=budget).cache.files,
            "remote, budget, kept": TokenDataset(
                url, cache_dir=tmp_path, window_shards=1, disk_budget=budget, keep_files=True
            ).cache.files,
        }
    assert {name: type(files) for name, files in modes.items()} == {
        "local folder": InPlaceFiles,
        "remote": FetchedFiles,
        "remote, kept": FetchedFiles,
        "remote, budget": PacedFiles,
        "remote, budget, kept": FetchedFiles,
    }
    assert not modes["remote"].keep_files and modes["remote, kept"].keep_files


def test_files_read_in_place_are_never_deleted(remote):
    root, _ = remote
    ds = TokenDataset(str(root), window_shards=2)
    files, segment = ds.cache.files, ds.plan().segments[0]
    paths = files.files(segment)
    assert all(p.is_relative_to(root) for pair in paths.values() for p in pair)
    files.release(segment.window, keep=())
    assert all(p.is_file() for pair in paths.values() for p in pair) and files.disk_in_use() == 0


def test_fetched_files_go_at_release_unless_held_by_another_consumer_needed_next_or_kept(remote, tmp_path):
    root, _ = remote
    with FolderServer(root) as server:
        for keep_files in (False, True):
            ds = TokenDataset(
                f"{server.url}/manifest.json",
                cache_dir=tmp_path / str(keep_files),
                window_shards=3,
                keep_files=keep_files,
            )
            files, segment = ds.cache.files, ds.plan().segments[0]
            first, held, needed = segment.window.shards
            paths = files.files(segment)
            other = hold(cached_path(tmp_path / str(keep_files), ds.shards[held].npy))  # another rank still reads it
            files.release(segment.window, keep={needed})
            on_disk = {i: [p.is_file() for p in paths[i]] for i in (first, held, needed)}
            other.release()
            ds.close()
            if keep_files:
                assert on_disk == {first: [True, True], held: [True, True], needed: [True, True]}
            else:
                assert on_disk == {first: [False, False], held: [True, False], needed: [True, True]}


@pytest.mark.parametrize("budget", [None, "four windows"])
def test_a_full_pass_leaves_no_sidecar_without_the_file_it_guards(remote, tmp_path, budget):
    root, manifest = remote
    largest = max(e.nbytes for e in manifest.splits["train"].shards)
    with FolderServer(root) as server:
        ds = TokenDataset(
            f"{server.url}/manifest.json",
            seq_len=64,
            batch_size=4,
            cache_dir=tmp_path,
            window_shards=1,
            disk_budget=None if budget is None else 4 * largest,
        )
        assert sum(1 for _ in ds) == len(ds)
        ds.close()
    files = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert not [
        f for f in files if f.endswith((".lock", ".check", ".part", ".journal"))
    ]  # zero-byte locks go with their use
    guarded = {f.removesuffix(".lease") for f in files if f.endswith(".lease")} | {
        f.rsplit(".ok-", 1)[0] for f in files if ".ok-" in f
    }
    assert guarded <= files  # a lease and a marker only beside their file
    shards = {f for f in guarded if f.startswith("tokenized/")}
    table = manifest.splits["train"].table.key  # kept for restarts
    owned = {f for f in files if any(f == g or f == g + ".lease" or f.startswith(g + ".ok-") for g in shards | {table})}
    assert files == owned and (budget is None) == (shards == set())
    assert budget is None or len(shards) >= 2  # under a budget, files stay until room is needed
