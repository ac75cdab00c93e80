"""Partitions sized by work: grouping small files, slicing large parquet files by row groups, keys that stay
put when files are added, and runs over adjacent partitions."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_assets.defs.partitions import partition_policy
from shard_assets.lib.errors import RecordError, SpecError
from shard_assets.lib.partitioning import (
    FilePiece,
    PartitionPolicy,
    PartitionRecord,
    SourceLayout,
    contiguous_runs,
    row_group_slices,
)
from shard_assets.lib.records import RawRecord, from_dict, to_json
from shard_assets.lib.sources.listing import SourceFile, list_source_files
from shard_assets.lib.sources.readers import iter_document_batches, parquet_row_group_bytes
from shard_assets.lib.spec import parse_spec


def _file(name: str, size: int, fp: str = "v1") -> SourceFile:
    return SourceFile("web", name, f"/src/{name}.jsonl", f"mtime:{fp}:{size}", size)


def _no_row_groups(_file):
    return None


def _layout() -> SourceLayout:
    return SourceLayout.empty("web")


def test_without_a_budget_every_file_is_its_own_partition_named_after_it():
    layout = _layout()
    for name in ("part0", "part1"):
        layout.add(_file(name, 10_000), PartitionPolicy(), _no_row_groups)
    assert {k: [p.uri for p in r.pieces] for k, r in layout.records().items()} == {
        "web.part0": ["/src/part0.jsonl"],
        "web.part1": ["/src/part1.jsonl"],
    }
    assert (
        layout.record("web.part0").fingerprint == "mtime:v1:10000"
    )  # a one-file partition keeps its file's fingerprint


def test_small_files_share_a_partition_up_to_the_budget_and_new_files_never_rename_old_partitions():
    policy, layout = PartitionPolicy(250), _layout()
    for i in range(5):
        layout.add(_file(f"f{i}", 100), policy, _no_row_groups)
    before = layout.records()
    assert {k: len(r.pieces) for k, r in before.items()} == {"web.f0": 2, "web.f2": 2, "web.f4": 1}
    touched = layout.add(_file("a_new_file_sorting_first", 100), policy, _no_row_groups)
    assert touched == {"web.f4"}  # it joins the partition still filling up
    assert {k: r for k, r in layout.records().items() if k != "web.f4"} == {
        k: r for k, r in before.items() if k != "web.f4"
    }
    assert layout.add(_file("g", 100), policy, _no_row_groups) == {"web.g"}  # web.f4 is full: a new partition


def test_a_changed_file_changes_only_its_partition_and_a_vanished_one_leaves_it():
    policy, layout = PartitionPolicy(250), _layout()
    for i in range(4):
        layout.add(_file(f"f{i}", 100), policy, _no_row_groups)
    assert layout.update(_file("f1", 120, fp="v2"), policy, _no_row_groups) == {"web.f0"}
    assert layout.fingerprint_of("/src/f1.jsonl") == "mtime:v2:120" and layout.record("web.f0").size == 220
    assert layout.remove("/src/f2.jsonl") == {"web.f2"} and [p.uri for p in layout.record("web.f2").pieces] == [
        "/src/f3.jsonl"
    ]
    assert layout.remove("/src/f3.jsonl") == {"web.f2"} and layout.record("web.f2") is None


def test_a_key_taken_by_a_partition_whose_first_file_left_gets_a_suffix():
    policy, layout = PartitionPolicy(250), _layout()
    for name in ("a", "b"):
        layout.add(_file(name, 100), policy, _no_row_groups)
    layout.remove("/src/a.jsonl")  # web.a now holds only b
    layout.add(_file("c", 200), policy, _no_row_groups)  # web.a is full: c opens web.c
    assert layout.add(_file("a", 100), policy, _no_row_groups) == {"web.a.2"}


def test_row_group_slices_cut_at_the_budget():
    assert row_group_slices([40, 40, 40, 40, 40], 100) == [(0, 3), (3, 5)]
    assert row_group_slices([300, 10], 100) == [(0, 1), (1, 2)]
    assert row_group_slices([], 100) == []


def test_policy_parses_byte_counts_and_names_a_bad_one():
    assert PartitionPolicy.parse("256MB", "x").target_bytes == 256_000_000
    assert PartitionPolicy.parse("2GiB", "x").target_bytes == 2 << 30
    assert PartitionPolicy.parse("0", "x").target_bytes == 0
    with pytest.raises(SpecError, match=r"SHARD_PARTITION_BYTES: '1.5GB' is not a byte count"):
        PartitionPolicy.parse("1.5GB", "SHARD_PARTITION_BYTES")


def test_the_spec_sets_the_partition_size_and_the_environment_overrides_it(monkeypatch):
    source = [{"name": "web", "uri": "/src/*.jsonl", "format": "jsonl"}]
    spec = parse_spec({"name": "t", "partition_bytes": "2GB", "sources": source}, "t.toml")
    assert spec.partition_bytes == 2_000_000_000
    assert parse_spec({"name": "t", "partition_bytes": 1 << 20, "sources": source}, "t.toml").partition_bytes == 1 << 20
    assert parse_spec({"name": "t", "sources": source}, "t.toml").partition_bytes == 0
    monkeypatch.delenv("SHARD_PARTITION_BYTES", raising=False)
    assert partition_policy(spec).target_bytes == 2_000_000_000
    monkeypatch.setenv("SHARD_PARTITION_BYTES", "64MB")
    assert partition_policy(spec).target_bytes == 64_000_000
    monkeypatch.setenv("SHARD_PARTITION_BYTES", "0")
    assert partition_policy(spec).target_bytes == 0
    for bad, message in [
        ("2 TB", r"t.toml: partition_bytes: '2 TB' is not a byte count"),
        (-1, r"t.toml.partition_bytes: must be at least 0"),
        (1.5, r"t.toml.partition_bytes: expected int"),
    ]:
        with pytest.raises(SpecError, match=message):
            parse_spec({"name": "t", "partition_bytes": bad, "sources": source}, "t.toml")


def test_contiguous_runs_hold_only_selected_adjacent_keys():
    order = ["a", "b", "c", "d", "e", "f"]
    assert contiguous_runs(["a", "b", "d", "e", "f"], order, 2) == [["a", "b"], ["d", "e"], ["f"]]
    assert contiguous_runs([], order, 2) == []
    sizes = {"a": 10, "b": 10, "c": 500, "d": 10, "e": 10, "f": 10}
    assert contiguous_runs(order, order, 32, sizes, max_bytes=100) == [
        ["a", "b"],
        ["c"],
        ["d", "e", "f"],
    ]  # a large partition runs alone


def test_a_registration_round_trips_through_json():
    record = PartitionRecord(
        "web", (FilePiece("/a.parquet", "etag:x:9", 9, (2, 5)), FilePiece("/b.jsonl", "mtime:1:3", 3))
    )
    assert from_dict(PartitionRecord, json.loads(to_json(record)), "test") == record
    assert record.lineage().uri == "/a.parquet#row_groups=2-5 (+1 more files)" and record.size == 12


def test_a_raw_record_lists_every_file_it_read_and_an_older_record_without_the_list_still_reads():
    registration = PartitionRecord(
        "web", (FilePiece("/a.parquet", "etag:x:9", 9, (2, 5)), FilePiece("/b.jsonl", "mtime:1:3", 3))
    )
    raw = RawRecord(
        "web.a", "web", registration.lineage(), "raw/web/a-0.parquet", "0" * 64, 7, "v", "run", registration.files()
    )
    assert [f.uri for f in raw.source_files] == ["/a.parquet#row_groups=2-5", "/b.jsonl"]
    assert from_dict(RawRecord, json.loads(to_json(raw)), "raw/web/a.json") == raw
    older = {k: v for k, v in json.loads(to_json(raw)).items() if k != "source_files"}
    assert from_dict(RawRecord, older, "raw/web/a.json").source_files == ()
    bad = {**json.loads(to_json(raw)), "source_files": [{"uri": "/a", "fingerprint": "f", "size": "9"}]}
    with pytest.raises(RecordError, match=r"raw/web/a.json.source_files\[0\].size: expected int, got '9'"):
        from_dict(RawRecord, bad, "raw/web/a.json")


def test_a_large_parquet_file_is_sliced_by_row_groups_and_each_slice_reads_its_rows(tmp_path):
    texts = [f"document number {i} " * 20 for i in range(1000)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "big.parquet", row_group_size=100)
    spec = parse_spec({"name": "t", "sources": [{"name": "web", "uri": str(tmp_path / "big.parquet")}]}, "test")
    source = spec.sources[0]
    (big,) = list_source_files(source)
    sizes = parquet_row_group_bytes(source, big)
    assert len(sizes) == 10
    layout = _layout()
    touched = layout.add(big, PartitionPolicy(sum(sizes[:4])), lambda f: parquet_row_group_bytes(source, f))
    assert sorted(touched) == ["web.big.rg0", "web.big.rg4", "web.big.rg8"]
    read = []
    for key in sorted(touched, key=lambda k: int(k.rsplit("rg", 1)[1])):
        (piece,) = layout.record(key).pieces
        read += [d for b in iter_document_batches(source, piece, 64) for d in b]
    assert read == texts  # every row once, in order
