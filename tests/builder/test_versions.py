"""Immutable versions with real Dagster runs: a rebuild never rewrites a file an older version names, a
trainer mid-epoch on the old version finishes it, failed and removed inputs leave the next version, any
Dagster home builds into any store, and retention frees only what no kept version needs."""

import json
import os
import re
import stat
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

import shard_loader
from shard_assets.definitions import build_definitions
from shard_assets.defs.partitions import sync_partitions
from shard_assets.lib.retention import DAY, Policy, collect, plan_collection
from shard_assets.lib.spec import load_spec
from shard_assets.lib.store import LocalFolderStore
from shard_assets.runner import RunFailed, build_dataset
from shard_assets.execution.local import run_job
from tests.support.build_helpers import assert_every_manifest_whole
from tests.support.dagster_helpers import instance, tiny_dataset, tiny_resources, write_jsonl, write_spec

pytestmark = pytest.mark.integration


def _rebuild_partition(resources: dict, inst: dg.DagsterInstance, partition: str) -> str:
    """What the sensor and automation do for one changed file: re-ingest and re-tokenize it, then publish."""
    defs = build_definitions(resources)
    sync_partitions(inst, resources["store"].store(), resources["dataset"].spec())
    run_job(defs, "tokenize_job", inst, [partition])
    run_job(defs, "publish_job", inst)
    return shard_loader.open_manifest(str(resources["store"].root)).manifest.version


def _partitions(m) -> set[str]:
    return {e.partition for s in m.splits.values() for e in s.shards}


@pytest.fixture
def built(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path, files=2, docs=150)
    inst = instance()
    first = build_dataset(inst, load_spec(spec), resources)
    return tmp_path, spec, store, resources, inst, first


