"""Which partitions the next version holds, and the proof that train and val are disjoint.

Partitions whose source left the spec, whose tokenization failed (quarantined) or that are not
tokenized with the current tokenizer are left out with a reason, or block the publish by policy.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from shard_loader.format import SPLITS

from .errors import PublishError
from .layout import ingest_failure_key, part_record_key, quarantine_key
from .records import READ_THREADS, IngestFailure, PartRecord, Quarantine, SplitsRecord, SplitTotals, get_records
from .spec import DatasetSpec
from .store import ObjectStore
from .text import is_val


@dataclass(frozen=True)
class Selection:
    parts: dict[str, PartRecord]
    left_out: dict[str, str]


def _present(store: ObjectStore, keys: dict[str, str]) -> set[str]:
    """Which partitions of {partition: record key} have their record, from one listing of the records' folder
    (not a request per partition)."""
    if not keys:
        return set()
    folder = next(iter(keys.values())).rsplit("/", 1)[0] + "/"
    listed = {key for key, _ in store.list(folder)}
    return {p for p, key in keys.items() if key in listed}


def select_partitions(store: ObjectStore, spec: DatasetSpec, fingerprint: str, partitions: list[str]) -> Selection:
    """The tokenized partitions of the spec's sources; the others with why they are left out."""
    sources = {s.name for s in spec.sources}
    kept = [p for p in sorted(partitions) if p.split(".", 1)[0] in sources]
    quarantined = sorted(_present(store, {p: quarantine_key(fingerprint, p) for p in kept}))
    tokenized = _present(store, {p: part_record_key(fingerprint, p) for p in kept}).difference(quarantined)
    why = {p: f"quarantined: tokenization failed in run {q.run_id}: {q.error}"
           for p, q in zip(quarantined, get_records(store, [quarantine_key(fingerprint, p) for p in quarantined], Quarantine, "splits"))}
    untokenized = [p for p in kept if p not in tokenized and p not in why]
    not_ingested = sorted(_present(store, {p: ingest_failure_key(p) for p in untokenized}))
    why |= {p: f"ingest failed in run {f.run_id}: {f.error}"
            for p, f in zip(not_ingested, get_records(store, [ingest_failure_key(p) for p in not_ingested], IngestFailure, "splits"))}
    left_out = {}
    for p in sorted(partitions):
        if p.split(".", 1)[0] not in sources:
            left_out[p] = "its source was removed from the spec"
        elif p not in tokenized:
            left_out[p] = why.get(p, f"not tokenized with tokenizer {fingerprint}")
    failed = [p for p in kept if p in left_out]
    ordered = [p for p in kept if p in tokenized]
    parts = dict(zip(ordered, get_records(store, [part_record_key(fingerprint, p) for p in ordered], PartRecord, "splits")))
    if failed and spec.on_partition_failure == "block":
        raise PublishError(
            f"{len(failed)} partitions cannot be published ({failed[:5]}{' ...' if len(failed) > 5 else ''}: {left_out[failed[0]]}); "
            f"on_partition_failure = \"block\" in {spec.origin}: fix or remove them, or set it to \"skip\""
        )
    if not parts:
        raise PublishError(f"no partition is tokenized with tokenizer {fingerprint}; materialise tokenized_shards first")
    return Selection(parts=parts, left_out=left_out)


def split_hashes(store: ObjectStore, part: PartRecord) -> dict[str, np.ndarray]:
    """The document hashes of one partition that went to each split (8 bytes a document, read from its raw parquet)."""
    import pyarrow.parquet as pq

    with store.open_read(part.raw.key) as f:
        hashes = pq.ParquetFile(f).read(columns=["doc_hash"], use_threads=False).column(0).to_numpy()  # no pool per file: half the time
    val = is_val(hashes, part.val_fraction)
    return {"train": hashes[~val], "val": hashes[val]}


def overlap_count(store: ObjectStore, parts: dict[str, PartRecord]) -> int:
    """How many document hashes sit in both splits, over all partitions (their parquet read READ_THREADS at a time)."""
    by_split: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
    with ThreadPoolExecutor(READ_THREADS) as pool:
        for hashes in pool.map(lambda part: split_hashes(store, part), parts.values()):
            for split, h in hashes.items():
                by_split[split].append(h)
    train, val = (np.unique(np.concatenate(by_split[s])) if by_split[s] else np.zeros(0, np.uint64) for s in SPLITS)
    return int(np.intersect1d(train, val, assume_unique=True).shape[0])


def summarise(fingerprint: str, selection: Selection, overlap: int) -> SplitsRecord:
    """The splits record: totals per split over the selected partitions."""
    parts = selection.parts
    fractions = {p.val_fraction for p in parts.values()}
    if len(fractions) > 1:
        raise PublishError(f"partitions were tokenized with different val_fraction values {sorted(fractions)}; re-tokenize them")
    totals = {
        s: SplitTotals(
            tokens=sum(p.shards[s].tokens for p in parts.values()),
            documents=sum(p.shards[s].documents for p in parts.values()),
            shards=sum(1 for p in parts.values() if p.shards[s].documents),
        )
        for s in SPLITS
    }
    return SplitsRecord(
        tokenizer_fingerprint=fingerprint, val_fraction=fractions.pop(), partitions=tuple(sorted(parts)),
        totals=totals, overlap=overlap, left_out=selection.left_out,
    )
