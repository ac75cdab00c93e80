"""The tokenize step of a run, without Dagster: `tokenize_partitions` takes a `TokenizeJob` (the store, the current
tokenizer and its encoders, the spec's settings, the run) and each partition's raw parquet to shard files under
content-hashed keys and a PartRecord in the store; a failing partition is quarantined with its error.

It owns each partition's work folder, the encoding (lib/encoding.py), the shard files, the uploads and the
quarantine records. Uploads overlap encoding: `PartitionUploads` stores a finished partition on a background
thread while the next one encodes, and writes each partition's record only after all its files are up."""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from shard_loader.builder_api import FileRef, ShardEntry, ShardWriter, map_npy, shard_base_key

from .background import Background
from .curation.curate import curated_input
from .curation.dedup_apply import dropped_documents
from .encoders import Encoder, ReferenceEncoder, encoders_of
from .encoding import EncodeSettings, TokenizeStats, tokenize_partition
from .errors import BuildError
from .layout import part_record_key, quarantine_key, raw_record_key, tokenizer_key
from .records import PartRecord, Quarantine, RawRecord, TokenizerRecord, get_record, put_record
from .spec import DatasetSpec
from .state import current_tokenizer
from .ownership import claim
from .splits import prove_split
from .store import ObjectStore

UPLOAD_DEPTH = 1  # finished partitions waiting for upload: local disk holds at most this many + the one encoding
SAMPLE_DOCUMENTS = 3  # decoded back to text per partition, for a glance in the UI
SAMPLE_CHARS = 160
LOG = logging.getLogger(__name__)


class Log(Protocol):
    """Where failures go: a `logging.Logger`, or the Dagster context's log in an asset (each partition done is its
    materialization's metadata, not a log line: an event per line is a SQLite write on a local instance)."""

    def error(self, msg: str) -> None: ...


@dataclass(frozen=True)
class TokenizeJob:
    """Everything a run's tokenize step needs besides the partitions: where, with what, how, and by whom."""

    store: ObjectStore
    tokenizer: TokenizerRecord
    engine: Encoder
    reference: ReferenceEncoder  # guards the engine (the same object when the engine is the reference)
    settings: EncodeSettings
    run_id: str
    code_version: str
    spec: DatasetSpec | None = None  # its [dedup] settings decide which documents are left out as copies (None: none)

    @classmethod
    def current(cls, store: ObjectStore, spec: DatasetSpec, run_id: str, code_version: str) -> TokenizeJob:
        """A job with the store's current tokenizer, its selected engine and reference, and the spec's settings; the
        store must hold the spec's dataset (ownership.claim)."""
        claim(store, spec.name, spec.origin)
        record = current_tokenizer(store)
        key = tokenizer_key(record.fingerprint)
        engine, reference = encoders_of(record.fingerprint, lambda: store.get_bytes(key).decode())
        settings = EncodeSettings(
            record.eod_id, record.token_dtype, spec.val_fraction, spec.batch_documents, spec.on_mismatch
        )
        return cls(store, record, engine, reference, settings, run_id, code_version, spec)


@dataclass(frozen=True)
class BuiltPartition:
    record: PartRecord  # not in the store until `upload_partition` has put every file
    stats: TokenizeStats
    writers: dict[str, ShardWriter]  # closed; their files stay in the work folder until it is removed


@dataclass(frozen=True)
class TokenizedPartition:
    """A partition whose shard files and record are in the store, with what encoding it measured."""

    record: PartRecord
    stats: TokenizeStats
    samples: tuple[str, ...]  # its first train documents decoded back to text, cut to SAMPLE_CHARS


@dataclass(frozen=True)
class TokenizeOutcome:
    """What a run's tokenize step did: the partitions stored, in order, and the failed (quarantined) ones' errors."""

    stored: tuple[TokenizedPartition, ...]
    failed: dict[str, BuildError]


def _entry(w: ShardWriter, fingerprint: str, split: str, partition: str) -> ShardEntry:
    base = shard_base_key(fingerprint, split, partition, w.content_hash)
    npy = FileRef(key=f"{base}.npy", size=w.npy_path.stat().st_size, sha256=w.npy_sha256)
    bin_ = FileRef(key=f"{base}.bin", size=w.bin_path.stat().st_size, sha256=w.bin_sha256)
    return ShardEntry(partition=partition, tokens=w.tokens, documents=w.documents, npy=npy, bin=bin_)


