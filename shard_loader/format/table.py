"""The shard table: one split's shard entries as a structured NumPy array, one row per shard.

The manifest names each split's table by key, size and sha256, and the table is published as a
standard `.npy` file (`numpy.load(path, allow_pickle=False)` reads it). A reader parses the small
JSON, keeps only the table of the split it serves, and builds a `ShardEntry` only for the rows it
uses: start-up and memory stay flat at tens of thousands of shards, and forked workers share the
array's pages instead of each holding a tree of Python objects.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from ..errors import ManifestError
from .entries import FileRef, ShardEntry
from .keys import check_key
from .shard import read_npy_header

# Substrings of "\n" + keys joined by "\n" + "\n" that only an unsafe or odd key makes: an empty key, a leading or
# trailing "/", a "." or ".." name, a backslash, a colon (a scheme, or rare enough to check key by key).
_SUSPICIOUS = (b"\n\n", b"\n/", b"/\n", b"/.\n", b"/..\n", b"\n.\n", b"\n..\n", b"\\", b":")
_INT = "<i8"
_TEXT_FIELDS = ("partition", "npy_key", "bin_key")
_INT_FIELDS = ("tokens", "documents", "npy_size", "bin_size")
_SHA_FIELDS = ("npy_sha256", "bin_sha256")
FIELDS = ("partition", "tokens", "documents", "npy_key", "npy_size", "npy_sha256", "bin_key", "bin_size", "bin_sha256")


def _dtype(partition_bytes: int, key_bytes: int) -> np.dtype:
    text = {"partition": f"S{partition_bytes}", "npy_key": f"S{key_bytes}", "bin_key": f"S{key_bytes}"}
    return np.dtype([(name, text.get(name, "S64" if name in _SHA_FIELDS else _INT)) for name in FIELDS])


class ShardTable(Sequence[ShardEntry]):
    """A split's shards, in manifest order. Indexing builds (and checks) one `ShardEntry`; the columns are arrays."""

    __slots__ = ("rows",)

    def __init__(self, rows: np.ndarray):
        self.rows = rows

    @classmethod
    def of(cls, entries: Sequence[ShardEntry]) -> ShardTable:
        if isinstance(entries, ShardTable):
            return entries
        columns: dict[str, list[Any]] = {
            "partition": [e.partition.encode() for e in entries],
            "tokens": [e.tokens for e in entries],
            "documents": [e.documents for e in entries],
        }
        for kind in ("npy", "bin"):
            refs = [getattr(e, kind) for e in entries]
            columns[f"{kind}_key"] = [r.key.encode() for r in refs]
            columns[f"{kind}_size"] = [r.size for r in refs]
            columns[f"{kind}_sha256"] = [r.sha256.encode() for r in refs]
        longest = max(map(len, columns["npy_key"] + columns["bin_key"]), default=1)
        rows = np.zeros(len(entries), dtype=_dtype(max(map(len, columns["partition"]), default=1), longest))
        for name, values in columns.items():
            rows[name] = values
        return cls(rows)

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> ShardEntry: ...
    @overload
    def __getitem__(self, i: slice) -> ShardTable: ...

    def __getitem__(self, i: int | slice) -> ShardEntry | ShardTable:
        if isinstance(i, slice):
            return ShardTable(self.rows[i])
        r = self.rows[i]
        where = f"shard table row {i}"
        try:
            return self._entry(r, where)
        except UnicodeDecodeError as exc:
            raise ManifestError(f"{where}: a partition or key is not UTF-8 ({exc})") from None

    @staticmethod
    def _entry(r: np.void, where: str) -> ShardEntry:
        return ShardEntry(
            partition=r["partition"].decode(),
            tokens=int(r["tokens"]),
            documents=int(r["documents"]),
            npy=FileRef(
                check_key(r["npy_key"].decode(), f"{where}.npy_key"), int(r["npy_size"]), r["npy_sha256"].decode()
            ),
            bin=FileRef(
                check_key(r["bin_key"].decode(), f"{where}.bin_key"), int(r["bin_size"]), r["bin_sha256"].decode()
            ),
        )

    def __iter__(self) -> Iterator[ShardEntry]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardTable) and self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # unhashable as it defines __eq__: typeshed's own spelling of that

    @property
    def tokens(self) -> np.ndarray:
        return self.rows["tokens"]

    @property
    def documents(self) -> np.ndarray:
        return self.rows["documents"]

    @property
    def nbytes(self) -> np.ndarray:
        """Bytes of each shard's two files."""
        total: np.ndarray = self.rows["npy_size"] + self.rows["bin_size"]
        return total

    def keys(self) -> np.ndarray:
        """Every shard's .npy and .bin key, as bytes."""
        return np.concatenate([self.rows["npy_key"], self.rows["bin_key"]])

    def column(self, name: str) -> list[Any]:
        """One field of every row as Python values (text decoded), without building entries."""
        values = self.rows[name].tolist()
        return [v.decode() for v in values] if name in _TEXT_FIELDS + _SHA_FIELDS else values

    def files(self) -> Iterator[FileRef]:
        """Each shard's .npy then .bin, in order, straight from the columns (keys were checked when the table was read
        or made)."""
        columns = [self.column(f) for f in ("npy_key", "npy_size", "npy_sha256", "bin_key", "bin_size", "bin_sha256")]
        for nk, ns, nh, bk, bs, bh in zip(*columns):
            yield FileRef(nk, ns, nh)
            yield FileRef(bk, bs, bh)

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.save(buf, self.rows, allow_pickle=False)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, raw: bytes, origin: str, itemsize: int) -> ShardTable:
        """Parse and check a published table: its header against its length (before anything is allocated), its
        columns, every count and size, and every key and sha256. The rows are a read-only view of `raw`."""
        rows = _rows(raw, origin)
        for name in FIELDS:
            kind = rows.dtype[name]
            wanted = "S" if name in _TEXT_FIELDS + _SHA_FIELDS else "i"
            if kind.kind != wanted or (wanted == "i" and kind.itemsize != 8):
                raise ManifestError(
                    f"{origin}: field {name!r} is {kind}, expected {'bytes' if wanted == 'S' else 'int64'}"
                )
        table = cls(rows)  # read-only over the bytes read: a table is never written
        table._check(origin, itemsize)
        return table

    def _check(self, origin: str, itemsize: int) -> None:
        rows = self.rows
        for name in _INT_FIELDS:
            if len(rows) and rows[name].min() < 0:
                i = int(np.argmin(rows[name]))
                raise ManifestError(f"{origin}[{i}].{name}: must not be negative, got {rows[name][i]}")
        total = sum(rows["npy_size"].tolist()) + sum(rows["bin_size"].tolist())  # Python ints: the sum cannot wrap
        if total >= 1 << 63:
            raise ManifestError(f"{origin}: its files add up to {total:,} bytes, more than a 64-bit size can count")
        small = (rows["bin_size"] != 8 * (rows["documents"] + 1)) | (rows["npy_size"] < rows["tokens"] * itemsize)
        for i in np.flatnonzero(small)[:1].tolist():
            self[i].checked(f"{origin}[{i}]", itemsize)
        for name in _SHA_FIELDS:  # 64 lowercase hex digits, checked as bytes (a shorter value is padded with NUL)
            digits = np.ascontiguousarray(rows[name]).view(np.uint8).reshape(len(rows), rows.dtype[name].itemsize)
            hexadecimal = ((digits >= ord("0")) & (digits <= ord("9"))) | ((digits >= ord("a")) & (digits <= ord("f")))
            bad = np.flatnonzero(~hexadecimal.all(axis=1)) if digits.shape[1] == 64 else np.arange(len(rows))
            if bad.size:
                raise ManifestError(f"{origin}[{bad[0]}].{name}: {rows[name][bad[0]]!r} is not 64 lowercase hex digits")
        _check_keys(rows, origin)


