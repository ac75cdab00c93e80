"""A cache directory shared by ranks and workers: leases keep a file on disk while anyone reads it,
dead holders' leases expire, and only bytes verified against the manifest's sha256 are ever served."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from shard_loader import TokenDataset
from shard_loader.cache.files import CachePath
from shard_loader.cache.verified import cached_path, markers
from shard_loader.cache.consumers import Registration, live_places
from shard_loader.cache.eviction import cache_usage, make_room
from shard_loader.cache.locking import file_lock
from shard_loader.cache.horizon import Orders, horizon
from shard_loader.cache.lease import evict, hold
from tests.support.http_server import FolderServer
from tests.support.s3_proxy import S3Proxy
from tests.support.seaweedfs import READER, WRITER
from tests.support.positional import samples_of, write_positional
from tests.support.synthetic import write_dataset
from tests.support.patience import HUNG
from tests.support.training import torchrun

ROOT = Path(__file__).resolve().parents[2]
SIZES = [int(n) for n in np.random.default_rng(8).integers(300, 900, size=6)]
OPTS = dict(seq_len=16, batch_size=2, seed=1, window_shards=1)


def _stream(url, cache, **kw):
    ds = TokenDataset(url, cache_dir=cache, **{**OPTS, **kw})
    try:
        return [np.asarray(b["input_ids"]) for b in ds]
    finally:
        ds.close()


def test_a_held_file_is_not_evicted_until_its_last_holder_releases(tmp_path):
    path = CachePath(tmp_path, "f.npy")
    path.path.write_bytes(b"x")
    first, second = hold(path), hold(path)
    assert not evict(path) and path.path.exists()
    first.release()
    assert not evict(path) and path.path.exists()
    second.release()
    assert evict(path) and not path.path.exists()
    again = hold(path)  # a new lease after eviction, on a fresh lease file, holds the file brought back
    path.path.write_bytes(b"y")
    assert not evict(path) and path.path.exists()
    again.release()
    assert evict(path) and not path.path.exists()


def _ready(script: str, folder: Path, says: str) -> subprocess.Popen:
    """`script` run on `folder` in a child process, once it has printed `says` (it then waits on its stdin)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(folder)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == says
    return proc


