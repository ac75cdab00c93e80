"""Build one partition's shards with one tokenizer: raw parquet from the store → encoded → shard files
under content-hashed keys in the store → the partition's PartRecord. No Dagster here.

Uploads overlap encoding: `PartitionUploads` stores a finished partition on a background thread while
the next one encodes, and writes each partition's record only after all its files are up."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from shard_loader.format import FileRef, ShardEntry, ShardWriter, shard_base_key

from .background import Background
from .encoders import Encoder
from .encoding import TokenizeStats, tokenize_partition
from .errors import BuildError
from .layout import part_record_key
from .records import PartRecord, RawRecord, TokenizerRecord, put_record
from .splits import prove_split
from .store import ObjectStore

UPLOAD_DEPTH = 1  # finished partitions waiting for upload: local disk holds at most this many + the one encoding


@dataclass(frozen=True)
class BuiltPartition:
    record: PartRecord  # not in the store until `upload_partition` has put every file
    stats: TokenizeStats
    writers: dict[str, ShardWriter]  # closed; their files stay in the work folder until it is removed


def _entry(w: ShardWriter, fingerprint: str, split: str, partition: str) -> ShardEntry:
    base = shard_base_key(fingerprint, split, partition, w.content_hash)
    npy = FileRef(key=f"{base}.npy", size=w.npy_path.stat().st_size, sha256=w.npy_sha256)
    bin_ = FileRef(key=f"{base}.bin", size=w.bin_path.stat().st_size, sha256=w.bin_sha256)
    return ShardEntry(partition=partition, tokens=w.tokens, documents=w.documents, npy=npy, bin=bin_)


def build_partition_shards(
    store: ObjectStore, raw: RawRecord, encoder: Encoder, reference: Encoder, tokenizer_record: TokenizerRecord, val_fraction: float,
    batch_documents: int, workdir: Path, run_id: str, code_version: str, on_mismatch: str = "fail",
) -> BuiltPartition:
    """Tokenize the raw partition into a train and a val shard in `workdir` (the engine behind the exactness guard) and describe them in its record."""
    workdir.mkdir(parents=True, exist_ok=True)
    local_raw = store.local_path(raw.key)
    if local_raw is None:
        local_raw = workdir / "raw.parquet"
        store.get_file(raw.key, local_raw)
    writers, stats = tokenize_partition(
        local_raw, encoder, reference, tokenizer_record.eod_id, tokenizer_record.token_dtype, val_fraction, workdir / "out", raw.partition,
        batch_documents, on_mismatch,
    )
    shards = {split: _entry(w, tokenizer_record.fingerprint, split, raw.partition) for split, w in writers.items()}
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
        split_proof=prove_split(local_raw, val_fraction, stats.documents),  # every document in the split its hash names
    )
    return BuiltPartition(record=record, stats=stats, writers=writers)


def upload_partition(store: ObjectStore, built: BuiltPartition) -> None:
    """Put the partition's shard files under their content-hashed keys, then its record: a record names only files in the store."""
    record = built.record
    for split, w in built.writers.items():
        for ref, path in ((record.shards[split].npy, w.npy_path), (record.shards[split].bin, w.bin_path)):
            store.put_immutable(ref.key, path, ref)
    put_record(store, part_record_key(record.tokenizer_fingerprint, record.partition), record)


class PartitionUploads:
    """Finished partitions uploaded (`upload_partition`) on a background thread while the next one encodes.

    `submit` waits while UPLOAD_DEPTH partitions are queued; each partition's work folder is removed
    once its upload ends, whatever the outcome. `stored` names the partitions whose files and record are up; `wait` returns the failures by partition.
    """

    def __init__(self, store: ObjectStore, depth: int = UPLOAD_DEPTH):
        self.store, self.failed, self.stored = store, {}, []
        self._thread = Background("upload", depth)

    def submit(self, built: BuiltPartition, workdir: Path) -> None:
        self._thread.submit(self._upload, built, workdir)

    def _upload(self, built: BuiltPartition, workdir: Path) -> None:
        try:
            upload_partition(self.store, built)
            self.stored.append(built.record.partition)
        except BuildError as exc:
            self.failed[built.record.partition] = exc
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def wait(self) -> dict[str, BuildError]:
        """Wait for every queued upload and stop the thread; {partition: error} of those that failed."""
        try:
            self._thread.drain()
        finally:
            self._thread.close()
        return dict(self.failed)