def _rows(raw: bytes, origin: str) -> np.ndarray:
    """The structured array a `.npy` table holds, viewed in place once its header agrees with its length."""
    f = io.BytesIO(raw)
    try:
        shape, _, dtype = read_npy_header(f)
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise ManifestError(f"{origin}: not a readable .npy shard table ({exc})") from None
    if len(shape) != 1 or dtype.names != FIELDS or dtype.hasobject:
        raise ManifestError(f"{origin}: expected a 1-D table with fields {list(FIELDS)}, found {len(shape)}-D {dtype}")
    body = len(raw) - f.tell()
    if shape[0] * dtype.itemsize != body:
        raise ManifestError(
            f"{origin}: its header says {shape[0]:,} rows of {dtype.itemsize} bytes, but it holds {body:,} bytes of "
            "rows"
        )
    return np.frombuffer(raw, dtype=dtype, count=shape[0], offset=f.tell())


def _check_keys(rows: np.ndarray, origin: str) -> None:
    """Every key safe and listed once, in a few passes over all keys rather than a full check per key: keys share a
    few folders, so each folder gets `check_key` once, and one scan finds any name that could be unsafe on its own.
    Anything suspicious is checked key by key, so the error names the row and the rule."""
    partitions = rows["partition"].tolist()
    joined = b"\n".join(partitions)
    if partitions and (not _plain_text(joined) or joined.count(b"\n") != len(partitions) - 1):
        bad = next(i for i, p in enumerate(partitions) if not _plain_text(p) or b"\n" in p)
        raise ManifestError(
            f"{origin}[{bad}].partition: {partitions[bad]!r} is not UTF-8 text without control characters"
        )
    for name in ("npy_key", "bin_key"):
        listed = rows[name].tolist()
        blob = b"\n" + b"\n".join(listed) + b"\n"
        folders = {k.rpartition(b"/")[0] for k in listed} - {b""}
        if (
            listed
            and (
                any(odd in blob for odd in _SUSPICIOUS) or blob.count(b"\n") != len(listed) + 1 or not _plain_text(blob)
            )
        ) or not all(map(_safe_folder, folders)):
            _check_each_key(listed, f"{origin}[{{}}].{name}")
    every = rows["npy_key"].tolist() + rows["bin_key"].tolist()
    if len(set(every)) != len(every):
        twice = next(k for k, n in Counter(every).items() if n > 1)
        raise ManifestError(f"{origin}: key {twice.decode(errors='replace')} is listed twice")


def _plain_text(raw: bytes) -> bool:
    """Whether `raw` is UTF-8 with no control character but the line breaks that separate joined values."""
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    octets = np.frombuffer(raw, dtype=np.uint8)  # 6x faster than a regular expression over megabytes of keys
    return not bool((((octets < 0x20) & (octets != 0x0A)) | (octets == 0x7F)).any())


def _safe_folder(folder: bytes) -> bool:
    try:
        check_key(folder.decode(), "folder")
    except (ManifestError, UnicodeDecodeError):
        return False
    return True


def _check_each_key(listed: list[bytes], where: str) -> None:
    """The full check of every key, naming the first that fails (`where` holds a {} for the row)."""
    for i, raw in enumerate(listed):
        try:
            key = raw.decode()
        except UnicodeDecodeError:
            raise ManifestError(f"{where.format(i)}: key {raw!r} is not UTF-8") from None
        check_key(key, where.format(i))
