"""Discovery in bounded steps: a budget per step, a cursor of a few bytes that resumes, vanished and changed
files, and (system tier) thousands of tiny files registered by the sensor across ticks."""

import json
import os
import threading
from dataclasses import replace

import dagster as dg
import pytest

from shard_assets.defs.partitions import RANGE_TAGS, PARTITIONS_PER_RUN, sync_partitions
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.defs import sensors
from shard_assets.defs.sensors import TICK_BUDGET, raw_files_sensor
from shard_assets.lib.discovery import DiscoveryBudget, DiscoveryCursor, discover, load_layout, registered
from shard_assets.lib.errors import RecordError
from shard_assets.lib.layout import PARTITIONS_PREFIX, discovery_index_key
from shard_assets.lib.partitioning import PartitionPolicy
from shard_assets.lib.spec import load_spec, parse_spec
from shard_assets.lib.state import registered_partition, registered_partitions
from shard_assets.lib.store import LocalFolderStore
from tests.support.dagster_helpers import instance, write_spec


def _corpus(tmp_path, n: int):
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    for i in range(n):
        (src / f"f{i:05d}.jsonl").write_text(json.dumps({"text": f"document {i}"}) + "\n")
    spec = parse_spec({"name": "t", "sources": [{"name": "web", "uri": f"{src}/*.jsonl", "format": "jsonl"}]}, "test")
    return src, spec, LocalFolderStore(tmp_path / "store")


def test_a_budgeted_step_resumes_from_its_cursor_until_the_pass_is_complete(tmp_path):
    _, spec, store = _corpus(tmp_path, 25)
    cursor, steps, changed = DiscoveryCursor(), [], []
    while True:
        step = discover(store, spec, PartitionPolicy(), cursor, DiscoveryBudget(max_files=10))
        steps.append(step.files)
        assert (
            step.pass_complete or step.cursor.after == f"file://{tmp_path}/src/f{sum(steps) - 1:05d}.jsonl"
        )  # a few bytes: the last file done
        changed += step.changed
        cursor = step.cursor
        if step.pass_complete:
            break
    assert steps == [10, 10, 5] and sorted(changed) == [f"web.f{i:05d}" for i in range(25)]
    assert registered_partitions(store) == sorted(changed)
    assert registered_partition(store, "web.f00003").pieces[0].uri == f"file://{tmp_path}/src/f00003.jsonl"
    again = discover(store, spec, PartitionPolicy())
    assert again.pass_complete and again.changed == [] and again.files == 25


def test_changed_and_vanished_files_are_found_and_unchanged_ones_cost_nothing(tmp_path):
    src, spec, store = _corpus(tmp_path, 6)
    discover(store, spec, PartitionPolicy())
    (src / "f00002.jsonl").write_text(json.dumps({"text": "a longer, changed document"}) + "\n")
    (src / "f00004.jsonl").unlink()
    step = discover(store, spec, PartitionPolicy())
    assert (step.changed, step.removed) == (["web.f00002"], ["web.f00004"])
    assert "web.f00004" not in registered_partitions(store) and "web.f00004" not in registered(store, spec)


def test_grouped_partitions_keep_their_keys_when_files_are_added(tmp_path):
    src, spec, store = _corpus(tmp_path, 10)
    size = (src / "f00000.jsonl").stat().st_size
    policy = PartitionPolicy(size * 4)
    discover(store, spec, policy)
    before = registered(store, spec)
    assert list(before) == ["web.f00000", "web.f00004", "web.f00008"]
    for name in ("a_first.jsonl", "f00010.jsonl", "f00011.jsonl", "f00012.jsonl"):
        (src / name).write_text(json.dumps({"text": "new"}) + "\n")
    step = discover(store, spec, policy)
    after = registered(store, spec)
    assert {k: after[k] for k in ("web.f00000", "web.f00004")} == {k: before[k] for k in ("web.f00000", "web.f00004")}
    assert sorted(step.changed) == ["web.f00008", "web.f00011"]  # the partition filling up, then a new one