HOLDER = """
import sys
from pathlib import Path
from shard_loader.cache.files import CachePath
from shard_loader.cache.lease import hold
lease = hold(CachePath(Path(sys.argv[1]), "f.npy"))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_dead_holders_lease_expires(tmp_path):
    path = CachePath(tmp_path, "f.npy")
    path.path.write_bytes(b"x")
    proc = _ready(HOLDER, tmp_path, "held")
    assert not evict(path)
    proc.kill()
    proc.wait()
    assert evict(path) and not path.path.exists()


def test_the_horizon_holds_what_fits_the_budget_from_the_slowest_place_across_epochs(tmp_path):
    write_positional(tmp_path / "pub", SIZES)
    ds = TokenDataset(str(tmp_path / "pub"), **OPTS)
    orders, sizes = Orders(ds.plan()), {w.index: w.nbytes for w in ds.windows}
    n = len(ds.windows)
    for start in range(2 * n):
        for budget in (max(sizes.values()), 3 * max(sizes.values())):
            kept = horizon(orders, start, budget)
            windows = [orders.window(p).index for p in range(start, kept.end + 1)]
            assert set(windows) == kept.windows and windows[0] == orders.window(start).index
            assert sum(sizes[w] for w in kept.windows) <= budget or len(kept.windows) == 1
            grown = kept.windows | {orders.window(kept.end + 1).index}
            assert sum(sizes[w] for w in grown) > budget  # nothing more would fit
    assert horizon(orders, 3, sum(sizes.values())).windows == set(sizes)  # all fit: every window is kept


def test_room_is_made_from_part_files_of_killed_downloads_never_from_live_ones(tmp_path):
    dead, live = tmp_path / "a.npy.part", tmp_path / "b.npy.part"
    dead.write_bytes(b"x" * 100)
    (tmp_path / "a.npy.journal").write_text("0\n")
    live.write_bytes(b"y" * 100)
    with file_lock(CachePath(tmp_path, "b.npy.lock")):  # a download in progress
        assert not make_room(tmp_path, budget=140, need=50)
        assert make_room(tmp_path, budget=160, need=50)
    assert not dead.exists() and not (tmp_path / "a.npy.journal").exists() and live.exists()


REGISTERED = """
import sys
from pathlib import Path
from shard_loader.cache.consumers import Registration
record = Registration(Path(sys.argv[1]), "layout", 7)
print("registered", flush=True)
sys.stdin.read()
"""


def test_a_consumers_place_counts_while_it_lives_and_moves_with_it(tmp_path):
    proc = _ready(REGISTERED, tmp_path, "registered")
    mine = Registration(tmp_path, "layout", 3)
    other = Registration(tmp_path, "other", 1)
    assert sorted(live_places(tmp_path, "layout")) == [3, 7]
    mine.move(9)
    assert sorted(live_places(tmp_path, "layout")) == [7, 9]
    proc.kill()
    proc.wait()
    assert live_places(tmp_path, "layout") == [9]  # a dead consumer holds nothing back
    mine.close()
    other.close()
    assert live_places(tmp_path, "layout") == [] and not list((tmp_path / ".consumers").iterdir())


@pytest.mark.integration
@pytest.mark.parametrize("mtime", ["changed", "put back"])
def test_flipped_bytes_in_a_cached_file_are_refetched_never_served(tmp_path, mtime):
    write_positional(tmp_path / "pub", SIZES)
    with FolderServer(tmp_path / "pub") as server:
        url = f"{server.url}/manifest.json"
        first = _stream(url, tmp_path / "cache", keep_files=True)
        shard = TokenDataset(url, cache_dir=tmp_path / "cache", **OPTS).shards[2]
        cached = cached_path(tmp_path / "cache", shard.npy)
        assert markers(cached)
        before = os.stat(cached.path)
        with open(cached.path, "r+b") as f:  # flip one token's bytes in place: same size and inode
            f.seek(shard.npy.size - 12)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        if mtime == "put back":  # as `touch -d` or `cp -p` would: only the ctime, which no call sets, tells
            os.utime(cached.path, ns=(before.st_atime_ns, before.st_mtime_ns))
            after = os.stat(cached.path)
            assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
                before.st_size,
                before.st_mtime_ns,
                before.st_ino,
            )
        gets = server.gets.copy()
        second = _stream(url, tmp_path / "cache", keep_files=True)
        refetched = {p for p in server.gets if server.gets[p] > gets.get(p, 0)}
    assert len(first) == len(second) and all(np.array_equal(a, b) for a, b in zip(first, second))
    assert refetched == {"/manifest.json", f"/{shard.npy.key}"}


@pytest.mark.integration
def test_a_same_size_republish_under_the_same_key_is_never_served_from_the_old_bytes(tmp_path):
    def publish(offset):
        docs = [[np.arange(1, n) + offset] for n in SIZES]
        write_dataset(tmp_path / "pub", {"train": docs}, vocab_size=1 << 20)

    publish(0)
    with FolderServer(tmp_path / "pub") as server:
        url = f"{server.url}/manifest.json"
        old = _stream(url, tmp_path / "cache", keep_files=True)
        publish(1000)  # same keys, same sizes, other bytes
        new = _stream(url, tmp_path / "cache", keep_files=True)
    expected = [np.asarray(b["input_ids"]) for b in TokenDataset(str(tmp_path / "pub"), **OPTS)]
    assert len(new) == len(expected) and all(np.array_equal(a, b) for a, b in zip(new, expected))
    assert not any(np.array_equal(a, b) for a, b in zip(old, new))


RANK = """
import json, sys, time
import torch.distributed as dist
from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.positional import samples_of
url, cache, rank, slow, budget, rendezvous, sizes = sys.argv[1:8]
rank, slow, sizes = int(rank), float(slow), json.loads(sizes)
if rendezvous != "-":  # ranks in lockstep, as DDP's all-reduce keeps them
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
ds = TorchTokenDataset(url, seq_len=16, batch_size=2, seed=1, window_shards=1, rank=rank, world_size=2, cache_dir=cache,
                       batches_per_transfer=2, disk_budget=None if budget == "-" else int(budget))
