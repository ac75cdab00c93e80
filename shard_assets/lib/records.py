"""Typed records the builder keeps beside its data in the store, so the store describes itself.

Each record is a frozen dataclass written as JSON and read back with every field checked;
later assets (and other Dagster instances) read them instead of the event log.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shard_loader.format import FileRef, ShardEntry

from .encoders import GuardResult
from .errors import RecordError
from .store import ObjectStore, ObjectStoreError

R = TypeVar("R")


@dataclass(frozen=True)
class TokenizerRecord:
    """A tokenizer as the builder records it (`tokenizers/<fp>/info.json`, and `state/tokenizer.json` for the current one)."""

    name: str
    fingerprint: str
    vocab_size: int
    eod_id: int
    token_dtype: str


@dataclass(frozen=True)
class SourceFileRef:
    """The source file a partition was made from, as registered: never listed again."""

    uri: str
    fingerprint: str
    size: int = -1


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


@dataclass(frozen=True)
class Quarantine:
    """A partition whose tokenization failed with this tokenizer; left out of versions under the skip policy."""

    partition: str
    tokenizer_fingerprint: str
    error: str
    run_id: str


@dataclass(frozen=True)
class IngestFailure:
    """A partition whose raw documents could not be built (the error names the source file and line); removed by its next successful ingest."""

    partition: str
    error: str
    run_id: str


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


def to_json(record: Any) -> bytes:
    return (json.dumps(dataclasses.asdict(record), indent=2, sort_keys=True) + "\n").encode()


def _decode(kind: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        return from_dict(kind, value, where)
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, got {type(value).__name__}")
        return {str(k): _decode(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _decode(next(a for a in args if a is not type(None)), value, where)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind in (int, str, float, bool) and (type(value) is not kind):
        raise RecordError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """A record class's field types, resolved once (resolving string annotations cost 1.5 ms per record read)."""
    return typing.get_type_hints(cls)


def from_dict(cls: type[R], data: Any, where: str) -> R:
    """`cls` built from a JSON object with every field's type checked; errors name the record and field."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    hints = _field_types(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{where}: missing field {f.name!r}")
            continue
        values[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
    return cls(**values)


def put_record(store: ObjectStore, key: str, record: Any) -> None:
    store.put_bytes(key, to_json(record))


def get_record(store: ObjectStore, key: str, cls: type[R], needed_by: str) -> R:
    """The record at `key`; a missing or malformed one is a RecordError naming `needed_by` and the key."""
    try:
        body = store.get_bytes(key)
    except ObjectStoreError:
        raise RecordError(f"{needed_by}: {key} is missing from {store.describe()}; materialise its asset first") from None
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise RecordError(f"{needed_by}: {key} is not valid JSON ({exc})") from None
    return from_dict(cls, data, key)


def find_record(store: ObjectStore, key: str, cls: type[R], needed_by: str) -> R | None:
    """The record at `key`, or None when there is none."""
    return get_record(store, key, cls, needed_by) if store.exists(key) else None


READ_THREADS = 16  # a record read waits on the store (a GET on S3/R2), not on this process


def get_records(store: ObjectStore, keys: Sequence[str], cls: type[R], needed_by: str) -> list[R]:
    """The records at `keys`, in order, READ_THREADS at a time: 30,000 part records are 30,000 store round trips."""
    with ThreadPoolExecutor(READ_THREADS) as pool:
        return list(pool.map(lambda key: get_record(store, key, cls, needed_by), keys))


__all__ = [
    "FileRef",
    "IngestFailure",
    "PartRecord",
    "Quarantine",
    "RawRecord",
    "ShardEntry",
    "SourceFileRef",
    "SplitTotals",
    "SplitsRecord",
    "TokenizerRecord",
    "find_record",
    "from_dict",
    "get_record",
    "get_records",
    "put_record",
    "to_json",
]
