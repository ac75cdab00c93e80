"""splits_are_disjoint from per-partition records (#26 item 11): a writer's split proof counts the documents the
rule sends to each split and the extremes of their hash bits; the check reads only records (a store that refuses
every read still passes proven records), finds a proof that does not hold, and proves records written before proofs
existed from their raw parquet."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_assets.lib.errors import BuildError
from shard_assets.lib.records import FileRef, PartRecord, RawRecord, ShardEntry, SourceFileRef
from shard_assets.lib.splits import CUT_SCALE, overlap_count, proof_problem, prove_split, unproven_documents
from shard_assets.lib.store import LocalFolderStore
from shard_assets.lib.text import is_val

VF = 0.2


def _raw(folder: Path, name: str, hashes: np.ndarray) -> Path:
    path = folder / "raw" / "web" / f"{name}-0123456789abcdef.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"doc_hash": hashes}), path, row_group_size=300)
    return path


def _part(name: str, proof, train: int, val: int) -> PartRecord:
    source = SourceFileRef(f"/data/{name}.jsonl", "mtime:1:2", 2)
    raw = RawRecord(
        f"web.{name}",
        "web",
        source,
        f"raw/web/{name}-0123456789abcdef.parquet",
        "ab" * 32,
        train + val,
        "v",
        "run",
        (source,),
    )
    shards = {
        s: ShardEntry(
            f"web.{name}",
            n,
            n,
            FileRef(f"t/{s}/{name}.npy", 128 + 2 * n, "cd" * 32),
            FileRef(f"t/{s}/{name}.bin", 8 * n + 8, "ef" * 32),
        )
        for s, n in (("train", train), ("val", val))
    }
    return PartRecord(f"web.{name}", "0123456789abcdef", VF, raw, shards, 9, "v", "run", "tokenized-3", None, proof)


def test_a_proof_counts_each_split_and_bounds_its_hash_bits(tmp_path):
    hashes = np.random.default_rng(1).integers(0, 2**64, size=1000, dtype=np.uint64)
    proof = prove_split(_raw(tmp_path, "a", hashes), VF)
    val = is_val(hashes, VF)
    assert (proof.train_documents, proof.val_documents) == (int((~val).sum()), int(val.sum()))
    assert proof.val_max_bits * CUT_SCALE < VF <= proof.train_min_bits * CUT_SCALE
    assert proof.val_max_bits == int((hashes[val] >> np.uint64(11)).max()) and proof.train_min_bits == int(
        (hashes[~val] >> np.uint64(11)).min()
    )
    with pytest.raises(BuildError, match="the writer put .* but their hashes send"):
        prove_split(
            tmp_path / "raw" / "web" / "a-0123456789abcdef.parquet",
            VF,
            {"train": proof.train_documents + 1, "val": proof.val_documents - 1},
        )


class _NoReads(LocalFolderStore):
    def open_read(self, key):
        raise AssertionError(f"read {key}")

    def get_file(self, key, path):
        raise AssertionError(f"read {key}")


def test_the_check_costs_the_records_and_names_each_proof_that_does_not_hold(tmp_path):
    proof = prove_split(_raw(tmp_path, "a", np.random.default_rng(2).integers(0, 2**64, size=500, dtype=np.uint64)), VF)
    good = _part("a", proof, proof.train_documents, proof.val_documents)
    assert overlap_count(_NoReads(tmp_path), {"web.a": good}) == 0  # records only: no document is read
    cases = {
        "counts": _part("a", proof, proof.train_documents - 1, proof.val_documents + 1),
        "val above the cut": replace(good, split_proof=replace(proof, val_max_bits=int(VF / CUT_SCALE) + 1)),
        "train below the cut": replace(good, split_proof=replace(proof, train_min_bits=int(VF / CUT_SCALE) - 1)),
        "another fraction": replace(good, split_proof=replace(proof, val_fraction=0.5)),
    }
    messages = {name: proof_problem(part, part.split_proof) for name, part in cases.items()}
    assert "its shards hold" in messages["counts"] and "not below val_fraction" in messages["val above the cut"]
    assert (
        "below val_fraction" in messages["train below the cut"]
        and "at val_fraction 0.5" in messages["another fraction"]
    )
    parts = {f"web.{n}": p for n, p in cases.items()} | {"web.a": good}
    assert set(unproven_documents(_NoReads(tmp_path), parts)) == {f"web.{n}" for n in cases}
    assert overlap_count(_NoReads(tmp_path), parts) == sum(
        sum(p.shards[s].documents for s in ("train", "val")) for p in cases.values()
    )


def test_a_record_written_before_proofs_existed_is_proven_from_its_raw_parquet(tmp_path):
    hashes = np.random.default_rng(3).integers(0, 2**64, size=800, dtype=np.uint64)
    proof = prove_split(_raw(tmp_path, "old", hashes), VF)
    older = _part("old", None, proof.train_documents, proof.val_documents)
    assert overlap_count(LocalFolderStore(tmp_path), {"web.old": older}) == 0
    wrong = _part("old", None, proof.train_documents + 5, proof.val_documents - 5)
    assert overlap_count(LocalFolderStore(tmp_path), {"web.old": wrong}) == proof.train_documents + proof.val_documents
