"""Build one partition's shards with one tokenizer: raw parquet from the store → encoded → shard files
under content-hashed keys in the store → the partition's PartRecord. No Dagster here."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from shard_loader.format import FileRef, ShardEntry, ShardWriter, shard_base_key

from .encoders import Encoder
from .encoding import TokenizeStats, tokenize_partition
from .layout import part_record_key
from .publish import put_immutable
from .records import PartRecord, RawRecord, TokenizerRecord, put_record
from .store import ObjectStore


@dataclass(frozen=True)
class BuiltPartition:
    record: PartRecord
    stats: TokenizeStats
    writers: dict[str, ShardWriter]  # closed; their files stay in the work folder until it is removed


def _entry(store: ObjectStore, w: ShardWriter, fingerprint: str, split: str, partition: str) -> ShardEntry:
    base = shard_base_key(fingerprint, split, partition, w.content_hash)
    refs = {}
    for ext, path, sha in (("npy", w.npy_path, w.npy_sha256), ("bin", w.bin_path, w.bin_sha256)):
        ref = FileRef(key=f"{base}.{ext}", size=path.stat().st_size, sha256=sha)
        put_immutable(store, ref.key, path, ref)
        refs[ext] = ref
    return ShardEntry(partition=partition, tokens=w.tokens, documents=w.documents, npy=refs["npy"], bin=refs["bin"])


def build_partition_shards(
    store: ObjectStore, raw: RawRecord, encoder: Encoder, reference: Encoder, tokenizer_record: TokenizerRecord, val_fraction: float,
    batch_documents: int, workdir: Path, run_id: str, code_version: str,
) -> BuiltPartition:
    """Tokenize the raw partition into a train and a val shard (the engine behind the exactness guard), upload them, and record the result."""
    local_raw = store.local_path(raw.key)
    if local_raw is None:
        local_raw = workdir / "raw.parquet"
        store.get_file(raw.key, local_raw)
    writers, stats = tokenize_partition(
        local_raw, encoder, reference, tokenizer_record.eod_id, tokenizer_record.token_dtype, val_fraction, workdir / "out", raw.partition, batch_documents
    )
    shards = {split: _entry(store, w, tokenizer_record.fingerprint, split, raw.partition) for split, w in writers.items()}
    data_version = hashlib.sha256("".join(shards[s].npy.sha256 + shards[s].bin.sha256 for s in sorted(shards)).encode()).hexdigest()[:16]
    record = PartRecord(
        partition=raw.partition,
        tokenizer_fingerprint=tokenizer_record.fingerprint,
        val_fraction=val_fraction,
        raw=raw,
        shards=shards,
        max_token_id=max(w.max_token_id for w in writers.values()),
        data_version=data_version,
        run_id=run_id,
        code_version=code_version,
        encoder=stats.guard,
    )
    put_record(store, part_record_key(tokenizer_record.fingerprint, raw.partition), record)
    return BuiltPartition(record=record, stats=stats, writers=writers)
