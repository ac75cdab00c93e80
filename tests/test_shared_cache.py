"""A cache directory shared by ranks and workers: leases keep a file on disk while anyone reads it,
dead holders' leases expire, and only bytes verified against the manifest's sha256 are ever served."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shard_loader import TokenDataset
from shard_loader.cache import cached_path, markers
from shard_loader.lease import evict, hold
from tests.support.http_server import FolderServer
from tests.support.positional import samples_of, write_positional
from tests.support.synthetic import write_dataset

ROOT = Path(__file__).resolve().parents[1]
SIZES = [int(n) for n in np.random.default_rng(8).integers(300, 900, size=6)]
OPTS = dict(seq_len=16, batch_size=2, seed=1, window_shards=1)


def _stream(url, cache, **kw):
    ds = TokenDataset(url, cache_dir=cache, **{**OPTS, **kw})
    try:
        return [np.asarray(b["input_ids"]) for b in ds]
    finally:
        ds.close()


def test_a_held_file_is_not_evicted_until_its_last_holder_releases(tmp_path):
    path = tmp_path / "f.npy"
    path.write_bytes(b"x")
    first, second = hold(path), hold(path)
    assert not evict(path) and path.exists()
    first.release()
    assert not evict(path) and path.exists()
    second.release()
    assert evict(path) and not path.exists()
    assert hold(path).fd >= 0  # a new lease after eviction works on a fresh lease file


HOLDER = """
import sys
from pathlib import Path
from shard_loader.lease import hold
lease = hold(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_dead_holders_lease_expires(tmp_path):
    path = tmp_path / "f.npy"
    path.write_bytes(b"x")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    assert not evict(path)
    proc.kill()
    proc.wait()
    assert evict(path) and not path.exists()


@pytest.mark.integration
def test_flipped_bytes_in_a_cached_file_are_refetched_never_served(tmp_path):
    write_positional(tmp_path / "pub", SIZES)
    with FolderServer(tmp_path / "pub") as server:
        url = f"{server.url}/manifest.json"
        first = _stream(url, tmp_path / "cache", keep_files=True)
        shard = TokenDataset(url, cache_dir=tmp_path / "cache", **OPTS).shards[2]
        cached = cached_path(tmp_path / "cache", shard.npy)
        assert markers(cached)
        with open(cached, "r+b") as f:  # flip one token's bytes in place: same size and inode
            f.seek(shard.npy.size - 12)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
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
from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.positional import samples_of
url, cache, rank, slow, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), json.loads(sys.argv[5])
ds = TorchTokenDataset(url, seq_len=16, batch_size=2, seed=1, window_shards=1, rank=rank, world_size=2, cache_dir=cache,
                       batches_per_transfer=2)
out = []
for batch in TokenDataLoader(ds, num_workers=2):
    out.append(samples_of(batch, sizes))
    time.sleep(slow)  # this rank's "GPU" is slower: the other rank runs ahead by windows
print(json.dumps(out))
"""


@pytest.mark.system
def test_two_ranks_of_two_workers_share_a_cache_without_crashing(tmp_path):
    pytest.importorskip("torch")
    write_positional(tmp_path / "pub", SIZES * 2)
    expected = [[samples_of(b, SIZES * 2) for b in TokenDataset(str(tmp_path / "pub"), rank=r, world_size=2, **OPTS)] for r in range(2)]
    expected = json.loads(json.dumps(expected))
    with FolderServer(tmp_path / "pub", rate=200_000) as server:
        url = f"{server.url}/manifest.json"
        for rep in range(3):
            cache = tmp_path / f"cache{rep}"
            procs = [
                subprocess.Popen([sys.executable, "-c", RANK, url, str(cache), str(r), str(0.01 * r), json.dumps(SIZES * 2)],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for r in range(2)
            ]
            results = [p.communicate(timeout=300) for p in procs]
            assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
            assert [json.loads(out) for out, _ in results] == expected
