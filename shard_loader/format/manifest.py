"""The published manifest: parsing, validation of every field and key, and serialisation.

Keys are relative to the dataset root (see keys.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ManifestError
from .keys import check_key

FORMAT_NAME = "shard-dataset"
FORMAT_VERSION = 1
CREATED_AT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # UTC
TOKEN_DTYPES = {"uint16": 2, "uint32": 4}

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def token_dtype_for(vocab_size: int) -> str:
    """The smallest token dtype that holds every id of a vocabulary of this size."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


@dataclass(frozen=True)
class FileRef:
    """One published file: its key under the dataset root, byte size and sha256."""

    key: str
    size: int
    sha256: str


@dataclass(frozen=True)
class ShardEntry:
    """One tokenized shard: a token array (`.npy`) and its document offsets (`.bin`)."""

    partition: str
    tokens: int
    documents: int
    npy: FileRef
    bin: FileRef

    @property
    def nbytes(self) -> int:
        return self.npy.size + self.bin.size


@dataclass(frozen=True)
class SplitInfo:
    """The shards of one split, with their token and document totals."""

    tokens: int
    documents: int
    shards: tuple[ShardEntry, ...]


@dataclass(frozen=True)
class TokenizerInfo:
    name: str
    fingerprint: str
    vocab_size: int
    eod_id: int
    file: FileRef


