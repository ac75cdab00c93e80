"""The tokenization hot path: raw parquet batches -> batch encode -> train/val shard files.

No Python loop runs per token; per document only the tokenizer's own result list is read.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .text import is_val
from shard_loader.format import SPLITS, ShardWriter

MAX_PIECE_CHARS = 1 << 16
MAX_BATCH_CHARS = 4 << 20  # the tokenizer holds ~100 bytes per token of a batch's Encodings: bound the batch by text, not rows


@dataclass
class TokenizeStats:
    tokens: dict[str, int]
    documents: dict[str, int]
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return sum(self.tokens.values()) / self.seconds if self.seconds else 0.0


def _pieces(texts: list[str]) -> tuple[list[str], np.ndarray | None]:
    """Cut documents longer than MAX_PIECE_CHARS before a space, so encoding stays linear in their size.

    Returns the pieces and, when any document was cut, each piece's document index.
    """
    if all(len(t) <= MAX_PIECE_CHARS for t in texts):
        return texts, None
    pieces, owner = [], []
    for i, text in enumerate(texts):
        start = 0
        while len(text) - start > MAX_PIECE_CHARS:
            cut = text.rfind(" ", start + 1, start + MAX_PIECE_CHARS)
            cut = cut if cut > start else start + MAX_PIECE_CHARS
            pieces.append(text[start:cut])
            owner.append(i)
            start = cut
        pieces.append(text[start:])
        owner.append(i)
    return pieces, np.asarray(owner, dtype=np.int64)


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


def encode_documents(tokenizer, texts: list[str], eod_id: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """All documents' tokens, each followed by `eod_id`, and each document's length (EOD included)."""
    pieces, owner = _pieces(texts)
    ids = [e.ids for e in tokenizer.encode_batch_fast(pieces, add_special_tokens=False)]
    piece_lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    lengths = piece_lengths if owner is None else np.bincount(owner, weights=piece_lengths, minlength=len(texts)).astype(np.int64)
    lengths += 1
    total = int(lengths.sum())
    out = np.empty(total, dtype=dtype)
    is_eod = np.zeros(total, dtype=bool)
    is_eod[np.cumsum(lengths) - 1] = True
    out[is_eod] = eod_id
    out[~is_eod] = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=total - len(texts))
    return out, lengths


def tokenize_partition(
    raw_path: Path, tokenizer, eod_id: int, dtype: str, val_fraction: float, out_dir: Path, stem: str, batch_documents: int = 1000
) -> tuple[dict[str, ShardWriter], TokenizeStats]:
    """Tokenize one raw parquet into `<out_dir>/<split>/<stem>.npy|.bin`; the closed writers name the files."""
    import pyarrow.parquet as pq

    started = time.perf_counter()
    writers = {}
    for split in SPLITS:
        (out_dir / split).mkdir(parents=True, exist_ok=True)
        writers[split] = ShardWriter(out_dir / split / f"{stem}.npy", out_dir / split / f"{stem}.bin", dtype)
    try:
        pf = pq.ParquetFile(raw_path, pre_buffer=False)
        for batch in pf.iter_batches(batch_size=batch_documents, columns=["text", "doc_hash"]):
            all_texts = batch.column(0).to_pylist()
            all_val = is_val(batch.column(1).to_numpy(), val_fraction)
            for chunk in by_size(all_texts):
                texts, val = all_texts[chunk], all_val[chunk]
                tokens, lengths = encode_documents(tokenizer, texts, eod_id, dtype)
                token_is_val = np.repeat(val, lengths)
                writers["train"].append(tokens[~token_is_val], lengths[~val])
                writers["val"].append(tokens[token_is_val], lengths[val])
        for w in writers.values():
            w.close()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    stats = TokenizeStats(
        tokens={s: w.tokens for s, w in writers.items()},
        documents={s: w.documents for s, w in writers.items()},
        seconds=time.perf_counter() - started,
    )
    return writers, stats