def test_a_broken_index_is_named_with_what_to_do(tmp_path):
    _, spec, store = _corpus(tmp_path, 2)
    discover(store, spec, PartitionPolicy())
    store.put_bytes(discovery_index_key("web"), b'{"open": null, "partitions": {"web.x": [["only-a-uri"]]}}')
    with pytest.raises(
        RecordError,
        match=(
            r"state/discovery/web.json.*not a discovery index: "
            r"delete state/discovery/web.json to register source 'web' afresh"
        ),
    ):
        load_layout(store, "web")
    store.put_bytes(
        discovery_index_key("web"),
        b'{"source": "web", "open": null, "partitions": {"web.x": [{"uri": 5, "fingerprint": "f"}]}}',
    )
    with pytest.raises(RecordError, match=r"state/discovery/web.json.partitions.web.x\[0\].uri: expected str, got 5"):
        load_layout(store, "web")


def test_an_index_in_the_pre_record_layout_is_refused_with_what_to_do(tmp_path):
    """The layout before indexes were records (`{"open", "partitions": {key: [[uri, ...]]}}`) has no second reader:
    it is refused like any index that is not a record, naming the key to delete (discovery registers afresh)."""
    _, spec, store = _corpus(tmp_path, 3)
    discover(store, spec, PartitionPolicy())
    before = registered(store, spec)
    rows = {k: [[p.uri, p.fingerprint, p.size, None, None] for p in r.pieces] for k, r in before.items()}
    store.put_bytes(
        discovery_index_key("web"), json.dumps({"open": None, "partitions": rows}, separators=(",", ":")).encode()
    )
    with pytest.raises(RecordError, match=r"delete state/discovery/web.json to register source 'web' afresh"):
        load_layout(store, "web")
    store.delete(discovery_index_key("web"))
    discover(store, spec, PartitionPolicy())
    assert registered(store, spec) == before  # registered afresh: the same partitions, reading the same files


class MeetingStore(LocalFolderStore):
    """A store whose registration writes wait for one another: written one after another, they would never meet."""

    def __init__(self, root, registrations: int):
        super().__init__(root)
        self.meeting, self.written, self._lock = threading.Barrier(registrations), [], threading.Lock()

    def write_bytes(self, key, data):
        if key.startswith(PARTITIONS_PREFIX):
            self.meeting.wait(timeout=120)
        super().write_bytes(key, data)
        with self._lock:
            self.written.append(key)


def test_registrations_are_written_at_once_and_the_index_only_after_all_of_them(tmp_path):
    _, spec, _ = _corpus(tmp_path, 5)
    store = MeetingStore(tmp_path / "store", registrations=5)
    assert discover(store, spec, PartitionPolicy()).registered == 5
    assert len(store.written) == 6 and store.written[-1] == discovery_index_key(
        "web"
    )  # a step cut short is redone, not lost


def test_a_cursor_naming_a_source_that_left_the_spec_starts_a_new_pass(tmp_path):
    _, spec, store = _corpus(tmp_path, 3)
    step = discover(store, spec, PartitionPolicy(), DiscoveryCursor("gone", "file:///zzz"))
    assert step.pass_complete and len(step.changed) == 3


def test_a_sensor_cursor_from_elsewhere_starts_a_new_pass():
    assert DiscoveryCursor.from_json(None) == DiscoveryCursor.from_json('{"web/a.jsonl": "etag"}"') == DiscoveryCursor()
    assert DiscoveryCursor.from_json(DiscoveryCursor("web", "x").to_json()) == DiscoveryCursor("web", "x")


