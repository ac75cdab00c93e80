"""The published manifest: parsing, validation of every field and key, and serialisation.

Keys are relative to the dataset root (see keys.py). Format 2 keeps the JSON small: each split's
shards are a table (table.py) and the per-partition lineage a JSON file, both named in the manifest
by key, size and sha256, so a trainer keeps only the table of the split it serves. Format 1 (shards
listed inline) is still read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Annotated, Any

from ..errors import ManifestError
from .codec import Check, Count, NonEmpty, document_version, from_dict, parse_json, stored_as, to_plain
from .entries import FileRef, ShardEntry
from .keys import LINEAGE_DIR, TABLES_DIR, check_key
from .table import ShardTable

FORMAT_NAME = "shard-dataset"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
CREATED_AT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # UTC
TOKEN_DTYPES = {"uint16": 2, "uint32": 4}
TokenDtype = Annotated[
    str, Check(lambda v: None if v in TOKEN_DTYPES else f"{v!r} is not one of {sorted(TOKEN_DTYPES)}")
]

Reader = Callable[[FileRef], bytes]  # the bytes of a published file (a store's read); checked here against the ref


def token_dtype_for(vocab_size: int) -> str:
    """The smallest token dtype that holds every id of a vocabulary of this size."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def _ref_of(key_dir: str, suffix: str, raw: bytes) -> FileRef:
    """A content-addressed sidecar: its key carries its sha256, so a key names one content forever."""
    sha = hashlib.sha256(raw).hexdigest()
    return FileRef(check_key(f"{key_dir}/{sha[:16]}{suffix}", "sidecar key"), len(raw), sha)


@dataclass(frozen=True)
class SplitInfo:
    """A split's totals and its shard table: named by `table` (key, size, sha256) in the manifest, and
    `shards` once loaded. A format-1 manifest lists its shards inline, so its `table` is None."""

    tokens: Count
    documents: Count
    shard_count: Count
    nbytes: Count = field(metadata=stored_as("bytes"))
    table: FileRef | None
    loaded: ShardTable | None = field(default=None, compare=False, repr=False, metadata=stored_as(None))

    @classmethod
    def of(cls, entries: Sequence[ShardEntry]) -> SplitInfo:
        """A split of these shards, with its table's content-addressed key."""
        table = ShardTable.of(entries)
        return cls(
            tokens=int(table.tokens.sum()),
            documents=int(table.documents.sum()),
            shard_count=len(table),
            nbytes=int(table.nbytes.sum()),
            table=_ref_of(TABLES_DIR, ".npy", table.to_bytes()),
            loaded=table,
        )

    @property
    def shards(self) -> ShardTable:
        if self.loaded is None:
            key = self.table.key if self.table else "the shard table"
            raise ManifestError(f"{key} is not loaded: read it with Manifest.with_tables (open_manifest does)")
        return self.loaded

    def with_table(self, raw: bytes, itemsize: int) -> SplitInfo:
        """This split with its published table loaded from `raw`, checked against the manifest's ref and totals."""
        if self.table is None or self.loaded is not None:
            return self
        table = ShardTable.from_bytes(self.table.verified(raw), self.table.key, itemsize)
        found = (int(table.tokens.sum()), int(table.documents.sum()), len(table), int(table.nbytes.sum()))
        if found != (self.tokens, self.documents, self.shard_count, self.nbytes):
            raise ManifestError(
                f"{self.table.key}: holds {found[0]} tokens, {found[1]} documents, {found[2]} shards, {found[3]} "
                f"bytes; the manifest says {self.tokens}, {self.documents}, {self.shard_count}, {self.nbytes}"
            )
        return replace(self, loaded=table)


@dataclass(frozen=True)
class TokenizerInfo:
    name: str
    fingerprint: str
    vocab_size: Count
    eod_id: Count
    file: FileRef


@dataclass(frozen=True)
class _InlineSplit:
    """A split as format 1 published it: its totals and every shard inline."""

    tokens: Count
    documents: Count
    shards: tuple[ShardEntry, ...]


@dataclass(frozen=True)
class _Format1:
    """What format 1 published differently: every split's shards inline."""

    splits: dict[str, _InlineSplit]


