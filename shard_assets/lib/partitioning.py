"""Partitions sized by work, not by file: small files share a partition up to a byte budget, a large parquet
file is cut into row-group ranges. A file keeps the partition it was first given, so files added later never
change the keys of existing partitions; with no budget every file is its own partition (the default)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .records import DiscoveryIndex, FilePiece, PartitionRecord
from .spec import parse_byte_count
from .sources.listing import SourceFile


@dataclass(frozen=True)
class PartitionPolicy:
    """`target_bytes` of source per partition; 0 keeps one partition per file, whole."""

    target_bytes: int = 0

    @classmethod
    def parse(cls, text: str, origin: str) -> PartitionPolicy:
        """A policy from a byte count such as `268435456`, `256MB` or `2GiB`."""
        return cls(parse_byte_count(text, origin))


def row_group_slices(sizes: list[int], target: int) -> list[tuple[int, int]]:
    """Consecutive row groups cut into ranges of about `target` bytes each (at least one row group per range)."""
    slices, start, acc = [], 0, 0
    for i, size in enumerate(sizes):
        acc += size
        if acc >= target:
            slices.append((start, i + 1))
            start, acc = i + 1, 0
    if start < len(sizes):
        slices.append((start, len(sizes)))
    return slices


RowGroupSizes = Callable[[SourceFile], list[int] | None]
"""The compressed bytes of each row group of a file (its parquet footer), or None when it cannot be sliced."""


class SourceLayout:
    """The partitions of one source, the partition still filling up, and which partitions hold each file.
    Every operation costs what the file touches, not what the source holds."""

    def __init__(self, index: DiscoveryIndex):
        self.source, self.open_key = index.source, index.open
        self._pieces: dict[str, list[FilePiece]] = {}
        self._sizes: dict[str, int] = {}
        self._holders: dict[str, list[str]] = {}
        self._fingerprints: dict[str, str] = {}
        for key, pieces in index.partitions.items():
            for piece in pieces:
                self._append(key, piece)

    @classmethod
    def empty(cls, source: str) -> SourceLayout:
        """A source before its first discovery."""
        return cls(DiscoveryIndex(source, None, {}))

    def index(self) -> DiscoveryIndex:
        """The layout as its stored record."""
        return DiscoveryIndex(self.source, self.open_key, {k: tuple(v) for k, v in self._pieces.items()})

    def record(self, key: str) -> PartitionRecord | None:
        pieces = self._pieces.get(key)
        return PartitionRecord(self.source, tuple(pieces)) if pieces else None

    def records(self) -> dict[str, PartitionRecord]:
        return {k: PartitionRecord(self.source, tuple(v)) for k, v in self._pieces.items()}

    def fingerprint_of(self, uri: str) -> str | None:
        """The fingerprint a file was registered with, None for a file never seen."""
        return self._fingerprints.get(uri)

    def files(self) -> set[str]:
        return set(self._holders)

    def _free_key(self, base: str) -> str:
        key, n = base, 1
        while key in self._pieces:
            n += 1
            key = f"{base}.{n}"
        return key

    def _append(self, key: str, piece: FilePiece) -> None:
        self._pieces.setdefault(key, []).append(piece)
        self._sizes[key] = self._sizes.get(key, 0) + max(piece.size, 0)
        holders = self._holders.setdefault(piece.uri, [])
        if key not in holders:
            holders.append(key)
        self._fingerprints[piece.uri] = piece.fingerprint

    def remove(self, uri: str) -> set[str]:
        """Take a file out of its partitions (a partition left empty disappears); returns the partitions touched."""
        touched = set(self._holders.pop(uri, []))
        self._fingerprints.pop(uri, None)
        for key in touched:
            self._pieces[key] = [p for p in self._pieces[key] if p.uri != uri]
            self._sizes[key] = sum(max(p.size, 0) for p in self._pieces[key])
            if not self._pieces[key]:
                del self._pieces[key], self._sizes[key]
                if self.open_key == key:
                    self.open_key = None
        return touched

    def update(self, file: SourceFile, policy: PartitionPolicy, row_groups: RowGroupSizes) -> set[str]:
        """A changed file: a whole-file piece is updated where it is; a sliced file is sliced again."""
        keys = self._holders.get(file.uri, [])
        sliced = any(p.row_groups is not None for k in keys for p in self._pieces[k] if p.uri == file.uri)
        if sliced or len(keys) != 1:
            return self.remove(file.uri) | self.add(file, policy, row_groups)
        key = keys[0]
        self._pieces[key] = [
            FilePiece(file.uri, file.fingerprint, file.size) if p.uri == file.uri else p for p in self._pieces[key]
        ]
        self._sizes[key] = sum(max(p.size, 0) for p in self._pieces[key])
        self._fingerprints[file.uri] = file.fingerprint
        return {key}

    def add(self, file: SourceFile, policy: PartitionPolicy, row_groups: RowGroupSizes) -> set[str]:
        """Place a new file: sliced if larger than the budget, else into the partition filling up, else a new one."""
        target = policy.target_bytes
        sizes = row_groups(file) if target and file.size > target else None
        if sizes and len(slices := row_group_slices(sizes, target)) > 1:
            touched = set()
            for start, stop in slices:
                key = self._free_key(f"{file.partition_key}.rg{start}")
                self._append(key, FilePiece(file.uri, file.fingerprint, sum(sizes[start:stop]), (start, stop)))
                touched.add(key)
            return touched
        whole = FilePiece(file.uri, file.fingerprint, file.size)
        if self.open_key in self._pieces and self._sizes[self.open_key] + max(file.size, 0) <= target:
            self._append(self.open_key, whole)
            return {self.open_key}
        key = self._free_key(file.partition_key)
        self._append(key, whole)
        self.open_key = key if target and file.size < target else None
        return {key}


def contiguous_runs(
    selected: Iterable[str],
    order: Sequence[str],
    limit: int,
    sizes: Mapping[str, int] | None = None,
    max_bytes: int = 0,
) -> list[list[str]]:
    """`selected` partitions cut into runs of adjacent keys in `order` (Dagster's key order), so that each run
    is one partition range holding nothing unselected: at most `limit` keys, and with `sizes`, no more than
    `max_bytes` of source past a run's first partition (large partitions run alone, small ones together)."""
    chosen = set(selected)
    runs: list[list[str]] = []
    current: list[str] = []
    held = 0
    for key in order:
        size = sizes.get(key, 0) if sizes else 0
        fits = len(current) < limit and (not sizes or not current or held + size <= max_bytes)
        if key in chosen and fits:
            current.append(key)
            held += size
            continue
        if current:
            runs.append(current)
        current, held = ([key], size) if key in chosen else ([], 0)
    if current:
        runs.append(current)
    return runs


__all__ = ["FilePiece", "PartitionPolicy", "PartitionRecord", "SourceLayout", "contiguous_runs", "row_group_slices"]