def test_a_rebuild_of_a_changed_file_keeps_every_older_version_whole_and_readable(built):
    tmp, _, store, resources, inst, first = built
    old_url = str(store / f"manifests/{first.version}.json")
    reader = shard_loader.TokenDataset(old_url, seq_len=16, batch_size=2)
    expected = len(reader)
    batches = iter(reader)
    consumed = [next(batches) for _ in range(expected // 2)]
    write_jsonl(tmp / "src" / "part0.jsonl", 170, seed=11)  # one raw file changes; the tokenizer does not
    second = _rebuild_partition(resources, inst, "web.part0")
    assert second != first.version
    consumed += list(batches)  # the trainer on the old version finishes its epoch
    assert len(consumed) == expected
    old, new = (
        shard_loader.open_manifest(str(store / f"manifests/{v}.json")).manifest for v in (first.version, second)
    )
    assert old.tokenizer.fingerprint == new.tokenizer.fingerprint
    changed = {e.npy.key for e in new.splits["train"].shards} - {e.npy.key for e in old.splits["train"].shards}
    assert changed and all("/web.part0-" in k for k in changed)  # a new key for new content, never a rewrite
    assert assert_every_manifest_whole(store) == 3


def test_published_files_are_readable_by_others(built):
    _, _, store, _, _, first = built
    m = shard_loader.open_manifest(str(store)).manifest
    umask = os.umask(0)
    os.umask(umask)
    for key in ["manifest.json", f"manifests/{first.version}.json", *(r.key for r in m.files())]:
        assert stat.S_IMODE((store / key).stat().st_mode) == 0o666 & ~umask, key


def test_a_bad_file_is_left_out_then_leaves_the_partition_set_when_deleted(built):
    tmp, spec, store, resources, inst, _ = built
    (tmp / "src" / "zz_bad.jsonl").write_text('{"text": "fine"}\n{broken\n')
    write_jsonl(tmp / "src" / "part2.jsonl", 90, seed=5)  # a good new file beside it
    second = build_dataset(inst, load_spec(spec), resources)
    opened = shard_loader.open_manifest(str(store))
    m, left_out = opened.manifest, opened.lineage()["left_out"]
    assert m.version == second.version and _partitions(m) == {"web.part0", "web.part1", "web.part2"}
    assert [x["partition"] for x in left_out] == ["web.zz_bad"]
    assert re.search(
        r"^ingest failed in run .*: SourceError: .*zz_bad.jsonl:2: not a JSON object", left_out[0]["reason"]
    ), left_out[0]["reason"]
    quarantine = store / "tokenized" / m.tokenizer.fingerprint / "quarantine" / "web.zz_bad.json"
    assert "zz_bad.jsonl:2: not a JSON object" in json.loads(quarantine.read_text())["error"]
    (tmp / "src" / "zz_bad.jsonl").unlink()
    third = build_dataset(inst, load_spec(spec), resources)
    assert third.left_out == 0 and "web.zz_bad" not in inst.get_dynamic_partitions("raw_files")
    assert not quarantine.exists()  # the report went with the partition
    assert third.version != second.version  # the same files, but nothing left out now: its own lineage says so
    assert shard_loader.open_manifest(str(store)).lineage()["left_out"] == []


def _two_sources_built(tmp_path: Path):
    """A spec over two sources, a and b, built once; `drop_b()` rewrites the spec without b."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_jsonl(tmp_path / "a" / "x.jsonl", 120, seed=1)
    write_jsonl(tmp_path / "b" / "y.jsonl", 120, seed=2)
    spec = tmp_path / "spec.toml"
    body = 'name = "two"\nval_fraction = 0.2\nmin_chars = 10\n[tokenizer]\nvocab_size = 300\n'
    source = '[[sources]]\nname = "{0}"\nuri = "{1}/{0}/*.jsonl"\nformat = "jsonl"\n'
    spec.write_text(body + source.format("a", tmp_path) + source.format("b", tmp_path))
    resources, inst = tiny_resources(spec, tmp_path / "store"), instance()
    build_dataset(inst, load_spec(spec), resources)
    return spec, lambda: spec.write_text(body + source.format("a", tmp_path)), resources, inst


def test_a_source_removed_from_the_spec_leaves_the_next_version(tmp_path):
    spec, drop_b, resources, inst = _two_sources_built(tmp_path)
    assert _partitions(shard_loader.open_manifest(str(tmp_path / "store")).manifest) == {"a.x", "b.y"}
    drop_b()
    build_dataset(inst, load_spec(spec), resources)
    opened = shard_loader.open_manifest(str(tmp_path / "store"))
    assert _partitions(opened.manifest) == {"a.x"}
    assert opened.lineage()["left_out"] == [{"partition": "b.y", "reason": "its source was removed from the spec"}]


def test_one_home_two_stores_and_two_homes_one_store(tmp_path):
    spec, _, _ = tiny_dataset(tmp_path, files=2, docs=100)
    home_a, home_b = instance(), instance()
    one = build_dataset(home_a, load_spec(spec), tiny_resources(spec, tmp_path / "one"))
    two = build_dataset(home_a, load_spec(spec), tiny_resources(spec, tmp_path / "two"))  # same home, another store
    again = build_dataset(
        home_b, load_spec(spec), tiny_resources(spec, tmp_path / "one")
    )  # another home, the first store
    assert one.version == two.version == again.version  # the same inputs give the same content wherever they are built
    for store in ("one", "two"):
        assert assert_every_manifest_whole(tmp_path / store) == 2


def test_gc_keeps_what_a_reader_of_an_old_version_needs_until_the_grace_period_ends(built):
    tmp, _, store, resources, inst, first = built
    write_jsonl(tmp / "src" / "part0.jsonl", 170, seed=11)
    second = _rebuild_partition(resources, inst, "web.part0")
    reader = shard_loader.TokenDataset(str(store / f"manifests/{first.version}.json"), seq_len=16, batch_size=2)
    objects, policy = LocalFolderStore(store), Policy(keep=1, max_age_s=0, grace_s=7 * DAY)
    within_grace = plan_collection(objects, policy)
    assert first.version in within_grace.kept_versions and within_grace.deletions == ()
    assert sum(1 for _ in reader) == len(reader)  # nothing it reads has gone
    later = time.time() + 8 * DAY
    dry_run = plan_collection(objects, policy, now=later)
    assert dry_run.kept_versions == (second,) and dry_run.dropped_versions == (first.version,)
    old = shard_loader.open_manifest(str(store / f"manifests/{first.version}.json")).manifest
    only_old = {r.key for r in old.files()} - {r.key for r in shard_loader.open_manifest(str(store)).manifest.files()}
    deleted = {k for k, _ in dry_run.deletions}
    assert only_old <= deleted and f"manifests/{first.version}.json" in deleted
    before = sum(p.stat().st_size for p in Path(store).rglob("*") if p.is_file())
    assert collect(objects, dry_run) == dry_run.bytes_freed > 0
    after = sum(p.stat().st_size for p in Path(store).rglob("*") if p.is_file())
    assert before - after == dry_run.bytes_freed  # freed exactly what the dry run promised
    assert assert_every_manifest_whole(store) == 2  # the kept version and manifest.json
    assert plan_collection(objects, policy, now=later).deletions == ()


def test_an_empty_val_split_never_goes_live(tmp_path):
    (tmp_path / "src").mkdir()
    write_jsonl(tmp_path / "src" / "a.jsonl", 60, seed=3)
    spec = write_spec(tmp_path / "spec.toml", f"{tmp_path}/src/*.jsonl", val_fraction=0.0001)
    with pytest.raises(RunFailed, match=r"publish_job failed.*splits_not_empty"):
        build_dataset(instance(), load_spec(spec), tiny_resources(spec, tmp_path / "store"))
    assert not (tmp_path / "store" / "manifest.json").exists()
    assert list((tmp_path / "store" / "manifests").glob("*.json"))  # written and audited, never made live


def test_the_verify_job_reads_every_byte_and_names_a_flipped_one(built):
    _, _, store, resources, inst, _ = built
    defs = build_definitions(resources)
    assert run_job(defs, "verify_job", inst).success
    shard = shard_loader.open_manifest(str(store)).manifest.splits["train"].shards[-1].npy
    data = bytearray((store / shard.key).read_bytes())
    data[-1] ^= 0xFF  # same size: only a full read can tell
    (store / shard.key).write_bytes(bytes(data))
    with pytest.raises(RunFailed, match=rf"verify_job failed.*{shard.key}: sha256 is"):
        run_job(defs, "verify_job", inst)


def test_a_stored_shard_flipped_in_place_is_replaced_by_the_next_build_never_published_again(built):
    _, spec, store, resources, inst, first = built
    shard = shard_loader.open_manifest(str(store)).manifest.splits["train"].shards[0].npy
    data = bytearray((store / shard.key).read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: the audit's sample may miss it, and a size check cannot see it
    (store / shard.key).write_bytes(bytes(data))
    again = build_dataset(inst, load_spec(spec), resources)
    assert again.version == first.version  # the same content: the key holds its own bytes again
    assert (store / shard.key).read_bytes() != bytes(data)
    assert run_job(build_definitions(resources), "verify_job", inst).success
    assert assert_every_manifest_whole(store) == 2


class _ListedInOrder(LocalFolderStore):
    """A folder store that lists keys in a given order (a bucket lists by key; which of two versions comes first
    then depends on their names)."""

    def __init__(self, root: Path, newest_listed_first: bool):
        super().__init__(root)
        self.newest_listed_first = newest_listed_first

    def list(self, prefix: str) -> list[tuple[str, int]]:
        found = super().list(prefix)
        live = json.loads((self.root / "manifest.json").read_text())["dataset"]["version"]
        return sorted(found, key=lambda kv: (live in kv[0]) != self.newest_listed_first)


@pytest.mark.parametrize("newest_listed_first", [True, False])
def test_gc_orders_two_versions_written_within_one_second_by_which_is_live(built, newest_listed_first):
    """A bucket's modification times are whole seconds: two publishes within one second tie, and the live one is the
    newer, whichever the listing names first."""
    tmp, _, store, resources, inst, first = built
    write_jsonl(tmp / "src" / "part0.jsonl", 170, seed=11)
    second = _rebuild_partition(resources, inst, "web.part0")
    same_second = float(int(time.time()))
    for version in (first.version, second):
        os.utime(store / f"manifests/{version}.json", (same_second, same_second))
    plan = plan_collection(
        _ListedInOrder(store, newest_listed_first), Policy(keep=1, max_age_s=0, grace_s=0), now=same_second + 60
    )
    assert plan.kept_versions == (second,) and plan.dropped_versions == (first.version,)


def test_gc_frees_an_abandoned_retokenization_after_the_grace_period(built):
    tmp, spec, store, resources, inst, first = built
    body = spec.read_text()
    spec.write_text(body.replace("vocab_size = 300", "vocab_size = 320"))  # a re-tokenization starts ...
    defs = build_definitions(resources)
    run_job(defs, "tokenizer_job", inst)
    abandoned = json.loads((store / "state" / "tokenizer.json").read_text())["fingerprint"]
    run_job(defs, "tokenize_job", inst, ["web.part0"], assets=["tokenized_shards"])
    spec.write_text(body)  # ... and is given up: the first tokenizer is current again
    run_job(build_definitions(resources), "tokenizer_job", inst)
    kept = shard_loader.open_manifest(str(store)).manifest.tokenizer.fingerprint
    assert json.loads((store / "state" / "tokenizer.json").read_text())["fingerprint"] == kept != abandoned
    objects, policy = LocalFolderStore(store), Policy(grace_s=7 * DAY)
    assert plan_collection(objects, policy).abandoned_tokenizers == ()  # within the grace period: nothing of it goes
    later = plan_collection(objects, policy, now=time.time() + 8 * DAY)
    assert later.abandoned_tokenizers == (abandoned,)
    deleted = {k for k, _ in later.deletions}
    held = {
        p.relative_to(store).as_posix()
        for folder in (f"tokenizers/{abandoned}", f"tokenized/{abandoned}")
        for p in (store / folder).rglob("*")
        if p.is_file()
    }
    assert held and held <= deleted and any("/parts/" in k for k in held)  # its file, records and shards
    assert not {k for k in deleted if kept in k}
    collect(objects, later)
    assert not [
        p for folder in ("tokenizers", "tokenized") for p in (store / folder / abandoned).rglob("*") if p.is_file()
    ]
    assert (
        assert_every_manifest_whole(store) == 2
        and build_dataset(inst, load_spec(spec), resources).version == first.version
    )


def test_the_tokenizer_trains_only_on_the_specs_current_sources(tmp_path):
    spec, drop_b, resources, inst = _two_sources_built(tmp_path)

    def trained_on() -> int:
        event = inst.get_latest_materialization_event(dg.AssetKey("tokenizer"))
        return event.asset_materialization.metadata["trained_on_partitions"].value

    assert trained_on() == 2
    drop_b()
    build_dataset(inst, load_spec(spec), resources)
    assert trained_on() == 1  # b's raw documents are still in the store, and no longer train the tokenizer


def test_the_verify_job_splits_every_partitions_raw_documents_again(built):
    _, _, store, resources, inst, _ = built
    import pyarrow as pa
    import pyarrow.parquet as pq

    lineage = shard_loader.open_manifest(str(store)).lineage()
    entry = next(f for s in lineage["sources"] for f in s["files"] if f["partition"] == "web.part0")
    raw = store / entry["raw_key"]
    table = pq.read_table(raw)
    hashes = table.column("doc_hash").to_numpy() & np.uint64(
        (1 << 11) - 1
    )  # every hash's top bits cleared: all would be val
    pq.write_table(table.set_column(1, "doc_hash", pa.array(hashes, pa.uint64())), raw)
    with pytest.raises(
        RunFailed, match=rf"verify_job failed.*web.part0: the hashes of {entry['raw_key']} send 0 documents to train"
    ):
        run_job(build_definitions(resources), "verify_job", inst)