def test_the_build_command_path_mirrors_grouped_partitions_into_dagster(tmp_path, monkeypatch):
    src, _, store = _corpus(tmp_path, 9)
    spec = load_spec(write_spec(tmp_path / "spec.toml", f"{src}/*.jsonl"))
    monkeypatch.setenv("SHARD_PARTITION_BYTES", str((src / "f00000.jsonl").stat().st_size * 3))
    inst = instance()
    changed, removed, keys = sync_partitions(inst, store, spec)
    assert (
        keys == ["web.f00000", "web.f00003", "web.f00006"] == inst.get_dynamic_partitions("raw_files") == changed
        and removed == []
    )


@pytest.mark.system
def test_the_sensor_registers_3000_tiny_files_across_bounded_ticks(tmp_path, monkeypatch):
    """The production budget (20,000 files or 20 s a tick) at 30,000 files is measured by benchmarks/bench_scale.py;
    here a budget of 1,000 files and no clock cuts 3,000 files into exactly 3 ticks, on any machine."""
    budget = replace(TICK_BUDGET, max_files=1_000, seconds=None)
    monkeypatch.setattr(sensors, "TICK_BUDGET", budget)
    files = 3_000
    src = tmp_path / "src"
    src.mkdir()
    for i in range(files):
        with open(src / f"f{i:05d}.jsonl", "w") as f:
            f.write('{"text": "a tiny document"}\n')
    spec = write_spec(tmp_path / "spec.toml", f"{src}/*.jsonl")
    resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": StoreResource(root=str(tmp_path / "store"))}
    inst, cursor, ticks = instance(), None, []
    while True:
        result = raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources, cursor=cursor))
        cursor = result.cursor
        ticks.append(result)
        assert len(cursor) < 200 + len(str(src))  # where to resume, not a map of every file
        if cursor == DiscoveryCursor().to_json():
            break
        assert len(ticks) < 10
    assert len(ticks) == files // budget.max_files  # the budget cut the pass into ticks
    assert len(inst.get_dynamic_partitions("raw_files")) == files
    order = inst.get_dynamic_partitions("raw_files")
    position = {k: i for i, k in enumerate(order)}
    spans = [
        (r.tags.get(RANGE_TAGS[0], r.partition_key), r.tags.get(RANGE_TAGS[1], r.partition_key))
        for t in ticks
        for r in t.run_requests
    ]
    covered = [order[i] for first, last in spans for i in range(position[first], position[last] + 1)]
    assert sorted(covered) == sorted(order)  # every partition in exactly one run
    assert len(covered) / len(spans) > PARTITIONS_PER_RUN - 1  # runs are full but at tick boundaries
    steady = raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources, cursor=cursor))
    assert steady.run_requests == [] and os.listdir(tmp_path / "store" / "state" / "partitions").__len__() == 256


