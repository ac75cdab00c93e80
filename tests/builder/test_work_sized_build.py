"""A build with partitions sized by work, through real Dagster runs: small parquet files grouped into one
partition, a large one cut into row-group ranges, several partitions per run, and every document published
exactly once."""

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shard_loader
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.lib.discovery import registered
from shard_assets.lib.layout import raw_record_key
from shard_assets.lib.records import RawRecord, get_record
from shard_assets.lib.spec import load_spec
from shard_assets.lib.state import registered_partition
from shard_assets.lib.store import LocalFolderStore
from shard_assets.runner import build_dataset
from tests.support.dagster_helpers import WORDS

pytestmark = pytest.mark.integration


def _documents(prefix: str, n: int) -> list[str]:
    return [
        f"{prefix} document {i}: " + " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(30 + i % 17))
        for i in range(n)
    ]


def test_grouped_and_sliced_partitions_build_every_document_once(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    big = _documents("big", 1200)
    pq.write_table(pa.table({"text": big}), src / "a_big.parquet", row_group_size=100)
    small = {f"small{i}": _documents(f"small{i}", 40) for i in range(4)}
    for name, docs in small.items():
        pq.write_table(pa.table({"text": docs}), src / f"{name}.parquet")
    budget = (src / "a_big.parquet").stat().st_size // 3
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'name = "work"\nval_fraction = 0.1\nmin_chars = 10\n[tokenizer]\nvocab_size = 300\n'
        f'[[sources]]\nname = "web"\nuri = "{src}/*.parquet"\n'
    )
    monkeypatch.setenv("SHARD_PARTITION_BYTES", str(budget))
    resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": StoreResource(root=str(tmp_path / "store"))}
    result = build_dataset(dg.DagsterInstance.ephemeral(), load_spec(spec), resources, workers=1)

    store = LocalFolderStore(tmp_path / "store")
    keys = list(registered(store, load_spec(spec)))
    slices = [k for k in keys if k.startswith("web.a_big.rg")]
    assert keys == [*slices, "web.small0"] and len(slices) >= 3
    assert [registered_partition(store, k).pieces[0].row_groups[0] for k in slices] == [
        int(k.rsplit("rg", 1)[1]) for k in slices
    ]
    grouped = registered_partition(store, "web.small0")
    assert [p.uri.rsplit("/", 1)[1] for p in grouped.pieces] == [f"small{i}.parquet" for i in range(4)]
    raw = get_record(store, raw_record_key("web.small0"), RawRecord, "test")
    assert raw.source_files == grouped.files() and [f.uri.rsplit("/", 1)[1] for f in raw.source_files] == [
        f"small{i}.parquet" for i in range(4)
    ]
    (first,) = get_record(store, raw_record_key(slices[0]), RawRecord, "test").source_files
    assert first.uri.endswith(
        f"a_big.parquet#row_groups=0-{registered_partition(store, slices[0]).pieces[0].row_groups[1]}"
    )
    assert result.partitions == len(slices) + 1 and result.left_out == 0
    assert len(result.run_ids) == 5  # raw documents, dedup, tokenizer, tokenize, publish: one run each for all of them
    assert result.documents["train"] + result.documents["val"] == len(big) + sum(len(d) for d in small.values())
    manifest = shard_loader.open_manifest(str(tmp_path / "store")).manifest
    assert manifest.splits["train"].documents == result.documents["train"]
