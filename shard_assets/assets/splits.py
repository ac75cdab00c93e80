"""Asset: the train/val splits over every partition: totals per split and a disjointness proof."""

import numpy as np

import dagster as dg

from ..automation import REBUILD
from ..documents import is_val
from ..errors import PublishError
from ..layout import part_record_key, raw_key, splits_record_key
from ..partitions import raw_files
from ..records import get_record, put_record
from ..resources import StoreResource
from ..sources.listing import split_partition_key
from ..store import ObjectStore
from .tokenized import tokenized_shards
from .tokenizer import current_tokenizer

CODE_VERSION = "splits-1"
SPLITS = ("train", "val")


def split_hashes(store: ObjectStore, partition: str, val_fraction: float) -> dict[str, np.ndarray]:
    """The document hashes of one partition that went to each split."""
    import pyarrow.parquet as pq

    with store.open_read(raw_key(*split_partition_key(partition))) as f:
        hashes = pq.read_table(f, columns=["doc_hash"]).column(0).to_numpy()
    val = is_val(hashes, val_fraction)
    return {"train": hashes[~val], "val": hashes[val]}


def overlap_count(store: ObjectStore, parts: dict[str, dict]) -> int:
    """How many document hashes sit in both splits, over all partitions."""
    by_split = {s: [] for s in SPLITS}
    for partition, record in parts.items():
        for split, h in split_hashes(store, partition, record["val_fraction"]).items():
            by_split[split].append(h)
    train, val = (np.unique(np.concatenate(by_split[s])) if by_split[s] else np.zeros(0, np.uint64) for s in SPLITS)
    return int(np.intersect1d(train, val, assume_unique=True).shape[0])


def read_part_records(store: ObjectStore, fingerprint: str, partitions: list[str]) -> dict[str, dict]:
    missing = [p for p in partitions if not store.exists(part_record_key(fingerprint, p))]
    if missing:
        raise PublishError(
            f"{len(missing)} of {len(partitions)} partitions are not tokenized with tokenizer {fingerprint}: "
            f"{missing[:10]}{' ...' if len(missing) > 10 else ''}; materialise tokenized_shards for them first"
        )
    return {p: get_record(store, part_record_key(fingerprint, p), "splits") for p in sorted(partitions)}


@dg.asset(
    deps=[tokenized_shards],
    code_version=CODE_VERSION,
    automation_condition=REBUILD,
    group_name="dataset",
    kinds={"json"},
    description="Token and document totals per split over every partition; train and val proven disjoint.",
)
def splits(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    objects = store.store()
    record = current_tokenizer(context.instance, objects)
    partitions = context.instance.get_dynamic_partitions(raw_files.name)
    if not partitions:
        raise PublishError("no raw_files partitions are registered; nothing to split")
    parts = read_part_records(objects, record.fingerprint, partitions)
    fractions = {r["val_fraction"] for r in parts.values()}
    if len(fractions) > 1:
        raise PublishError(f"partitions were tokenized with different val_fraction values {sorted(fractions)}; re-tokenize them")
    overlap = overlap_count(objects, parts)
    if overlap:
        raise PublishError(f"{overlap} documents are in both train and val; the split is broken")
    totals = {
        s: {
            "tokens": sum(r["shards"][s]["tokens"] for r in parts.values()),
            "documents": sum(r["shards"][s]["documents"] for r in parts.values()),
            "shards": len(parts),
        }
        for s in SPLITS
    }
    summary = {
        "tokenizer_fingerprint": record.fingerprint,
        "val_fraction": fractions.pop(),
        "partitions": sorted(parts),
        "totals": totals,
        "overlap": overlap,
    }
    put_record(objects, splits_record_key(record.fingerprint), summary)
    return dg.MaterializeResult(
        metadata={
            "partitions": len(parts),
            "val_fraction": summary["val_fraction"],
            "train_tokens": totals["train"]["tokens"],
            "val_tokens": totals["val"]["tokens"],
            "train_documents": totals["train"]["documents"],
            "val_documents": totals["val"]["documents"],
            "documents_in_both_splits": overlap,
        },
    )
