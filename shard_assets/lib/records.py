"""Every record the builder keeps beside its data in the store, so the store describes itself and later assets (and
other Dagster instances) read the store instead of the event log.

Each record is a frozen dataclass written as JSON and read back through the one codec (shard_loader/format/codec.py)
with every field's type checked; an error names the key and the field. A new record is one dataclass here and one key
in layout.py."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from shard_loader.builder_api import CREATED_AT_FORMAT, FileRef, ShardEntry, codec, to_json

from .curation.curation_records import CuratedRecord
from .curation.dedup_records import DedupDecision, DedupMember, DedupMembers
from .errors import RecordError, RecordMissingError
from .store import ObjectMissingError, ObjectStore

R = TypeVar("R")


@dataclass(frozen=True)
class TokenizerRecord:
    """A tokenizer as recorded (`tokenizers/<fp>/info.json`; `state/tokenizer.json` for the current one)."""

    name: str
    fingerprint: str
    vocab_size: int
    eod_id: int
    token_dtype: str


@dataclass(frozen=True)
class TrainingSample:
    """What a trained BPE read (`tokenizers/<fp>/trained_on.json`): each partition as `key@fingerprint`, in the order
    read, and whether the training budget ended the reading (then partitions after those cannot change it)."""

    partitions: tuple[str, ...]
    budget_reached: bool


@dataclass(frozen=True)
class SourceFileRef:
    """The source file a partition was made from, as registered: never listed again."""

    uri: str
    fingerprint: str
    size: int = -1


@dataclass(frozen=True)
class FilePiece:
    """A whole source file, or the row groups [start, stop) of a parquet file; `size` is the bytes it covers."""

    uri: str
    fingerprint: str
    size: int = -1
    row_groups: tuple[int, int] | None = None

    def describe(self) -> str:
        """The uri, with the row-group range (`#row_groups=a-b`) of a sliced piece."""
        return self.uri if self.row_groups is None else f"{self.uri}#row_groups={'-'.join(map(str, self.row_groups))}"


@dataclass(frozen=True)
class PartitionRecord:
    """What one partition reads, as registered (state/partitions/…): runs read exactly these pieces, never a listing."""

    source: str
    pieces: tuple[FilePiece, ...]

    @property
    def size(self) -> int:
        return sum(max(p.size, 0) for p in self.pieces)

    @property
    def fingerprint(self) -> str:
        """The file's own fingerprint for a one-file partition, else a hash over every piece."""
        if len(self.pieces) == 1 and self.pieces[0].row_groups is None:
            return self.pieces[0].fingerprint
        body = json.dumps([[p.uri, p.fingerprint, p.row_groups] for p in self.pieces]).encode()
        return f"pieces:{len(self.pieces)}:{hashlib.sha256(body).hexdigest()[:16]}"

    def files(self) -> tuple[SourceFileRef, ...]:
        """Every piece as a file reference: a whole file, or a parquet file's row-group range (`#row_groups=a-b`)."""
        return tuple(SourceFileRef(uri=p.describe(), fingerprint=p.fingerprint, size=p.size) for p in self.pieces)

    def lineage(self) -> SourceFileRef:
        """One reference for lineage records: the file itself, or the first piece named with the count of the others."""
        first = self.pieces[0].describe()
        uri = first if len(self.pieces) == 1 else f"{first} (+{len(self.pieces) - 1} more files)"
        return SourceFileRef(uri=uri, fingerprint=self.fingerprint, size=self.size)

    def built_from(self, ref: SourceFileRef) -> bool:
        """Whether a record made from `ref` (its `source_file`) was made from what this partition reads now: the same
        files with the same fingerprints (sizes aside: older records wrote an unknown one as -1)."""
        now = self.lineage()
        return (ref.uri, ref.fingerprint) == (now.uri, now.fingerprint)


@dataclass(frozen=True)
class DiscoveryIndex:
    """One source's registered partitions with the pieces each reads, and the partition still filling up
    (`state/discovery/<source>.json`): what discovery compares a listing against."""

    source: str
    open: str | None
    partitions: dict[str, tuple[FilePiece, ...]]


@dataclass(frozen=True)
class RawRecord:
    """One raw partition: where its normalised parquet is and where it came from (`source_file` one summary
    reference for lineage, `source_files` every file or row-group range it read; empty in older records)."""

    partition: str
    source: str
    source_file: SourceFileRef
    key: str
    sha256: str
    documents: int
    data_version: str
    run_id: str
    source_files: tuple[SourceFileRef, ...] = ()
    # left out while reading, by reason ("duplicate": a copy within the partition); empty in older records
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GuardResult:
    """What the exactness guard compared in one partition, for asset metadata and manifest lineage."""

    engine: str
    engine_version: str
    engine_reason: str
    documents: int
    tokens: int
    sampled: int
    sampled_tokens: int
    differing: int
    first_differing: int | None
    policy: str
    reencoded_with_reference: bool = False


@dataclass(frozen=True)
class SplitProof:
    """What a partition's writer recorded about its split: how many documents went to each split and the extremes of
    the top 53 bits of their hashes (the split rule's input). Every val document's bits are below the cut and every
    train document's at or above it, so no hash, in this partition or any other split by the same rule and fraction,
    can be in both splits: the publish check reads these records, never the documents."""

    val_fraction: float
    train_documents: int
    val_documents: int
    train_min_bits: int | None  # None: no train document
    val_max_bits: int | None  # None: no val document
    rule: str = "blake2b64-top53"