@dataclass(frozen=True)
class Manifest:
    """A parsed, validated manifest, its fields as published (after `format` and `format_version`). `lineage` is the
    summary published inline (for display); `lineage_detail`, per partition, is published as its own file
    (`lineage_file`) and loaded on demand."""

    dataset: NonEmpty = field(metadata=stored_as("dataset.name"))
    version: NonEmpty = field(metadata=stored_as("dataset.version"))
    created_at: str
    tokenizer: TokenizerInfo
    token_dtype: TokenDtype
    splits: dict[str, SplitInfo]
    lineage: dict[str, Any] = field(default_factory=dict)
    lineage_file: FileRef | None = None
    lineage_detail: dict[str, Any] | None = field(default=None, compare=False, repr=False, metadata=stored_as(None))

    def __post_init__(self) -> None:
        if self.lineage_detail is not None and self.lineage_file is None:
            object.__setattr__(self, "lineage_file", _ref_of(LINEAGE_DIR, ".json", self._lineage_raw))

    @cached_property
    def _lineage_raw(self) -> bytes:  # tens of MB at 30,000 partitions: serialised once
        return (json.dumps(self.lineage_detail, separators=(",", ":"), sort_keys=True) + "\n").encode()

    def split(self, name: str) -> SplitInfo:
        if name not in self.splits:
            raise ManifestError(
                f"split {name!r} is not in {self.dataset} version {self.version}; its splits are "
                f"{', '.join(sorted(self.splits))}"
            )
        return self.splits[name]

    def sidecars(self) -> list[FileRef]:
        """The manifest's own files beside its JSON: each split's shard table and the lineage detail."""
        tables = [s.table for s in self.splits.values() if s.table is not None]
        return tables + ([self.lineage_file] if self.lineage_file else [])

    def files(self, splits: list[str] | None = None) -> list[FileRef]:
        """Every file the manifest names: the tokenizer's, its sidecars, then each shard's .npy and .bin
        (only the shards' files when `splits` is given). Needs the tables of those splits loaded."""
        names = splits if splits is not None else list(self.splits)
        shards = [r for name in names for r in self.split(name).shards.files()]
        return shards if splits is not None else [self.tokenizer.file, *self.sidecars(), *shards]

    @property
    def nbytes(self) -> int:
        """Bytes of every file `files()` names, from the totals alone (no table needs to be loaded)."""
        return (
            self.tokenizer.file.size
            + sum(r.size for r in self.sidecars())
            + sum(s.nbytes for s in self.splits.values())
        )

    def with_tables(self, read: Reader, splits: Sequence[str] | None = None) -> Manifest:
        """This manifest with the shard tables of `splits` (default all) read, verified and checked. When any is read,
        so are the others, to refuse a key listed by two splits (a shard belongs to one split: val would serve train's
        data), and only those of `splits` are kept."""
        names = list(self.splits) if splits is None else [name for name in splits if self.split(name)]
        itemsize = TOKEN_DTYPES[self.token_dtype]
        every = {
            n: (s.with_table(read(s.table), itemsize) if names and s.table and s.loaded is None else s)
            for n, s in self.splits.items()
        }
        _check_splits_disjoint({n: s.loaded for n, s in every.items() if s.loaded is not None})
        return replace(self, splits={n: every[n] if n in names else s for n, s in self.splits.items()})

    def with_lineage(self, read: Reader) -> Manifest:
        """This manifest with its per-partition lineage read and verified (format 1 has it inline)."""
        if self.lineage_file is None or self.lineage_detail is not None:
            return self
        detail = parse_json(self.lineage_file.verified(read(self.lineage_file)), self.lineage_file.key)
        if not isinstance(detail, dict):
            raise ManifestError(f"{self.lineage_file.key}: expected an object")
        return replace(self, lineage_detail=detail)

    @property
    def full_lineage(self) -> dict[str, Any]:
        """The summary and the per-partition detail together (the detail must be loaded for format 2)."""
        if self.lineage_file is not None and self.lineage_detail is None:
            raise ManifestError(f"{self.lineage_file.key} is not loaded: read it with Manifest.with_lineage")
        return {**self.lineage, **(self.lineage_detail or {})}

    def sidecar_bytes(self) -> dict[str, bytes]:
        """What to publish beside the JSON, by key: every split's table and the lineage detail (all loaded)."""
        out = {s.table.key: s.shards.to_bytes() for s in self.splits.values() if s.table is not None}
        if self.lineage_file is not None:
            out[self.lineage_file.key] = self._lineage_raw
        return out

    def to_json(self) -> dict[str, Any]:
        """The manifest as the (format 2) JSON document the builder publishes."""
        for name, s in self.splits.items():
            if s.table is None:
                raise ManifestError(
                    f"split {name!r} of {self.version} has no shard table: a format-1 manifest is read, not republished"
                )
        doc = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **to_plain(self)}
        return doc if self.lineage_file is not None else {k: v for k, v in doc.items() if k != "lineage_file"}

    def dumps(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n").encode()


def _check_splits_disjoint(tables: dict[str, ShardTable]) -> None:
    """Refuse a key listed in two splits' tables (val would serve train's data), naming the key and both splits."""
    if len(tables) < 2:
        return
    seen: dict[str, set[bytes]] = {}
    for name in sorted(tables):
        keys = tables[name].keys().tolist()  # a set of Python bytes: sorting 60,000 NumPy byte strings costs 20x more
        for other, theirs in seen.items():
            if not theirs.isdisjoint(keys):
                both = min(theirs.intersection(keys))
                raise ManifestError(
                    f"key {both.decode(errors='replace')} is listed in split {other!r} and in split {name!r}; "
                    "a shard belongs to exactly one split: republish the dataset"
                )
        seen[name] = set(keys)


def parse_manifest(raw: bytes | str, origin: str = "manifest") -> Manifest:
    """Parse and validate a manifest document; `origin` names it in every error."""
    data = parse_json(raw, origin)
    version = document_version(data, origin, FORMAT_NAME, READABLE_VERSIONS)
    manifest = from_dict(Manifest, {**data, "splits": {}} if version == 1 else data, origin)
    dtype, tokenizer = manifest.token_dtype, manifest.tokenizer
    if tokenizer.eod_id >= tokenizer.vocab_size:
        raise ManifestError(
            f"{origin}.tokenizer.eod_id: {tokenizer.eod_id} is not below vocab_size {tokenizer.vocab_size}"
        )
    if token_dtype_for(tokenizer.vocab_size) != dtype:
        problem = "cannot hold" if dtype == "uint16" else "is not the format's dtype for"
        raise ManifestError(
            f"{origin}.token_dtype: {dtype} {problem} ids of a vocabulary of {tokenizer.vocab_size}; "
            f"expected {token_dtype_for(tokenizer.vocab_size)}"
        )
    if version == 1:
        return replace(manifest, splits=_inline_splits(from_dict(_Format1, data, origin), origin, TOKEN_DTYPES[dtype]))
    for name, split in manifest.splits.items():  # format 2: each split names its shard table, read when used
        if split.table is None:
            raise ManifestError(f"{origin}.splits.{name}.table: a format-2 split names its shard table")
    return manifest


def _inline_splits(body: _Format1, origin: str, itemsize: int) -> dict[str, SplitInfo]:
    """Format 1: every shard listed inline, checked entry by entry."""
    splits: dict[str, SplitInfo] = {}
    seen_keys: set[str] = set()
    for name, split in body.splits.items():
        where = f"{origin}.splits.{name}"
        shards = [s.checked(f"{where}.shards[{i}]", itemsize) for i, s in enumerate(split.shards)]
        if split.tokens != sum(s.tokens for s in shards) or split.documents != sum(s.documents for s in shards):
            raise ManifestError(
                f"{where}: totals ({split.tokens} tokens, {split.documents} documents) differ from the sum of its "
                "shards"
            )
        for s in shards:
            for ref in (s.npy, s.bin):
                if ref.key in seen_keys:
                    raise ManifestError(f"{where}: key {ref.key} is listed twice")
                seen_keys.add(ref.key)
        splits[name] = replace(SplitInfo.of(shards), table=None)
    return splits