out = []
for batch in TokenDataLoader(ds, num_workers=2):
    out.append(samples_of(batch, sizes))
    time.sleep(slow)  # this rank's "GPU" is slower
    if rendezvous != "-":
        dist.barrier()
print(json.dumps(out))
"""


class DiskInUse:
    """Samples a cache's bytes on disk plus the bytes of deleted files still mapped by the consumers."""

    def __init__(self, cache, pids):
        self.cache, self.procs, self.peak, self.deleted_mapped = Path(cache), [psutil.Process(p) for p in pids], 0, 0
        self.deleted_paths = set()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _mapped_deleted(self):
        total = 0
        for proc in self.procs:
            try:
                for p in [proc, *proc.children(recursive=True)]:
                    for line in Path(f"/proc/{p.pid}/maps").read_text().splitlines():
                        if line.endswith("(deleted)") and str(self.cache) in line:
                            start, end = (int(x, 16) for x in line.split()[0].split("-"))
                            total += end - start
                            self.deleted_paths.add(line.split()[-2])
            except (OSError, psutil.Error):
                pass
        return total

    def _run(self):
        self.samples = 0
        while not self._stop.is_set():
            deleted = self._mapped_deleted()
            self.deleted_mapped = max(self.deleted_mapped, deleted)
            self.peak = max(self.peak, cache_usage(self.cache) + deleted)
            self.samples += 1
            time.sleep(0.005)  # a sampling period, not a synchronisation

    def stop(self):
        self._stop.set()
        self.thread.join()


def _ranks(url, cache, sizes, slow, budget=None, rendezvous=None):
    def args(r):
        return [
            sys.executable,
            "-c",
            RANK,
            url,
            str(cache),
            str(r),
            str(slow[r]),
            str(budget or "-"),
            str(rendezvous or "-"),
            json.dumps(sizes),
        ]

    return [
        subprocess.Popen(args(r), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)
    ]


def _expected(root, sizes):
    return json.loads(
        json.dumps(
            [[samples_of(b, sizes) for b in TokenDataset(str(root), rank=r, world_size=2, **OPTS)] for r in range(2)]
        )
    )


@pytest.mark.system
def test_two_ranks_of_two_workers_share_a_cache_without_crashing(tmp_path):
    sizes = SIZES * 2
    write_positional(tmp_path / "pub", sizes)
    with FolderServer(tmp_path / "pub", rate=200_000) as server:
        for rep in range(2):
            procs = _ranks(f"{server.url}/manifest.json", tmp_path / f"cache{rep}", sizes, slow=(0.0, 0.01))
            results = [p.communicate(timeout=HUNG) for p in procs]
            assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
            assert [json.loads(out) for out, _ in results] == _expected(tmp_path / "pub", sizes)


@pytest.mark.system
def test_ranks_in_lockstep_fetch_each_file_once_per_node_within_the_disk_budget(tmp_path):
    sizes = SIZES * 3
    manifest = write_positional(tmp_path / "pub", sizes)
    largest = max(e.nbytes for e in manifest.splits["train"].shards)
    budget = 10 * largest  # 2 ranks x 2 workers x (current + next window), and 2 windows of slack
    with FolderServer(tmp_path / "pub", rate=400_000) as server:
        procs = _ranks(
            f"{server.url}/manifest.json", tmp_path / "cache", sizes, (0.0, 0.005), budget, tmp_path / "rendezvous"
        )
        disk = DiskInUse(tmp_path / "cache", [p.pid for p in procs])
        results = [p.communicate(timeout=HUNG) for p in procs]
        disk.stop()
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    assert [json.loads(out) for out, _ in results] == _expected(tmp_path / "pub", sizes)
    fetched = {path: n for path, n in server.gets.items() if path.startswith("/tokenized/")}
    assert len(fetched) == 2 * len(sizes) and set(fetched.values()) == {1}  # 1.0x the split per node
    assert disk.deleted_mapped == 0 and 0 < disk.peak <= budget, disk.deleted_paths