def build_partition_shards(job: TokenizeJob, raw: RawRecord, workdir: Path) -> BuiltPartition:
    """Tokenize the raw partition into a train and a val shard in `workdir` (the engine behind the exactness guard) and
    describe them in its record."""
    workdir.mkdir(parents=True, exist_ok=True)
    source, curation = curated_input(job.store, job.spec, raw) if job.spec else (raw, None)
    local_raw = job.store.local_copy(source.key, workdir / "raw.parquet")
    drops, dedup = dropped_documents(job.store, job.spec, source, job.run_id)
    writers, stats = tokenize_partition(
        local_raw, workdir / "out", raw.partition, job.engine, job.reference, job.settings, drops
    )
    fingerprint = job.tokenizer.fingerprint
    shards = {split: _entry(w, fingerprint, split, raw.partition) for split, w in writers.items()}
    hashes = "".join(shards[s].npy.sha256 + shards[s].bin.sha256 for s in sorted(shards))
    data_version = hashlib.sha256(hashes.encode()).hexdigest()[:16]
    record = PartRecord(
        partition=raw.partition,
        tokenizer_fingerprint=fingerprint,
        val_fraction=job.settings.val_fraction,
        raw=raw,
        shards=shards,
        max_token_id=max(w.max_token_id for w in writers.values()),
        data_version=data_version,
        run_id=job.run_id,
        code_version=job.code_version,
        encoder=stats.guard,
        # every document in the split its hash names
        split_proof=prove_split(local_raw, job.settings.val_fraction, stats.documents, drops),
        dedup=dedup,
        curation=curation,
    )
    return BuiltPartition(record=record, stats=stats, writers=writers)


def decoded_samples(
    reference: ReferenceEncoder, writer: ShardWriter, count: int = SAMPLE_DOCUMENTS, chars: int = SAMPLE_CHARS
) -> tuple[str, ...]:
    """The first documents of a closed shard decoded back to text on one line each, cut to `chars`."""
    tokens = map_npy(writer.npy_path, writer.npy_path.name, writer.dtype)  # no ast: threads run beside it
    offsets = np.fromfile(writer.bin_path, dtype="<i8", count=count + 1)
    samples = []
    for a, b in zip(offsets.tolist(), offsets[1:].tolist()):
        # a token is at least a byte, a character at most 4: enough for `chars`, not a whole long document
        end = min(b - 1, a + 4 * chars + 1)
        text = reference.tokenizer.decode(tokens[a:end].tolist()).replace("\n", " ")
        samples.append(text[:chars] + ("…" if len(text) > chars or end < b - 1 else ""))
    return tuple(samples)


def upload_partition(store: ObjectStore, built: BuiltPartition) -> None:
    """Put the partition's shard files under their content-hashed keys, then its record: a record names only files in
    the store."""
    record = built.record
    for split, w in built.writers.items():
        for ref, path in ((record.shards[split].npy, w.npy_path), (record.shards[split].bin, w.bin_path)):
            store.put_immutable(ref.key, path, ref)
    put_record(store, part_record_key(record.tokenizer_fingerprint, record.partition), record)


class PartitionUploads:
    """Finished partitions uploaded (`upload_partition`) on a background thread while the next one encodes, at most
    UPLOAD_DEPTH queued; each one's work folder is removed once its upload ends, whatever the outcome."""

    def __init__(self, store: ObjectStore, depth: int = UPLOAD_DEPTH):
        self.store = store
        self.failed: dict[str, BuildError] = {}
        self.stored: list[str] = []
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


def tokenize_partitions(job: TokenizeJob, partitions: Sequence[str], log: Log = LOG) -> TokenizeOutcome:
    """Tokenize and store each partition in turn, each in a work folder removed once its files are uploaded (or it
    failed); a BuildError fails, logs and quarantines its partition only (a record naming its raw file and the error,
    removed when the partition is stored again). Any other exception ends the step once the built ones are uploaded."""
    fingerprint = job.tokenizer.fingerprint
    uploads = PartitionUploads(job.store)
    built: dict[str, TokenizedPartition] = {}
    failed: dict[str, BuildError] = {}
    sources: dict[str, str] = {}  # partition -> its raw parquet's key, which a quarantine record names
    try:
        for partition in partitions:
            workdir = Path(tempfile.mkdtemp(prefix=f"tokenize-{partition}-"))
            try:
                raw = get_record(job.store, raw_record_key(partition), RawRecord, f"tokenized_shards[{partition}]")
                sources[partition] = raw.key
                shards = build_partition_shards(job, raw, workdir)
                samples = decoded_samples(job.reference, shards.writers["train"])
            except BaseException as exc:
                shutil.rmtree(workdir, ignore_errors=True)
                if not isinstance(exc, BuildError):
                    raise
                failed[partition] = exc
                log.error(f"{partition}: failed, quarantined: {type(exc).__name__}: {exc}")
                continue
            uploads.submit(shards, workdir)
            built[partition] = TokenizedPartition(shards.record, shards.stats, samples)
    finally:  # the partitions built before a failure still get their files and records
        for partition, problem in uploads.wait().items():
            failed[partition] = problem
            log.error(f"{partition}: upload failed, quarantined: {type(problem).__name__}: {problem}")
        for partition in uploads.stored:
            job.store.delete(quarantine_key(fingerprint, partition))
        for partition, problem in failed.items():
            where = f"{sources[partition]}: " if partition in sources else ""
            error = f"{where}{type(problem).__name__}: {problem}"
            put_record(
                job.store, quarantine_key(fingerprint, partition), Quarantine(partition, fingerprint, error, job.run_id)
            )
    stored = tuple(built[p] for p in partitions if p in built and p not in failed)
    return TokenizeOutcome(stored=stored, failed={p: failed[p] for p in partitions if p in failed})
