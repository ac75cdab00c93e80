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
import time
from pathlib import Path

import numpy as np
import pytest

import shard_loader
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.lib.retention import Policy, collect, plan_collection
from shard_assets.lib.spec import load_spec
from shard_assets.lib.store import LocalFolderStore
from shard_assets.runner import build_dataset
from shard_loader.cli import main as loader_cli
from shard_loader.errors import ManifestError, NotFoundError
from shard_loader.format.leases import Lease, collecting_key, lease_key
from shard_loader.storage import LocalStore
from shard_loader.storage.https import HttpStore
from shard_loader.storage.reader_leases import ReaderLease, hold_reader_lease
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


def test_a_lease_is_written_renewed_and_removed_and_parsed_only_at_its_own_key(tmp_path):
    store = LocalStore(tmp_path)
    lease = ReaderLease(store, "demo-0123456789abcdef", seconds=60, renew=0.01)
    assert lease.acquire()
    path = tmp_path / lease.key
    assert Lease.parse(path.read_bytes(), lease.key) == lease.lease and lease.key.startswith(
        "readers/demo-0123456789abcdef/"
    )
    lease.start()
    assert lease.wait_renewed(2, timeout=60)  # the daemon thread rewrote it (a handshake, not a sleep)
    lease.release()
    assert not path.exists()
    with pytest.raises(ManifestError, match="does not belong at this key"):
        Lease.parse(lease.lease.to_bytes(), lease_key("other-0123456789abcdef", lease.lease.holder))
    with pytest.raises(ManifestError, match="not a reader lease"):
        Lease.parse(b'{"format": "shard-reader-lease", "kind": "owner"}', lease.key)


def test_a_share_collected_while_another_lease_is_written_releases_it_without_deadlock(tmp_path, monkeypatch):
    """The garbage collector may run a dropped share's finalizer at any allocation, also inside hold_reader_lease,
    which holds the shares' lock while it writes a new lease: that share is released once the lock is free, never
    waited for under it (CI hung here: a mixture's components opened while an earlier dataset's share was collected)."""
    import gc
    import threading

    from shard_loader.storage import reader_leases

    store = LocalStore(tmp_path)
    first = hold_reader_lease(store, "old-0123456789abcdef", "manifest.json")
    assert first is not None
    old_lease = next(lease for key, (lease, _) in reader_leases._SHARED.items() if key[2].startswith("old-"))
    cycle: list[object] = [first]
    cycle.append(cycle)  # only the garbage collector frees it
    del first
    write = reader_leases.ReaderLease.acquire

    def acquire_while_collecting(self):  # a collection at an allocation inside the write, the lock held
        gc.collect()
        return write(self)

    monkeypatch.setattr(reader_leases.ReaderLease, "acquire", acquire_while_collecting)
    held: list[object] = []
    gc.disable()
    try:
        del cycle
        opening = threading.Thread(
            target=lambda: held.append(hold_reader_lease(store, "new-0123456789abcdef", "manifest.json")), daemon=True
        )
        opening.start()
        opening.join(120)  # a bound on a deadlock, not on speed: the opening takes milliseconds
    finally:
        gc.enable()
    assert not opening.is_alive(), "hold_reader_lease deadlocked on a share collected under its own lock"
    assert held and held[0] is not None
    assert reader_leases.flush_releases(120)  # the releaser thread released it
    assert not (tmp_path / old_lease.key).exists()  # the collected share's lease was released
    assert all(not key[2].startswith("old-") for key in reader_leases._SHARED)
    held[0].release()


def test_a_lease_collected_where_its_removal_would_wait_is_removed_by_the_releaser_thread(tmp_path, monkeypatch):
    """A finalizer runs on whatever thread allocated when the collector ran, holding whatever locks that thread held
    (a connection pool's, for one): a collected reader's lease is never removed there, but on the releaser thread,
    once the lock is free. Here the store's removal needs a lock the collecting thread holds."""
    import gc
    import threading

    from shard_loader.storage import reader_leases

    store = LocalStore(tmp_path)
    pool, removed_on = threading.Lock(), []
    remove = store.remove

    def remove_under_the_pool_lock(key: str) -> None:
        with pool:
            removed_on.append(threading.current_thread().name)
            remove(key)

    monkeypatch.setattr(store, "remove", remove_under_the_pool_lock)
    share = hold_reader_lease(store, "demo-0123456789abcdef", "manifest.json")
    (path,) = (tmp_path / "readers" / "demo-0123456789abcdef").iterdir()
    cycle: list[object] = [share]
    cycle.append(cycle)  # only the garbage collector frees it
    del share
    gc.disable()  # the collection runs in the thread below, under the lock, and nowhere else
    try:
        del cycle
        collecting = threading.Thread(target=lambda: (pool.acquire(), gc.collect(), pool.release()), daemon=True)
        collecting.start()
        collecting.join(120)  # a bound on a deadlock, not on speed
    finally:
        gc.enable()
    assert not collecting.is_alive(), "the collected lease's removal waited for a lock its own thread held"
    assert reader_leases.flush_releases(120)
    assert removed_on == ["reader-lease-releases"] and not path.exists()


def test_a_forked_child_that_exits_leaves_its_parents_lease(tmp_path):
    """A child forked from a reader inherits its lease objects; when it exits (and its finalizers run) it must not
    remove the leases its parent still holds and renews."""
    script = f"""
import json, os, pathlib, sys
from shard_loader.storage import LocalStore
from shard_loader.storage.reader_leases import ReaderLease, hold_reader_lease
root = pathlib.Path({str(tmp_path)!r})
lease = ReaderLease(LocalStore(root), "demo-0123456789abcdef", seconds=60, renew=60)
assert lease.acquire()
share = hold_reader_lease(LocalStore(root), "other-0123456789abcdef", "manifest.json")
child = os.fork()
if child == 0:
    sys.exit(0)  # a normal exit: the atexit handlers, and the finalizers they run
os.waitpid(child, 0)
print(json.dumps(sorted(p.parent.name for p in root.rglob("*.json"))))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == ["demo-0123456789abcdef", "other-0123456789abcdef"]


def test_a_lease_released_on_its_own_renewal_thread_is_removed(tmp_path, monkeypatch):
    """The collector may run a dropped reader's release on the lease's own renewal thread (inside a renewal's
    allocations): the release cannot join that thread, so it removes the lease without waiting for it."""
    import threading

    store = LocalStore(tmp_path)
    lease = ReaderLease(store, "demo-0123456789abcdef", seconds=60, renew=0.01)
    assert lease.acquire()
    write, released, errors = store.write_bytes, threading.Event(), []

    def renew_then_release(key: str, data: bytes) -> None:
        write(key, data)
        if threading.current_thread() is lease._thread and not released.is_set():
            released.set()
            try:
                lease.release()  # as the collector would, on this thread
            except Exception as exc:  # noqa: BLE001 - the test reports whatever the release raised
                errors.append(exc)

    monkeypatch.setattr(store, "write_bytes", renew_then_release)
    lease.start()
    assert released.wait(120)
    lease._thread.join(120)
    assert not errors, errors
    assert not (tmp_path / lease.key).exists()


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
            lease = ReaderLease(LocalStore(store), v1)
            assert lease.acquire()
            lease.keep()

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
