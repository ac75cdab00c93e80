"""Raw documents of one partition: read in batches, normalise, filter, deduplicate, write parquet."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import SourceError, StateMismatchError
from .discovery import registered
from .layout import RAW_PREFIX, ingest_failure_key, raw_key, raw_record_key
from .ownership import claim
from .record_checks import check_registration
from .records import FileRef, IngestFailure, PartitionRecord, RawRecord, get_records, put_record
from .sources.listing import SourceFile, split_partition_key
from .store import ObjectStore
from .store.base import file_sha256
from .text import column_hashes, normalise_column
from .sources.readers import iter_document_columns
from .spec import DatasetSpec

ROW_GROUP = 2000
# zstd (level 1, Arrow's default) against none, per 5.4 MB of web text (issue 35): 0.013 CPU-s more to write, 0.004
# more to read, 2.8x smaller (1.9 MB): ~6 core-hours per 2T tokens for ~6 TB less stored and moved. lz4 saves
# 0.005 CPU-s of it and stores 1.4x more; snappy is no faster than zstd and stores 1.4x more.
COMPRESSION = "zstd"
# No dictionary or min/max statistics for the text column: documents are unique, so the dictionary is built and dropped,
# and statistics of long texts are never read (0.040 -> 0.034 CPU-s to write 10.7 MB).
TEXT_ENCODING = {"use_dictionary": ["doc_hash"], "write_statistics": ["doc_hash"]}
DROP_REASONS = ("empty", "too_short", "duplicate")  # what reading a partition leaves out ("duplicate": within it)
HISTOGRAM_EDGES = [0, 64, 256, 1024, 4096, 16384, 65536, 262144, math.inf]


@dataclass
class RawStats:
    documents_in: int = 0
    documents_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    length_histogram: Counter[int] = field(default_factory=Counter)
    content_hash: str = ""

    def histogram_rows(self) -> list[tuple[str, int]]:
        rows = []
        for lo, hi in zip(HISTOGRAM_EDGES, HISTOGRAM_EDGES[1:]):
            label = f"{lo}-{hi - 1}" if hi != math.inf else f"{lo}+"
            rows.append((label, self.length_histogram[int(lo)]))
        return rows


class SeenHashes:
    """The hashes a partition kept so far, as sorted runs each more than twice the next (at most log2 n + 1 runs; a run
    is merged again only once the runs after it reach half its size): checking a batch costs O(batch log^2 n) and n
    hashes O(n log n) to add, where one array grown and rescanned with `np.isin` per batch made ingest quadratic in
    a file's documents (issue 48). 8 bytes a hash."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        order = np.argsort(hashes)
        needles, found = hashes[order], np.zeros(len(hashes), dtype=bool)
        for run in self.runs:  # sorted needles: each search starts where the last ended (half the cache misses)
            at = np.searchsorted(run, needles).clip(max=len(run) - 1)
            found[order] |= run[at] == needles
        return found

    def add(self, hashes: np.ndarray) -> None:
        if not len(hashes):
            return
        run = np.sort(hashes)
        while self.runs and len(self.runs[-1]) <= 2 * len(run):
            run = np.sort(np.concatenate([self.runs.pop(), run]), kind="stable")  # two sorted runs: a merge
        self.runs.append(run)