@pytest.mark.integration
def test_discovery_over_s3_lists_without_reading_any_object_and_fingerprints_by_etag(seaweed, tmp_path):
    """A bucket on a real S3 server (SeaweedFS) behind a counting proxy: registering its files makes listing
    requests only, no GET of an object (whole or ranged), and each fingerprint is the object's ETag."""
    from concurrent.futures import ThreadPoolExecutor

    from shard_loader.storage.s3_client import S3Settings, fsspec_options
    from tests.support.s3_proxy import S3Proxy
    from tests.support.seaweedfs import READER, WRITER

    seaweed.create_bucket("discovery")
    writer = seaweed.client(WRITER)
    bodies = {f"src/f{i:04d}.jsonl": json.dumps({"text": f"document {i}"}).encode() + b"\n" for i in range(300)}
    bodies |= {f"src/large{i}.jsonl": os.urandom(4 << 20) for i in range(2)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: writer.put_object(Bucket="discovery", Key=kv[0], Body=kv[1]), bodies.items()))
    proxy = S3Proxy(int(seaweed.url.rsplit(":", 1)[1]))
    try:
        options = fsspec_options(
            S3Settings(endpoint_url=proxy.url, access_key_id=READER[0], secret_access_key=READER[1], region="us-east-1")
        )
        source = {
            "name": "web",
            "uri": "s3://discovery/src/*.jsonl",
            "format": "jsonl",
            "max_documents": 10,
            "storage_options": options,
        }
        spec = parse_spec({"name": "t", "sources": [source]}, "test")
        store = LocalFolderStore(tmp_path / "store")
        step = discover(store, spec, PartitionPolicy())
        assert step.pass_complete and len(step.changed) == len(bodies)
        assert sum(proxy.gets.values()) == 0, proxy.gets.most_common(3)  # not one object read, whole or ranged
        for key in ("src/f0007.jsonl", "src/large1.jsonl"):
            etag = writer.head_object(Bucket="discovery", Key=key)["ETag"].strip('"')
            (piece,) = registered_partition(store, f"web.{key[4:-6]}").pieces
            assert piece.fingerprint == f"etag:{etag}:{len(bodies[key])}" and piece.size == len(bodies[key])
        writer.put_object(Bucket="discovery", Key="src/new.jsonl", Body=b'{"text": "new"}\n')
        writer.put_object(Bucket="discovery", Key="src/f0001.jsonl", Body=b'{"text": "changed"}\n')
        again = discover(
            store, spec, PartitionPolicy()
        )  # the same process, as the sensor's ticks: a fresh listing, not a cached one
        assert sorted(again.changed) == ["web.f0001", "web.new"] and sum(proxy.gets.values()) == 0
    finally:
        proxy.close()


def test_a_hub_file_is_fingerprinted_by_its_lfs_sha256_or_blob_id_from_its_listing_entry():
    """hf:// cannot be reached from here: the Hub's tree-API entries (the shape it answers, recorded) go through
    huggingface_hub's own conversion into HfFileSystem listing entries, which fingerprint_from_info reads."""
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.hf_file_system import _cache_info_from_path_info

    from shard_assets.lib.sources.listing import fingerprint_from_info

    sha = "6c1d4b0b7e5c3f1e0b8a9d2c4e6f8a0b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f"
    lfs_entry = {
        "type": "file",
        "oid": "3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c",
        "size": 2_080_374_784,
        "path": "global-shard_01_of_10/shard_00000000.parquet",
        "lfs": {"oid": sha, "size": 2_080_374_784, "pointerSize": 135},
    }
    small_entry = {
        "type": "file",
        "oid": "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
        "size": 1_234,
        "path": "README.md",
    }
    repo = "datasets/mlfoundations/dclm-baseline-1.0-parquet"
    lfs_info, small_info = (
        _cache_info_from_path_info(RepoFile(**e), f"{repo}/{e['path']}") for e in (lfs_entry, small_entry)
    )
    assert fingerprint_from_info(lfs_info) == f"sha256:{sha}:2080374784"
    assert fingerprint_from_info(small_info) == "blob:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567:1234"


def test_discovery_repairs_an_instance_whose_first_creation_was_killed(tmp_path):
    """A SIGKILL while Dagster first creates a SQLite instance can leave its event index database created but
    empty (found after a killed first build): Dagster opens it as it is, without the dynamic partitions table,
    so every later run failed; the next build or discover migrates it."""
    from dagster._core.instance.ref import InstanceRef

    _, spec, store = _corpus(tmp_path, 3)
    home = tmp_path / "home"
    home.mkdir()
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))):
        pass
    for leftover in (home / "history/runs").glob(
        "index.db*"
    ):  # the state the kill left: an index database with no table
        leftover.unlink()
    (home / "history/runs/index.db").touch()
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as inst:
        with pytest.raises(dg.DagsterInvalidInvocationError, match="dagster instance migrate"):
            inst.get_dynamic_partitions("raw_files")
        assert sync_partitions(inst, store, spec)[2] == ["web.f00000", "web.f00001", "web.f00002"]
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as inst:
        assert inst.get_dynamic_partitions("raw_files") == ["web.f00000", "web.f00001", "web.f00002"]