# 20 repetitions in one torchrun: each is a whole pass into a fresh node cache, with new DataLoader workers and a new
# seed (so another visiting order and other lags), while processes start and import torch once; small shards keep a
# pass short.
REPS, LAGGING = 20, [int(n) for n in np.random.default_rng(11).integers(300, 900, size=12)]


def _lagging_passes(url, tmp_path, budget, store_options=None):
    """20 passes of 2 ranks x 2 workers (torchrun, gloo) into one node cache, rank 1 slowed; the disk in use sampled
    throughout."""
    cmd = [
        *torchrun(2),
        str(ROOT / "tests/support/lagging_rank.py"),
        url,
        str(tmp_path / "cache"),
        str(budget),
        str(tmp_path),
        json.dumps(LAGGING),
        str(REPS),
        "1",
        "0.004",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAGGING_STORE_OPTIONS": json.dumps(store_options or {})}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    disk = DiskInUse(tmp_path / "cache", [proc.pid])
    out, _ = proc.communicate(timeout=HUNG)
    disk.stop()
    assert proc.returncode == 0, out[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)], disk


def _check_lagging(tmp_path, manifest, passes, disk, budget, gets):
    """Every pass serves each rank its exact stream; the server sent each file once per pass; the disk never passed the
    budget."""
    opts = {k: v for k, v in OPTS.items() if k != "seed"}
    for rep in range(REPS):
        expected = [
            [
                samples_of(b, LAGGING)
                for b in TokenDataset(str(tmp_path / "pub"), rank=r, world_size=2, seed=rep, **opts)
            ]
            for r in range(2)
        ]
        assert [passes[r][rep] for r in range(2)] == json.loads(json.dumps(expected)), f"pass {rep}"
    files = {f.key: f.size for e in manifest.splits["train"].shards for f in (e.npy, e.bin)}
    fetched = {key: sum(n for path, n in gets.items() if path.endswith("/" + key)) for key in files}
    assert fetched == {key: REPS for key in files}  # 1.0x the split per pass, counted at the server
    assert sum(n * files[k] for k, n in fetched.items()) == REPS * sum(files.values())
    assert disk.samples > 100 and disk.deleted_mapped == 0 and 0 < disk.peak <= budget, disk.deleted_paths


def _lagging_budget(manifest):
    return 4 * max(e.nbytes for e in manifest.splits["train"].shards)  # a few windows: the slow rank lags by far more


@pytest.mark.system
def test_a_lagging_rank_on_a_loopback_http_store_fetches_each_file_once_per_pass_within_the_budget(tmp_path):
    manifest = write_positional(tmp_path / "pub", LAGGING)
    budget = _lagging_budget(manifest)
    with FolderServer(tmp_path / "pub", rate=2_000_000) as server:
        passes, disk = _lagging_passes(f"{server.url}/manifest.json", tmp_path, budget)
    _check_lagging(tmp_path, manifest, passes, disk, budget, server.gets)


@pytest.mark.system
def test_a_lagging_rank_on_s3_fetches_each_file_once_per_pass_within_the_budget(seaweed, tmp_path):
    manifest = write_positional(tmp_path / "pub", LAGGING)
    budget = _lagging_budget(manifest)
    seaweed.create_bucket("lagging")
    writer = seaweed.client(WRITER)
    for path in sorted(p for p in (tmp_path / "pub").rglob("*") if p.is_file()):
        writer.upload_file(str(path), "lagging", f"demo/{path.relative_to(tmp_path / 'pub').as_posix()}")
    counter = S3Proxy(int(seaweed.url.rsplit(":", 1)[1]))  # counts GETs per object in front of the real server
    try:
        options = {"endpoint_url": counter.url, "access_key_id": READER[0], "secret_access_key": READER[1]}
        passes, disk = _lagging_passes("s3://lagging/demo/manifest.json", tmp_path, budget, options)
    finally:
        counter.close()
    _check_lagging(tmp_path, manifest, passes, disk, budget, counter.gets)
