"""Readers protect what they read (#26 item 2): a trainer holds a lease on its open version where it can write (a
local folder; a bucket with keys that may write), renewed from a daemon thread of the opening process, and gc keeps
any version with a live lease, saying so in its dry run; a trainer reading a version gc would drop finishes its
epoch. A reader that cannot write (read-only keys) says what protects it instead, and a pin written with write keys
does. A collection that races an opening is found at the opening, never mid-epoch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import shard_loader
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.lib.retention import Policy, collect, leases, plan_collection
from shard_assets.lib.spec import load_spec
from shard_assets.lib.store import LocalFolderStore
from shard_assets.runner import build_dataset
from shard_loader.cli import main as loader_cli
from shard_loader.errors import ManifestError, NotFoundError
from shard_loader.format.leases import Lease, collecting_key, lease_key
from shard_loader.storage import LocalStore
from shard_loader.storage.https import HttpStore
from shard_loader.storage.reader_leases import LEASE_SECONDS, ReaderLease, hold_reader_lease
from tests.support.build_helpers import assert_every_manifest_whole
from tests.support.dagster_helpers import instance, tiny_dataset, write_jsonl
from tests.support.seaweedfs import READER, WRITER
from tests.support.synthetic import random_docs, write_dataset

DROP_ALL = Policy(
    keep=1, max_age_s=0, grace_s=0
)  # every superseded version is dropped at once, unless a reader holds it


LEASES_LOGGER = "shard_loader.storage.reader_leases"


def _lease_warnings(caplog) -> list[str]:
    """The reader-lease module's own messages: caplog also holds whatever else logs meanwhile (a SQLite connection that
    the garbage collector closes on another thread logs an error through sqlalchemy)."""
    return [r.getMessage() for r in caplog.records if r.name == LEASES_LOGGER]


def soon() -> float:
    """A minute from now: every version written so far is older than a grace period of 0, whatever the second-granular
    modification times a bucket reports, and every lease written now (live an hour) is still live."""
    return time.time() + 60


class CountingStore(LocalStore):
    """A folder store whose `writes` semaphore is released once per write (a handshake with the renewing thread)."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.writes = threading.Semaphore(0)

    def write_bytes(self, key: str, data: bytes) -> None:
        super().write_bytes(key, data)
        self.writes.release()


def test_a_lease_is_written_renewed_and_removed_and_parsed_only_at_its_own_key(tmp_path):
    store = CountingStore(tmp_path)
    lease = ReaderLease(store, "demo-0123456789abcdef", seconds=60, renew=0.01)
    assert lease.acquire()
    path = tmp_path / lease.key
    assert Lease.parse(path.read_bytes(), lease.key) == lease.lease and lease.key.startswith(
        "readers/demo-0123456789abcdef/"
    )
    lease.start()
    assert all(store.writes.acquire(timeout=60) for _ in range(3))  # written, then renewed twice (not a sleep)
    lease.release()
    assert not path.exists()
    with pytest.raises(ManifestError, match="does not belong at this key"):
        Lease.parse(lease.lease.to_bytes(), lease_key("other-0123456789abcdef", lease.lease.holder))
    with pytest.raises(ManifestError, match="not a reader lease"):
        Lease.parse(b'{"format": "shard-reader-lease", "kind": "owner"}', lease.key)


def _published(root: Path) -> str:
    rng = np.random.default_rng(3)
    write_dataset(root, {"train": [random_docs(rng, 30) for _ in range(2)], "val": [random_docs(rng, 5)]})
    return str(root)


def _leases(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "readers").rglob("*.json"))


def test_a_lease_is_removed_on_close_or_at_the_end_of_a_with_block_once_no_reader_of_the_process_shares_it(tmp_path):
    url = _published(tmp_path)
    first = shard_loader.TokenDataset(url, seq_len=8, batch_size=2)
    (lease,) = _leases(tmp_path)
    with shard_loader.TokenDataset(url, seq_len=8, batch_size=2) as second:  # the same version: one lease, shared
        assert _leases(tmp_path) == [lease]
        next(iter(second))
    assert _leases(tmp_path) == [lease]  # the first reader still holds it
    first.close()
    assert _leases(tmp_path) == []
    first.close()  # a second close gives back nothing more
    with (
        pytest.raises(RuntimeError, match="the trainer failed"),
        shard_loader.TokenDataset(url, seq_len=8, batch_size=2),
    ):
        assert len(_leases(tmp_path)) == 1
        raise RuntimeError("the trainer failed")
    assert _leases(tmp_path) == []  # a with block left by an exception gives it back too


def test_an_opening_refused_after_its_manifest_was_read_holds_no_lease(tmp_path):
    url = _published(tmp_path)
    with pytest.raises(shard_loader.EmptyEpochError, match="an epoch would have 0 batches"):
        shard_loader.TokenDataset(url, seq_len=8, batch_size=10_000)
    assert _leases(tmp_path) == []  # nothing to close: nothing is held