@dataclass(frozen=True)
class Manifest:
    """A parsed, validated manifest. `lineage` is kept as published JSON for display."""

    dataset: str
    version: str
    created_at: str
    tokenizer: TokenizerInfo
    token_dtype: str
    splits: dict[str, SplitInfo]
    lineage: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> SplitInfo:
        if name not in self.splits:
            raise ManifestError(f"split {name!r} not in manifest of {self.dataset}@{self.version}; has {sorted(self.splits)}")
        return self.splits[name]

    def files(self, splits: list[str] | None = None) -> list[FileRef]:
        """Every file the manifest names: the tokenizer's, then each shard's .npy and .bin (of `splits`, default all)."""
        names = splits if splits is not None else list(self.splits)
        shards = [r for name in names for e in self.split(name).shards for r in (e.npy, e.bin)]
        return shards if splits is not None else [self.tokenizer.file, *shards]

    def to_json(self) -> dict[str, Any]:
        """The manifest as the JSON document the builder publishes."""
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "dataset": {"name": self.dataset, "version": self.version},
            "created_at": self.created_at,
            "tokenizer": asdict(self.tokenizer),
            "token_dtype": self.token_dtype,
            "splits": {
                name: {"tokens": s.tokens, "documents": s.documents, "shards": [asdict(e) for e in s.shards]}
                for name, s in self.splits.items()
            },
            "lineage": self.lineage,
        }

    def dumps(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n").encode()


def _get(obj: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected an object, got {type(obj).__name__}")
    if name not in obj:
        raise ManifestError(f"{where}: missing field {name!r}")
    value = obj[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ManifestError(f"{where}.{name}: expected an integer, got {value!r}")
    if not isinstance(value, kind):
        raise ManifestError(f"{where}.{name}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _count(obj: Any, name: str, where: str) -> int:
    value = _get(obj, name, int, where)
    if value < 0:
        raise ManifestError(f"{where}.{name}: must not be negative, got {value}")
    return value


def _file(obj: Any, where: str) -> FileRef:
    key = check_key(_get(obj, "key", str, where), f"{where}.key")
    sha = _get(obj, "sha256", str, where)
    if not _SHA256.match(sha):
        raise ManifestError(f"{where}.sha256: {sha!r} is not 64 lowercase hex digits (key {key})")
    return FileRef(key=key, size=_count(obj, "size", where), sha256=sha)


def _shard(obj: Any, where: str, itemsize: int) -> ShardEntry:
    entry = ShardEntry(
        partition=_get(obj, "partition", str, where),
        tokens=_count(obj, "tokens", where),
        documents=_count(obj, "documents", where),
        npy=_file(_get(obj, "npy", dict, where), f"{where}.npy"),
        bin=_file(_get(obj, "bin", dict, where), f"{where}.bin"),
    )
    if entry.bin.size != 8 * (entry.documents + 1):
        raise ManifestError(
            f"{where}: {entry.bin.key} is {entry.bin.size} bytes but {entry.documents} documents need "
            f"{8 * (entry.documents + 1)} bytes of int64 offsets"
        )
    if entry.npy.size < entry.tokens * itemsize:
        raise ManifestError(f"{where}: {entry.npy.key} is {entry.npy.size} bytes, too small for {entry.tokens} tokens")
    return entry


def parse_manifest(raw: bytes | str, origin: str = "manifest") -> Manifest:
    """Parse and validate a manifest document; `origin` names it in every error."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{origin}: not valid JSON ({exc})") from None
    if _get(doc, "format", str, origin) != FORMAT_NAME:
        raise ManifestError(f"{origin}: format is {doc['format']!r}, expected {FORMAT_NAME!r}")
    version = _get(doc, "format_version", int, origin)
    if version != FORMAT_VERSION:
        raise ManifestError(f"{origin}: format_version {version} is not supported (this reader knows {FORMAT_VERSION})")
    dtype = _get(doc, "token_dtype", str, origin)
    if dtype not in TOKEN_DTYPES:
        raise ManifestError(f"{origin}.token_dtype: {dtype!r} is not one of {sorted(TOKEN_DTYPES)}")
    tok = _get(doc, "tokenizer", dict, origin)
    tokenizer = TokenizerInfo(
        name=_get(tok, "name", str, f"{origin}.tokenizer"),
        fingerprint=_get(tok, "fingerprint", str, f"{origin}.tokenizer"),
        vocab_size=_count(tok, "vocab_size", f"{origin}.tokenizer"),
        eod_id=_count(tok, "eod_id", f"{origin}.tokenizer"),
        file=_file(_get(tok, "file", dict, f"{origin}.tokenizer"), f"{origin}.tokenizer.file"),
    )
    if tokenizer.eod_id >= tokenizer.vocab_size:
        raise ManifestError(f"{origin}.tokenizer.eod_id: {tokenizer.eod_id} is not below vocab_size {tokenizer.vocab_size}")
    if token_dtype_for(tokenizer.vocab_size) != dtype:
        problem = "cannot hold" if dtype == "uint16" else "is not the format's dtype for"
        raise ManifestError(
            f"{origin}.token_dtype: {dtype} {problem} ids of a vocabulary of {tokenizer.vocab_size}; "
            f"expected {token_dtype_for(tokenizer.vocab_size)}"
        )
    ds = _get(doc, "dataset", dict, origin)
    splits: dict[str, SplitInfo] = {}
    seen_keys: set[str] = set()
    for name, body in _get(doc, "splits", dict, origin).items():
        where = f"{origin}.splits.{name}"
        shards = tuple(
            _shard(s, f"{where}.shards[{i}]", TOKEN_DTYPES[dtype])
            for i, s in enumerate(_get(body, "shards", list, where))
        )
        info = SplitInfo(tokens=_count(body, "tokens", where), documents=_count(body, "documents", where), shards=shards)
        if info.tokens != sum(s.tokens for s in shards) or info.documents != sum(s.documents for s in shards):
            raise ManifestError(f"{where}: totals ({info.tokens} tokens, {info.documents} documents) differ from the sum of its shards")
        for s in shards:
            for ref in (s.npy, s.bin):
                if ref.key in seen_keys:
                    raise ManifestError(f"{where}: key {ref.key} is listed twice")
                seen_keys.add(ref.key)
        splits[name] = info
    lineage = doc.get("lineage", {})
    if not isinstance(lineage, dict):
        raise ManifestError(f"{origin}.lineage: expected an object")
    return Manifest(
        dataset=_get(ds, "name", str, f"{origin}.dataset"),
        version=_get(ds, "version", str, f"{origin}.dataset"),
        created_at=_get(doc, "created_at", str, origin),
        tokenizer=tokenizer,
        token_dtype=dtype,
        splits=splits,
        lineage=lineage,
    )
