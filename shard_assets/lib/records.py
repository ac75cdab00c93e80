"""Every record the builder keeps beside its data in the store, and the one checked codec they go through, so the
store describes itself and later assets (and other Dagster instances) read the store instead of the event log.

Each record is a frozen dataclass written as JSON and read back with every field's type checked; an error names
the key and the field. A new record is one dataclass here and one key in layout.py.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
import typing
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from shard_loader.format import FileRef, ShardEntry
from shard_loader.format.fields import loads
from shard_loader.format.manifest import CREATED_AT_FORMAT

from .dedup_records import DedupDecision, DedupMember, DedupMembers
from .errors import RecordError, RecordMissingError
from .store import ObjectMissingError, ObjectStore

R = TypeVar("R")


@dataclass(frozen=True)
class TokenizerRecord:
    """A tokenizer as the builder records it (`tokenizers/<fp>/info.json`, and `state/tokenizer.json` for the current
    one)."""

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
        return (
            self.uri if self.row_groups is None else f"{self.uri}#row_groups={self.row_groups[0]}-{self.row_groups[1]}"
        )


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

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields."""
        return dataclasses.asdict(self)


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
    split_proof: SplitProof | None = (
        None  # none in records written before it existed: proven from the raw parquet instead
    )
    dedup: DedupDecision | None = None  # the documents of `raw` left out as copies; None: dedup off (or older records)


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
    stale: dict[str, str] = field(
        default_factory=dict
    )  # kept with their last good build (stale_partitions = "keep_last_good"), and why


# -- the codec: one decoder per type, built once; a failure names the path to the field --


