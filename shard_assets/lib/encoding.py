"""The tokenization hot path: raw parquet batches -> an encoder's flat ids -> train/val shard files.

Documents are encoded whole (never cut), by the engine `select_encoder` chose, behind an exactness guard that compares a
sample of every partition with the reference. No Python loop runs per token or per document (one runs per run of
same-split documents); parquet decoding and the guard's reference run on their own threads beside the engine."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .text import is_val
from .background import prefetched
from .curation.dedup_apply import kept_batches
from .encoders import Encoded, Encoder, ExactnessError, ExactnessGuard, ReferenceEncoder, select_encoder
from .records import GuardResult
from shard_loader.builder_api import SPLITS, ShardWriter

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyarrow.parquet import ParquetFile
    from tokenizers import Tokenizer

MAX_BATCH_CHARS = 4 << 20  # bounds the text (and the reference's ~400 bytes per token) of one encode call
READ_AHEAD = 2  # batches decoded ahead of the engine by the reader thread


@dataclass
class TokenizeStats:
    tokens: dict[str, int]
    documents: dict[str, int]
    seconds: float
    guard: GuardResult

    @property
    def tokens_per_second(self) -> float:
        return sum(self.tokens.values()) / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class EncodeSettings:
    """How a partition's documents become shard files: the tokenizer's end-of-document id and token dtype, and the
    spec's split fraction, batch size and what a difference found by the exactness guard does."""

    eod_id: int
    token_dtype: str
    val_fraction: float
    batch_documents: int = 1000
    on_mismatch: str = "fail"


def by_size(texts: list[str]) -> list[slice]:
    """Consecutive slices of `texts` holding at most MAX_BATCH_CHARS characters each (at least one document)."""
    ends = np.cumsum([len(t) for t in texts])
    slices, start = [], 0
    while start < len(texts):
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + MAX_BATCH_CHARS, side="right")))
        slices.append(slice(start, stop))
        start = stop
    return slices


def encode_documents(tokenizer: Tokenizer, texts: list[str], eod_id: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """For estimates: the selected engine's tokens for a `tokenizers.Tokenizer`, EOD after each document; lengths."""
    return select_encoder(tokenizer.to_str()).encode(texts).with_eod(eod_id, dtype, "estimate")


def _batches(
    pf: ParquetFile, val_fraction: float, batch_documents: int, drops: Any
) -> Iterator[tuple[list[str], np.ndarray]]:
    """(texts, is-val mask) of a raw ParquetFile's documents less `drops`, reading only the two columns, bounded by
    MAX_BATCH_CHARS."""
    for batch in kept_batches(pf, ["text", "doc_hash"], batch_documents, drops):
        texts, val = batch.column(0).to_pylist(), is_val(batch.column(1).to_numpy(), val_fraction)
        for chunk in by_size(texts):
            yield texts[chunk], val[chunk]


def _split_runs(val: np.ndarray) -> list[tuple[str, int, int]]:
    """(split, first, stop) of the maximal runs of consecutive documents in one split, in order."""
    if not len(val):
        return []
    edges = np.flatnonzero(val[1:] != val[:-1]) + 1
    bounds = [0, *edges.tolist(), len(val)]
    return [(SPLITS[1] if val[a] else SPLITS[0], a, b) for a, b in zip(bounds, bounds[1:])]


def _append(writers: dict[str, ShardWriter], encoded: Encoded, val: np.ndarray, eod_id: int) -> None:
    """Each run of same-split documents, end-of-document ids inserted, straight into its writer: one copy per token."""
    offsets = encoded.offsets
    for split, a, b in _split_runs(val):
        ids = encoded.ids[offsets[a] : offsets[b]]
        writers[split].append(
            np.insert(ids.astype(writers[split].dtype), offsets[a + 1 : b + 1] - offsets[a], eod_id),
            encoded.lengths[a:b] + 1,
        )


def _write_shards(
    pf: ParquetFile, guard: ExactnessGuard, settings: EncodeSettings, out_dir: Path, stem: str, drops: Any
) -> dict[str, ShardWriter]:
    """Every document of the raw ParquetFile encoded by the guard's engine into closed train/val writers (aborted if
    the guard fails); parquet decoding and the guard's reference run on their own threads beside the engine."""
    writers = {}
    for split in SPLITS:
        (folder := out_dir / split).mkdir(parents=True, exist_ok=True)
        writers[split] = ShardWriter(folder / f"{stem}.npy", folder / f"{stem}.bin", settings.token_dtype)
    batches = _batches(pf, settings.val_fraction, settings.batch_documents, drops)
    try:
        for texts, val in prefetched(batches, READ_AHEAD, f"read-{stem}"):
            encoded = guard.engine.encode(texts)
            encoded.check_no_eod(settings.eod_id, f"partition {stem}")
            guard.check(texts, encoded)
            _append(writers, encoded, val, settings.eod_id)
        guard.end()
        for w in writers.values():  # hashing the files runs beside the guard's last comparisons
            w.close()
        guard.finish()
    except BaseException:
        guard.close()
        for w in writers.values():
            w.abort()
        raise
    return writers


def tokenize_partition(
    raw_path: Path,
    out_dir: Path,
    stem: str,
    engine: Encoder,
    reference: ReferenceEncoder,
    settings: EncodeSettings,
    drops: Any = None,
) -> tuple[dict[str, ShardWriter], TokenizeStats]:
    """Tokenize one raw parquet, less the documents whose hash is in `drops` (dedup's), into
    `<out_dir>/<split>/<stem>.npy|.bin` with `engine` behind the guard of `reference` (the writers name the files).

    `settings.on_mismatch` decides what a guard difference does: "fail" raises ExactnessError,
    "reference" re-encodes the whole partition with the reference (recorded in the stats)."""
    import pyarrow.parquet as pq

    started = time.perf_counter()
    pf = pq.ParquetFile(raw_path, pre_buffer=False)
    documents = pf.metadata.num_rows - (0 if drops is None else len(drops))
    guard = ExactnessGuard(engine, reference, stem, documents, policy=settings.on_mismatch)
    try:
        writers = _write_shards(pf, guard, settings, out_dir, stem, drops)
        result = guard.result()
    except ExactnessError:
        if settings.on_mismatch != "reference":
            raise
        result = replace(guard.result(), reencoded_with_reference=True)
        plain = ExactnessGuard(reference, reference, stem, documents, policy=settings.on_mismatch)
        again = pq.ParquetFile(raw_path, pre_buffer=False)
        writers = _write_shards(again, plain, settings, out_dir, stem, drops)
        result = replace(result, documents=plain.documents, tokens=plain.tokens)
    stats = TokenizeStats(
        tokens={s: w.tokens for s, w in writers.items()},
        documents={s: w.documents for s, w in writers.items()},
        seconds=time.perf_counter() - started,
        guard=result,
    )
    return writers, stats