@dataclass(frozen=True)
class PartRecord:
    """One partition tokenized with one tokenizer: its shard per split and the checks made while writing."""

    partition: str
    tokenizer_fingerprint: str
    val_fraction: float
    raw: RawRecord
    shards: dict[str, ShardEntry]
    max_token_id: int
    data_version: str
    run_id: str
    code_version: str
    encoder: GuardResult | None = None  # which engine encoded it, and what the exactness guard compared
    split_proof: SplitProof | None = None  # None in older records: proven from the raw parquet instead
    dedup: DedupDecision | None = None  # the documents of `raw` left out as copies; None: dedup off (or older records)
    curation: CuratedRecord | None = None  # what curation dropped of `raw`; None: off (no filter, no eval set)

    @property
    def indexed_sha256(self) -> str:
        """The sha256 of the parquet dedup indexed and tokenize read: the curated one, else the raw one."""
        return self.curation.data.sha256 if self.curation and self.curation.data else self.raw.sha256


@dataclass(frozen=True)
class Quarantine:
    """A partition left out of versions with this tokenizer, and why: its tokenization failed (`stage` "tokenize";
    under the skip policy), or the selection of a version found it failed, changed, vanished or removed (`stage`
    "select": a report, rewritten by every selection and never read back as a cause)."""

    partition: str
    tokenizer_fingerprint: str
    error: str
    run_id: str
    stage: str = "tokenize"


@dataclass(frozen=True)
class IngestFailure:
    """A partition whose raw documents could not be built (the error names the source file and line), with the
    registration it failed on (its lineage reference: files and fingerprints); removed by its next successful ingest."""

    partition: str
    error: str
    run_id: str
    source_file: SourceFileRef | None = None


@dataclass(frozen=True)
class DatasetOwner:
    """Which dataset a store root holds (`state/dataset.json`), written once by the first build into it; also which
    dataset a Dagster home's partitions belong to (a cursor value of its instance)."""

    dataset: str
    spec: str
    claimed_at: str = ""  # a home's claim before this release has none

    @classmethod
    def now(cls, dataset: str, spec: str) -> DatasetOwner:
        """A claim made now."""
        return cls(dataset, spec, datetime.now(UTC).strftime(CREATED_AT_FORMAT))


@dataclass(frozen=True)
class SplitTotals:
    tokens: int
    documents: int
    shards: int


@dataclass(frozen=True)
class SplitsRecord:
    """Which partitions the next version holds, the totals per split, and what was left out and why."""

    tokenizer_fingerprint: str
    val_fraction: float
    partitions: tuple[str, ...]
    totals: dict[str, SplitTotals]
    overlap: int
    left_out: dict[str, str] = field(default_factory=dict)
    # kept with their last good build (stale_partitions = "keep_last_good"), and why
    stale: dict[str, str] = field(default_factory=dict)
    failed: tuple[str, ...] = ()  # of left_out, those still in the dataset: they name the version (publish.py)


def from_dict(cls: type[R], data: Any, where: str) -> R:
    """`cls` from a JSON value through the one codec; a refusal is a RecordError naming `where` and the field."""
    return codec.from_dict(cls, data, where, RecordError)


def decode(cls: type[R], body: bytes, where: str) -> R:
    """A record from its stored bytes; invalid JSON or a field of the wrong type is a RecordError naming `where`."""
    return codec.decode(cls, body, where, RecordError)


def put_record(store: ObjectStore, key: str, record: Any, compact: bool = False) -> None:
    store.put_bytes(key, to_json(record, compact))


def get_record(store: ObjectStore, key: str, cls: type[R], needed_by: str) -> R:
    """The record at `key`. A missing one is a RecordMissingError naming `needed_by` and what to do; one that could
    not be read (after the store's retries) stays the store's ObjectStoreError; a malformed one is a RecordError."""
    try:
        body = store.get_bytes(key)
    except ObjectMissingError as exc:
        raise RecordMissingError(
            f"{needed_by}: {key} is missing from {store.describe()}; materialise its asset first"
        ) from exc
    return decode(cls, body, key)


def find_record(store: ObjectStore, key: str, cls: type[R], needed_by: str) -> R | None:
    """The record at `key`, or None when there is none (one read, no separate existence check)."""
    try:
        return get_record(store, key, cls, needed_by)
    except RecordMissingError:
        return None


READ_THREADS = 16  # a record read waits on the store (a GET on S3/R2), not on this process


def get_records(store: ObjectStore, keys: Sequence[str], cls: type[R], needed_by: str) -> list[R]:
    """The records at `keys`, in order, READ_THREADS at a time: 30,000 part records are 30,000 store round trips."""
    with ThreadPoolExecutor(READ_THREADS) as pool:
        return list(pool.map(lambda key: get_record(store, key, cls, needed_by), keys))


# what the builder reads from here though it is defined elsewhere (the loader's published format, curation's records)
__all__ = ["CuratedRecord", "DedupDecision", "DedupMember", "DedupMembers", "FileRef", "ShardEntry", "to_json"]