class _Invalid(Exception):
    """A value of the wrong shape; `path` grows from the field outwards as the error passes up."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message, self.path = message, ""

    def within(self, step: str) -> _Invalid:
        self.path = step + self.path
        return self


Decoder = Callable[[Any], Any]
Encoder = Callable[[Any], Any]


def _scalar(kind: type) -> Decoder:
    def decode(value: Any) -> Any:
        if type(value) is not kind:
            if kind is float and type(value) is int:
                return float(value)
            raise _Invalid(f"expected {kind.__name__}, got {value!r}")
        return value

    return decode


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(f"expected an object, got {type(value).__name__}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Invalid(f"expected a list, got {type(value).__name__}")
    return value


def _mapping(values: Decoder) -> Decoder:
    def decode(value: Any) -> dict[str, Any]:
        out = {}
        for k, v in _object(value).items():
            try:
                out[k] = values(v)
            except _Invalid as exc:
                raise exc.within(f".{k}") from None
        return out

    return decode


def _sequence(items: tuple[Decoder, ...], variadic: bool) -> Decoder:
    def decode(value: Any) -> tuple[Any, ...]:
        found = _list(value)
        if not variadic and len(found) != len(items):
            raise _Invalid(f"expected {len(items)} items, got {len(found)}")
        out = []
        for i, v in enumerate(found):
            try:
                out.append((items[0] if variadic else items[i])(v))
            except _Invalid as exc:
                raise exc.within(f"[{i}]") from None
        return tuple(out)

    return decode


def _optional(inner: Decoder) -> Decoder:
    return lambda value: None if value is None else inner(value)


def _record(cls: type) -> Decoder:
    """A record from an object of its fields, or (written compact) a list of them in field order. Fields absent take
    their defaults (records written before the field existed); unknown ones are ignored (a newer builder's)."""
    hints = typing.get_type_hints(cls)
    fields = [
        (f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, _decoder(hints[f.name]))
        for f in dataclasses.fields(cls)
    ]

    def decode(value: Any) -> Any:
        if isinstance(value, list):
            if len(value) > len(fields):
                raise _Invalid(f"expected at most {len(fields)} fields, got {len(value)}")
            value = {name: v for (name, _, _), v in zip(fields, value)}
        data, values = _object(value), {}
        for name, required, field_decoder in fields:
            if name not in data:
                if required:
                    raise _Invalid(f"missing field {name!r}")
                continue
            try:
                values[name] = field_decoder(data[name])
            except _Invalid as exc:
                raise exc.within(f".{name}") from None
        return cls(**values)

    return decode


@functools.cache
def _decoder(kind: Any) -> Decoder:
    """The decoder of a record field's type: records, dict[str, T], tuple[T, ...], tuple[A, B], T | None, scalars."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        return _record(typing.cast(type, kind))
    if origin is dict:
        return _mapping(_decoder(args[1]))
    if origin is tuple:
        variadic = len(args) == 2 and args[1] is Ellipsis
        return _sequence(tuple(_decoder(a) for a in (args[:1] if variadic else args)), variadic)
    if origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        return _optional(_decoder(next(a for a in args if a is not type(None))))
    if kind in (int, str, float, bool):
        return _scalar(kind)
    if kind is Any:  # free-form JSON a record carries as is (a mixture's lineage)
        return _same
    raise TypeError(f"records cannot hold a {kind!r}")


def from_dict(cls: type[R], data: Any, where: str) -> R:
    """`cls` built from a JSON value with every field's type checked; errors name `where` and the field."""
    try:
        return typing.cast(R, _decoder(typing.cast(Any, cls))(data))
    except _Invalid as exc:
        raise RecordError(f"{where}{exc.path}: {exc.message}") from None


def _same(value: Any) -> Any:
    return value


@functools.cache
def _encoder(kind: Any, compact: bool) -> Encoder:
    """The encoder of a record field's type into JSON-able values (tuples as lists), the mirror of `_decoder`;
    `compact` writes records as lists of their fields in order (so a compact record gains fields only at its end)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(typing.cast(type, kind))
        fields = [(f.name, _encoder(hints[f.name], compact)) for f in dataclasses.fields(kind)]
        if compact:
            return lambda value: [encode(getattr(value, name)) for name, encode in fields]
        return lambda value: {name: encode(getattr(value, name)) for name, encode in fields}
    if origin is dict:
        values = _encoder(args[1], compact)
        return dict if values is _same else lambda value: {k: values(v) for k, v in value.items()}
    if origin is tuple:
        variadic = len(args) == 2 and args[1] is Ellipsis
        items = _encoder(args[0], compact) if variadic or len(set(args)) == 1 else None
        if items is _same:
            return list
        if items is not None:
            return lambda value: [items(v) for v in value]
        each = [_encoder(a, compact) for a in args]
        return lambda value: [encode(v) for encode, v in zip(each, value)]
    if origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        inner = _encoder(next(a for a in args if a is not type(None)), compact)
        return _same if inner is _same else lambda value: None if value is None else inner(value)
    if kind in (int, str, float, bool) or kind is Any:
        return _same
    raise TypeError(f"records cannot hold a {kind!r}")


def to_json(record: Any, compact: bool = False) -> bytes:
    """A record's JSON: objects of named fields, indented, for reading in a bucket browser; or `compact`, each record
    a list of its fields in order, for large ones (the discovery index: 30,000 partitions in a few MB)."""
    value = _encoder(typing.cast(Any, type(record)), compact)(record)
    if compact:
        return json.dumps(value, separators=(",", ":")).encode()
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def decode(cls: type[R], body: bytes, where: str) -> R:
    """A record from its stored bytes; invalid JSON or a field of the wrong type is a RecordError naming `where`."""
    try:
        data = loads(body)
    except ValueError as exc:
        raise RecordError(f"{where}: not valid JSON ({exc})") from None
    return from_dict(cls, data, where)


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


__all__ = [
    "DedupDecision",
    "DedupMember",
    "DedupMembers",
    "DatasetOwner",
    "DiscoveryIndex",
    "FilePiece",
    "FileRef",
    "GuardResult",
    "IngestFailure",
    "PartRecord",
    "PartitionRecord",
    "Quarantine",
    "RawRecord",
    "ShardEntry",
    "SourceFileRef",
    "SplitProof",
    "SplitTotals",
    "SplitsRecord",
    "TokenizerRecord",
    "decode",
    "find_record",
    "from_dict",
    "get_record",
    "get_records",
    "put_record",
    "to_json",
    "TrainingSample",
]