EXITING_READER = """
import json, os, pathlib, sys
import shard_loader
root = pathlib.Path(sys.argv[1])
ds = shard_loader.TokenDataset(str(root), seq_len=8, batch_size=2)  # never closed: given back at exit
child = os.fork()
if child == 0:
    ds.close()  # the child's copy of the reader: closing it and exiting leave the parent's lease alone
    sys.exit(0)  # a normal exit, atexit handlers included
os.waitpid(child, 0)
print(json.dumps([os.getpid(), sorted(p.name for p in (root / "readers").rglob("*.json"))]), flush=True)
"""


def test_a_lease_never_closed_is_removed_at_exit_and_a_forked_child_never_removes_its_parents(tmp_path):
    url = _published(tmp_path)
    out = subprocess.run([sys.executable, "-c", EXITING_READER, url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pid, (lease,) = json.loads(out.stdout.splitlines()[-1])
    assert f"-{pid}-" in lease  # the parent's, still there once the child had closed its copy and exited
    assert _leases(tmp_path) == []  # the parent's exit removed it


HELD_READER = """
import sys
import threading
import shard_loader
ds = shard_loader.TokenDataset(sys.argv[1], seq_len=8, batch_size=2)
print("open", flush=True)
sys.stdin.read()
"""


def test_a_killed_readers_lease_lapses_by_itself(tmp_path):
    url = _published(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", HELD_READER, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "open"
    proc.kill()  # no close, no exit handler: the lease stays in the store
    proc.wait()
    objects = LocalFolderStore(tmp_path)
    (held,), lapsed = leases(objects, now=time.time())
    assert lapsed == [] and f"-{proc.pid}-" in held.note
    live, lapsed = leases(objects, now=time.time() + LEASE_SECONDS + 60)  # no renewal since: it lapsed
    assert live == [] and [key for key, _ in lapsed] == [held.key]


def test_a_reader_that_cannot_write_says_what_protects_it_instead(caplog):
    with caplog.at_level(logging.WARNING, logger=LEASES_LOGGER):
        assert (
            hold_reader_lease(HttpStore("https://example.invalid/data"), "demo-0123456789abcdef", "manifest.json")
            is None
        )
    (message,) = _lease_warnings(caplog)
    assert "no reader lease on demo-0123456789abcdef" in message and "gc's grace period" in message
    assert "shard-loader pin https://example.invalid/data/manifests/demo-0123456789abcdef.json --for 30d" in message


def test_a_version_collected_while_a_reader_opens_it_is_refused_at_the_opening(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    write_dataset(tmp_path, {"train": [random_docs(rng, 30) for _ in range(2)], "val": [random_docs(rng, 5)]})
    version = shard_loader.open_manifest(str(tmp_path)).manifest.version
    pinned = tmp_path / "manifests" / f"{version}.json"
    pinned.parent.mkdir(exist_ok=True)
    pinned.write_bytes((tmp_path / "manifest.json").read_bytes())
    put = LocalStore.write_bytes

    def gc_in_between(
        self, key, data
    ):  # gc marks the version after this reader read its manifest, before its lease landed
        (tmp_path / collecting_key(version)).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / collecting_key(version)).write_bytes(b"")
        put(self, key, data)

    monkeypatch.setattr(LocalStore, "write_bytes", gc_in_between)
    for url in (str(pinned), str(tmp_path)):  # by its pinned URL, or live
        with pytest.raises(NotFoundError, match=rf"version {version} was collected by gc while this reader opened it"):
            shard_loader.TokenDataset(url, seq_len=8, batch_size=2)
    assert not list((tmp_path / "readers").rglob("*.json"))  # its lease went with it
    (tmp_path / collecting_key(version)).unlink()
    monkeypatch.undo()
    pinned.unlink()  # collected between its opening's two reads: refused at the opening too
    with pytest.raises(NotFoundError):
        shard_loader.TokenDataset(str(pinned), seq_len=8, batch_size=2)


@pytest.fixture
def two_versions(tmp_path):
    """A local store with v1 (superseded) and v2 (live), v2 from a changed file and a retrained tokenizer, so every
    shard of v1 is v1's alone."""
    spec, store, resources = tiny_dataset(tmp_path, files=2, docs=150)
    inst = instance()
    first = build_dataset(inst, load_spec(spec), resources)
    write_jsonl(tmp_path / "src" / "part2.jsonl", 90, seed=7)
    second = build_dataset(inst, load_spec(spec), resources)
    assert second.version != first.version
    return store, first.version


def _consume(ds, n: int | None = None) -> int:
    count = 0
    for _ in ds:
        count += 1
        if count == n:
            break
    return count


@pytest.mark.integration
def test_a_trainer_reading_a_version_gc_would_drop_finishes_its_epoch_over_the_local_store(two_versions):
    store, v1 = two_versions
    ds = shard_loader.TokenDataset(str(store / f"manifests/{v1}.json"), seq_len=16, batch_size=2, window_shards=1)
    total = len(ds)
    served = _consume(ds, total // 3)
    objects = LocalFolderStore(store)
    plan = plan_collection(objects, DROP_ALL, now=soon())
    assert v1 in plan.kept_versions and plan.dropped_versions == ()
    (hold,) = plan.held  # the dry run says what it keeps because of a reader
    assert hold.version == v1 and hold.kind == "reader" and str(os.getpid()) in hold.note
    collect(objects, plan)
    served += _consume(ds)
    assert served == total  # the epoch finished: no file vanished under it
    ds.close()  # the lease goes with the trainer
    later = plan_collection(objects, DROP_ALL, now=soon())
    assert later.dropped_versions == (v1,) and later.held == ()
    assert collect(objects, later) == later.bytes_freed > 0
    assert assert_every_manifest_whole(store) == 2


@pytest.mark.integration
def test_a_reader_leasing_a_version_while_gc_drops_it_keeps_it_whole(two_versions, monkeypatch):
    store, v1 = two_versions
    objects = LocalFolderStore(store)
    plan = plan_collection(objects, DROP_ALL, now=soon())
    assert plan.dropped_versions == (v1,)
    put = objects.put_bytes

    def reader_arrives(
        key, data, if_absent=False
    ):  # a trainer leases v1 as gc marks it, before gc reads the leases again
        put(key, data, if_absent)
        if key == collecting_key(v1):
            assert ReaderLease(LocalStore(store), v1).acquire()  # never released: it lapses (or the test ends)

    monkeypatch.setattr(objects, "put_bytes", reader_arrives)
    collect(objects, plan)
    assert not (store / collecting_key(v1)).exists()  # unmarked, and every file it names kept
    assert assert_every_manifest_whole(store) == 3
    assert plan_collection(objects, DROP_ALL, now=soon()).held[0].version == v1


@pytest.fixture(scope="module")
def leases_bucket(seaweed) -> str:
    seaweed.create_bucket("leases")
    return "leases"


def _s3_resources(seaweed, spec: Path, prefix: str) -> dict:
    store = StoreResource(
        root=f"s3://leases/{prefix}", endpoint_url=seaweed.url, access_key_id=WRITER[0], secret_access_key=WRITER[1]
    )
    return {"dataset": DatasetResource(spec_path=str(spec)), "store": store}


@pytest.mark.integration
@pytest.mark.parametrize("reader", ["writes", "read-only"])
def test_a_trainer_on_s3_finishes_its_epoch_while_gc_runs_protected_by_its_lease_or_by_a_pin(
    seaweed, leases_bucket, tmp_path, monkeypatch, caplog, reader
):
    spec, _, _ = tiny_dataset(tmp_path, files=2, docs=150)
    resources = _s3_resources(seaweed, spec, reader)
    inst = instance()
    v1 = build_dataset(inst, load_spec(spec), resources).version
    write_jsonl(tmp_path / "src" / "part2.jsonl", 90, seed=7)
    build_dataset(inst, load_spec(spec), resources)
    keys = WRITER if reader == "writes" else READER
    url = f"s3://leases/{reader}/manifests/{v1}.json"
    options = {"endpoint_url": seaweed.url, "access_key_id": keys[0], "secret_access_key": keys[1]}
    with caplog.at_level(logging.WARNING, logger=LEASES_LOGGER):
        ds = shard_loader.TokenDataset(
            url, seq_len=16, batch_size=2, window_shards=1, cache_dir=tmp_path / "cache", store_options=options
        )
    objects = resources["store"].store()
    if reader == "read-only":  # no lease: it says what protects it, and whoever launches the run pins the version
        (warning,) = _lease_warnings(caplog)
        assert (
            "AccessDenied" in warning
            and "gc's grace period" in warning
            and f"shard-loader pin {url.rsplit('/manifests', 1)[0]}/manifests/{v1}.json --for 30d" in warning
        )
        unprotected = plan_collection(objects, DROP_ALL, now=soon())
        assert unprotected.dropped_versions == (v1,), unprotected  # unprotected until pinned
        for var, value in {
            "S3_ENDPOINT_URL": seaweed.url,
            "R2_DATASET_WRITE_ACCESS_KEY_ID": WRITER[0],
            "R2_DATASET_WRITE_SECRET_ACCESS_KEY": WRITER[1],
        }.items():
            monkeypatch.setenv(var, value)
        assert loader_cli(["pin", url, "--for", "30d", "--note", "run 7 of the sweep"]) == 0
    total = len(ds)
    served = _consume(ds, total // 3)
    plan = plan_collection(objects, DROP_ALL, now=soon())
    (hold,) = plan.held
    assert hold.version == v1 and hold.kind == ("reader" if reader == "writes" else "pin")
    assert reader == "writes" or hold.note == "run 7 of the sweep"
    collect(objects, plan)
    served += _consume(ds)
    assert served == total
    ds.close()
