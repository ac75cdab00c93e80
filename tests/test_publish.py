"""Publishing: manifest.json is replaced whole even when two builds publish at once, and a manifest naming
a missing or mismatched file is refused before anything is published."""

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import shard_loader
from shard_assets.errors import PublishError
from shard_assets.publish import publish_manifest
from shard_assets.store import LocalFolderStore
from shard_assets.store.local import STALE_TEMP_SECONDS
from tests.support.build_helpers import assert_every_manifest_whole
from tests.support.synthetic import random_docs, write_dataset

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]

PUBLISHER = """
import sys
from shard_assets.publish import publish_manifest
from shard_assets.store import LocalFolderStore
from shard_assets.store.local import STALE_TEMP_SECONDS
from shard_loader import open_manifest
store = LocalFolderStore(sys.argv[1])
manifest = open_manifest(sys.argv[2]).manifest
for _ in range(int(sys.argv[3])):
    publish_manifest(store, manifest)
"""


def _publisher(store: Path, manifest: Path, times: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PUBLISHER, str(store), str(manifest), str(times)], cwd=ROOT)


def _two_datasets(store: Path) -> dict[str, bytes]:
    """Two versions of a dataset in one store, each manifest's exact bytes by version."""
    rng = np.random.default_rng(2)
    bodies = {}
    for name, docs in (("a", 10), ("b", 12)):
        m = write_dataset(store, {"train": [random_docs(rng, docs)]}, version=f"v{name}", tag=name)
        bodies[m.version] = m.dumps()
    return bodies


def test_two_builds_publishing_at_once_never_tear_the_manifest(tmp_path):
    store = tmp_path / "store"
    bodies = _two_datasets(store)
    for version, body in bodies.items():
        (tmp_path / f"{version}.json").write_bytes(body)
    procs = [_publisher(store, tmp_path / f"{v}.json", 40) for v in bodies]
    seen = []
    while any(p.poll() is None for p in procs):
        body = (store / "manifest.json").read_bytes()
        assert body in bodies.values()  # one of the two, whole, never a mix
        seen.append(shard_loader.open_manifest(str(store)).manifest.version)
    assert all(p.wait() == 0 for p in procs)
    assert set(seen) <= set(bodies) and len(seen) > 10
    assert assert_every_manifest_whole(store) == 3
    assert not [p for p in store.rglob("*") if p.name.endswith(".tmp")]


def test_a_publisher_killed_at_random_moments_leaves_a_whole_manifest(tmp_path):
    store = tmp_path / "store"
    bodies = _two_datasets(store)
    for version, body in bodies.items():
        (tmp_path / f"{version}.json").write_bytes(body)
    rng = random.Random(7)
    for attempt in range(4):
        version = sorted(bodies)[attempt % 2]
        proc = _publisher(store, tmp_path / f"{version}.json", 100_000)
        time.sleep(rng.uniform(0.8, 1.5))  # past the interpreter's start: mid-publish
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert (store / "manifest.json").read_bytes() in bodies.values()  # whole, whichever the kill left
        assert assert_every_manifest_whole(store) == 3
    (store / ".manifest.json.killed-writer.tmp").write_bytes(b"half a manifest")  # as a kill leaves it, for certain
    for leaked in store.rglob("*.tmp"):  # a killed writer's temp file, an hour later: the next publish sweeps it
        os.utime(leaked, (time.time() - STALE_TEMP_SECONDS - 1,) * 2)
    fresh = store / "manifests" / ".va.json.live-writer.tmp"
    fresh.write_bytes(b"a writer still at work")
    for version in sorted(bodies):
        publish_manifest(LocalFolderStore(store), shard_loader.open_manifest(str(tmp_path / f"{version}.json")).manifest)
    assert [p.name for p in store.rglob("*.tmp")] == [fresh.name]


@pytest.fixture
def dataset(tmp_path):
    bodies = _two_datasets(tmp_path)
    return tmp_path, shard_loader.open_manifest(str(tmp_path)).manifest, bodies


def test_a_manifest_naming_a_missing_file_is_not_published(dataset):
    root, m, bodies = dataset
    key = m.splits["train"].shards[0].bin.key
    (root / key).unlink()
    other = replace(m, version="v-missing")
    with pytest.raises(PublishError, match=f"{key}: referenced by manifest v-missing but missing from local folder"):
        publish_manifest(LocalFolderStore(root), other)
    assert (root / "manifest.json").read_bytes() == bodies[m.version]
    assert not (root / "manifests" / "v-missing.json").exists()


def test_a_manifest_whose_sizes_differ_from_the_files_is_not_published(dataset):
    root, m, bodies = dataset
    key = m.splits["train"].shards[0].npy.key
    with open(root / key, "ab") as f:
        f.write(b"tail")
    with pytest.raises(PublishError, match=f"{key}: is {m.splits['train'].shards[0].npy.size + 4} bytes in local folder .*its record says"):
        publish_manifest(LocalFolderStore(root), replace(m, version="v-grown"))
    assert (root / "manifest.json").read_bytes() == bodies[m.version]


def test_republishing_a_version_keeps_the_first_copy(dataset):
    root, m, _ = dataset
    first = publish_manifest(LocalFolderStore(root), m)
    again = publish_manifest(LocalFolderStore(root), replace(m, created_at="2099-01-01T00:00:00Z"))
    assert not first.created and not again.created
    assert again.manifest.created_at == m.created_at
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]
