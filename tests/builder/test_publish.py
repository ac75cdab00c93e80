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
from shard_assets.lib.errors import PublishError
from shard_assets.lib.publish import promote, publish, write_version
from shard_assets.lib.store import LocalFolderStore
from shard_loader.storage.local import STALE_TEMP_SECONDS
from shard_loader.errors import ShardLoaderError
from shard_loader.format import SplitInfo
from tests.support.build_helpers import assert_every_manifest_whole
from tests.support.synthetic import random_docs, write_dataset

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

PUBLISHER = """
import sys
from shard_assets.lib.publish import promote, write_version
from shard_assets.lib.store import LocalFolderStore
from shard_loader.storage.local import STALE_TEMP_SECONDS
from shard_loader import open_manifest
store = LocalFolderStore(sys.argv[1])
manifest = open_manifest(sys.argv[2]).manifest
for n in range(int(sys.argv[3])):
    promote(store, write_version(store, manifest)[0])
    print(n, flush=True)  # published: the point a test may kill at
"""


def _publisher(store: Path, manifest: Path, times: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PUBLISHER, str(store), str(manifest), str(times)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


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
    procs = [_publisher(store, store / f"manifests/{v}.json", 40) for v in bodies]
    seen = []
    while any(p.poll() is None for p in procs):
        body = (store / "manifest.json").read_bytes()
        assert body in bodies.values()  # one of the two, whole, never a mix
        seen.append(shard_loader.open_manifest(str(store)).manifest.version)
    assert all(p.wait() == 0 and len(p.stdout.read().split()) == 40 for p in procs)
    assert set(seen) <= set(bodies) and len(seen) > 10
    assert assert_every_manifest_whole(store) == 3
    assert not [p for p in store.rglob("*") if p.name.endswith(".tmp")]


def test_a_publisher_killed_at_random_moments_leaves_a_whole_manifest(tmp_path):
    store = tmp_path / "store"
    bodies = _two_datasets(store)
    rng = random.Random(7)
    for attempt in range(4):
        version = sorted(bodies)[attempt % 2]
        proc = _publisher(store, store / f"manifests/{version}.json", 100_000)
        for _ in range(rng.randint(1, 30)):  # killed after a seeded number of publishes: in the middle of the next one
            assert proc.stdout.readline(), "the publisher ended"
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        assert (store / "manifest.json").read_bytes() in bodies.values()  # whole, whichever the kill left
        assert assert_every_manifest_whole(store) == 3
    (store / ".manifest.json.killed-writer.tmp").write_bytes(b"half a manifest")  # as a kill leaves it, for certain
    for leaked in store.rglob("*.tmp"):  # a killed writer's temp file, an hour later: the next publish sweeps it
        os.utime(leaked, (time.time() - STALE_TEMP_SECONDS - 1,) * 2)
    fresh = store / "manifests" / ".va.json.live-writer.tmp"
    fresh.write_bytes(b"a writer still at work")
    for version in sorted(bodies):
        m = shard_loader.open_manifest(str(store / f"manifests/{version}.json")).manifest
        promote(LocalFolderStore(store), write_version(LocalFolderStore(store), m)[0])
    assert [p.name for p in store.rglob("*.tmp")] == [fresh.name]


@pytest.fixture
def dataset(tmp_path):
    bodies = _two_datasets(tmp_path)
    return tmp_path, shard_loader.open_manifest(str(tmp_path)).manifest, bodies


def test_a_version_naming_a_missing_file_is_written_but_never_made_live(dataset):
    root, m, bodies = dataset
    key = m.splits["train"].shards[0].bin.key
    (root / key).unlink()
    published = publish(LocalFolderStore(root), replace(m, version="v-missing"), parts={}, val_fraction=0.0)
    assert not published.live and "files_present" in published.failed
    files = next(a for a in published.audits if a.name == "files_present")
    assert f"{key}: missing" in files.problems
    assert (root / "manifest.json").read_bytes() == bodies[m.version]


def test_a_version_whose_sizes_differ_from_the_files_is_never_made_live(dataset):
    root, m, bodies = dataset
    ref = m.splits["train"].shards[0].npy
    with open(root / ref.key, "ab") as f:
        f.write(b"tail")
    published = publish(LocalFolderStore(root), replace(m, version="v-grown"), parts={}, val_fraction=0.0)
    files = next(a for a in published.audits if a.name == "files_present")
    assert not published.live and f"{ref.key}: {ref.size + 4} bytes, manifest says {ref.size}" in files.problems
    assert (root / "manifest.json").read_bytes() == bodies[m.version]


def test_a_version_naming_one_shard_in_two_splits_is_never_made_live(dataset):
    root, m, bodies = dataset
    shared = m.splits["train"].shards[0]
    both = replace(
        m, version="v-shared", splits={**m.splits, "val": SplitInfo.of([shared])}
    )  # val would serve train data
    with pytest.raises(ShardLoaderError) as refused:  # the reader refuses the written version (the format's own rule)
        publish(LocalFolderStore(root), both, parts={}, val_fraction=0.0)
    assert shared.npy.key in str(refused.value) or shared.bin.key in str(refused.value)
    assert (root / "manifest.json").read_bytes() == bodies[m.version]


def test_republishing_a_version_keeps_the_first_copy_and_refuses_other_content(dataset):
    root, m, _ = dataset
    store = LocalFolderStore(root)
    _, first, _ = write_version(store, m)
    _, again, written = write_version(store, replace(m, created_at="2099-01-01T00:00:00Z"))
    assert not first and not again
    assert written.created_at == m.created_at
    other = replace(m, tokenizer=replace(m.tokenizer, file=replace(m.tokenizer.file, size=m.tokenizer.file.size + 1)))
    with pytest.raises(PublishError, match=f"manifests/{m.version}.json: .* already holds a different manifest"):
        write_version(store, other)
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]
