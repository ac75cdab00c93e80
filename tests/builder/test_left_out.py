"""What is not in a new version, and why (#26 items 3 and 4), with real Dagster runs over a local store: moved
source files give a new version (or, moved back, the old one) and never a failed publish; a good file that turns
unreadable, a new bad file and a vanished file are each left out with their reason (file and problem) in the
lineage and a quarantine record, and the old data of a file that turned unreadable is not republished as current
unless the spec says so (stale_partitions = "keep_last_good")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import shard_loader
from shard_assets.lib.spec import load_spec
from shard_assets.runner import build_dataset
from tests.support.build_helpers import assert_every_manifest_whole
from tests.support.dagster_helpers import instance, tiny_dataset, write_jsonl

pytestmark = pytest.mark.integration


def _partitions(store: Path) -> set[str]:
    m = shard_loader.open_manifest(str(store)).manifest
    return {e.partition for s in m.splits.values() for e in s.shards}


def _left_out(store: Path) -> dict[str, str]:
    return {x["partition"]: x["reason"] for x in shard_loader.open_manifest(str(store)).lineage()["left_out"]}


def _quarantine(store: Path, partition: str) -> dict | None:
    fp = shard_loader.open_manifest(str(store)).manifest.tokenizer.fingerprint
    path = store / "tokenized" / fp / "quarantine" / f"{partition}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _splits_record(store: Path) -> dict:
    fp = shard_loader.open_manifest(str(store)).manifest.tokenizer.fingerprint
    return json.loads((store / "tokenized" / fp / "splits.json").read_text())


def _read_all(store: Path) -> int:
    ds = shard_loader.TokenDataset(str(store), seq_len=16, batch_size=2)
    return sum(1 for _ in ds)


def test_moved_source_files_publish_a_new_version_and_moved_back_the_first_one(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path, files=2, docs=120)
    spec = load_spec(spec)
    inst = instance()
    first = build_dataset(inst, spec, resources)
    src = tmp_path / "src"
    for i in range(2):  # the same bytes under other names (os.rename keeps the modification time)
        os.rename(src / f"part{i}.jsonl", src / f"moved{i}.jsonl")
    moved = build_dataset(inst, spec, resources)  # failed with "already holds a different manifest under this version"
    assert moved.version != first.version and _partitions(store) == {"web.moved0", "web.moved1"}
    assert set(_left_out(store)) == {"web.part0", "web.part1"} and "vanished" in _left_out(store)["web.part0"]
    assert _read_all(store) > 0
    for i in range(2):
        os.rename(src / f"moved{i}.jsonl", src / f"part{i}.jsonl")
    back = build_dataset(inst, spec, resources)
    assert _partitions(store) == {"web.part0", "web.part1"}
    assert back.version == first.version  # the same files under the same names: the same version, written once
    assert assert_every_manifest_whole(store) == 3


def test_a_file_turning_unreadable_a_new_bad_file_and_a_vanished_file_each_leave_with_their_reason(tmp_path):
    spec_path, store, resources = tiny_dataset(tmp_path, files=3, docs=100)
    inst = instance()
    build_dataset(inst, load_spec(spec_path), resources)
    src = tmp_path / "src"
    (src / "part1.jsonl").write_bytes(
        b'{"text": "still fine here"}\n\xff\xfe not json at all\n'
    )  # was good: now unreadable
    (src / "part3.jsonl").write_text('{"text": "a new file"}\n{broken\n')  # a new bad file
    (src / "part2.jsonl").unlink()  # vanished
    second = build_dataset(inst, load_spec(spec_path), resources)
    assert _partitions(store) == {"web.part0"}  # part1's old data is not republished as if it were current
    assert second.left_out == 3
    left_out = _left_out(store)
    assert set(left_out) == {"web.part1", "web.part2", "web.part3"}
    assert "ingest failed" in left_out["web.part1"] and "part1.jsonl:2" in left_out["web.part1"]
    assert "ingest failed" in left_out["web.part3"] and "part3.jsonl:2: not a JSON object" in left_out["web.part3"]
    assert "part2.jsonl" in left_out["web.part2"] and "vanished" in left_out["web.part2"]
    for partition, reason in left_out.items():
        record = _quarantine(store, partition)
        assert record is not None and record["error"] == reason and record["stage"] == "select", partition
    assert _read_all(store) > 0
    third = build_dataset(inst, load_spec(spec_path), resources)
    assert third.version == second.version  # the same content: the version written once, with its first lineage
    assert set(_splits_record(store)["left_out"]) == {
        "web.part1",
        "web.part3",
    }  # a vanished file is named by the version it left
    assert _quarantine(store, "web.part2") is None
    write_jsonl(src / "part1.jsonl", 100, seed=1)  # repaired: back in, its report gone
    build_dataset(inst, load_spec(spec_path), resources)
    assert _partitions(store) == {"web.part0", "web.part1"} and _quarantine(store, "web.part1") is None
    assert assert_every_manifest_whole(store) >= 3


def test_the_spec_may_keep_the_last_good_build_of_a_file_that_turned_unreadable_named_as_stale(tmp_path):
    spec_path, store, resources = tiny_dataset(tmp_path, files=2, docs=100)
    spec_path.write_text(
        spec_path.read_text().replace("min_chars = 10\n", 'min_chars = 10\nstale_partitions = "keep_last_good"\n')
    )
    inst = instance()
    first = build_dataset(inst, load_spec(spec_path), resources)
    (tmp_path / "src" / "part1.jsonl").write_bytes(b"\xff\xfe\x00 not text\n")
    again = build_dataset(inst, load_spec(spec_path), resources)
    assert again.version == first.version and again.left_out == 0  # the last good build, kept on purpose
    splits = _splits_record(store)
    assert (
        list(splits["stale"]) == ["web.part1"]
        and "ingest failed" in splits["stale"]["web.part1"]
        and "last good build is kept" in splits["stale"]["web.part1"]
    )