def write_raw_partition(spec: DatasetSpec, files: SourceFile | PartitionRecord, out: Path) -> RawStats:
    """Normalise, filter and deduplicate one listed file, or a registered partition's files and row-group
    ranges in order, into a parquet at `out` (columns text, doc_hash), a batch of documents at a time on Arrow
    columns (lib/text.py)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    source = spec.source(files.source)
    pieces = [files] if isinstance(files, SourceFile) else list(files.pieces)
    stats = RawStats()
    seen = SeenHashes()
    content = hashlib.sha256()
    schema = pa.schema([("text", pa.large_string()), ("doc_hash", pa.uint64())])
    with pq.ParquetWriter(out, schema, compression=COMPRESSION, **TEXT_ENCODING) as writer:
        for batch in (b for piece in pieces for b in iter_document_columns(source, piece, spec.batch_documents)):
            stats.documents_in += len(batch)
            stats.bytes_in += int(pc.sum(pc.binary_length(batch)).as_py() or 0)
            texts = normalise_column(batch)
            chars = pc.utf8_length(texts).to_numpy(zero_copy_only=False)
            empty, short = chars == 0, (chars > 0) & (chars < spec.min_chars)
            hashes = column_hashes(texts)
            first = np.zeros(len(hashes), dtype=bool)
            candidates = np.flatnonzero(~(empty | short))
            _, at = np.unique(hashes[candidates], return_index=True)
            first[candidates[at]] = True
            first &= ~seen.contains(hashes)
            stats.dropped["empty"] += int(empty.sum())
            stats.dropped["too_short"] += int(short.sum())
            stats.dropped["duplicate"] += len(candidates) - int(first.sum())
            if not first.any():
                continue
            kept, kept_hashes = texts.filter(pa.array(first)), hashes[first]
            seen.add(kept_hashes)
            content.update(kept_hashes.tobytes())
            stats.documents_out += len(kept)
            stats.bytes_out += int(pc.sum(pc.binary_length(kept)).as_py() or 0)
            buckets = np.searchsorted(HISTOGRAM_EDGES[1:-1], chars[first], side="right")
            for bucket, n in zip(*np.unique(buckets, return_counts=True)):
                stats.length_histogram[int(HISTOGRAM_EDGES[bucket])] += int(n)
            writer.write_table(pa.table([kept, pa.array(kept_hashes, pa.uint64())], schema=schema), ROW_GROUP)
    if stats.documents_in == 0:
        where = pieces[0].uri if len(pieces) == 1 else f"{pieces[0].uri} and {len(pieces) - 1} more files"
        raise SourceError(f"{where}: source {files.source!r} file has no documents (empty source)")
    stats.content_hash = content.hexdigest()
    return stats


def current_raws(store: ObjectStore, spec: DatasetSpec) -> list[RawRecord]:
    """The raw records of the spec's registered partitions built from the files each is registered with now, in
    registration order: what the tokenizer trains on (never a source removed from the spec, nor a file's old content
    unless the spec keeps stale partitions' last good builds)."""
    claim(store, spec.name, spec.origin)
    current = registered(store, spec)
    keys = {p: raw_record_key(p) for p in current}
    listed = {key for s in spec.sources for key, _ in store.list(f"{RAW_PREFIX}{s.name}/")}
    present = [p for p, key in keys.items() if key in listed]
    raws = get_records(store, [keys[p] for p in present], RawRecord, "tokenizer")
    keep_stale = spec.stale_partitions == "keep_last_good"
    return [r for p, r in zip(present, raws) if keep_stale or current[p].built_from(r.source_file)]


def build_raw(
    store: ObjectStore, spec: DatasetSpec, partition: str, registered: PartitionRecord, workdir: Path, run_id: str
) -> tuple[RawRecord, RawStats]:
    """Write one partition's raw parquet under a content-hashed key and record it; reads exactly the registered
    pieces (checked against the spec's source first), no listing of the source. Bad input (a SourceError naming the
    file and the problem) or a refused registration (StateMismatchError) is recorded as the partition's IngestFailure,
    which the next version's lineage names (and for which a refused registration leaves the partition out)."""
    claim(store, spec.name, spec.origin)
    source, _ = split_partition_key(partition)
    out = workdir / "raw.parquet"
    try:
        check_registration(spec, partition, registered)
        stats = write_raw_partition(spec, registered, out)
    except (SourceError, StateMismatchError) as exc:
        failure = IngestFailure(partition, f"{type(exc).__name__}: {exc}", run_id, registered.lineage())
        put_record(store, ingest_failure_key(partition), failure)
        raise
    sha = file_sha256(out)
    key = raw_key(partition, sha[:16])
    store.put_immutable(key, out, FileRef(key=key, size=out.stat().st_size, sha256=sha))
    record = RawRecord(
        partition=partition,
        source=source,
        source_file=registered.lineage(),
        key=key,
        sha256=sha,
        documents=stats.documents_out,
        data_version=stats.content_hash[:16],
        run_id=run_id,
        source_files=registered.files(),
        dropped={reason: stats.dropped[reason] for reason in DROP_REASONS},
    )
    put_record(store, raw_record_key(partition), record)
    store.delete(ingest_failure_key(partition))
    return record, stats
