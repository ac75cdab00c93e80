"""The hot path writes shard files whose tokens decode back to each document's normalised text."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_assets.lib.text import doc_hashes, is_val, normalise
from shard_loader.format.shard import HEADER_BYTES
from shard_assets.lib.spec import TokenizerSpec
from shard_assets.lib.encoding import MAX_BATCH_CHARS, MAX_PIECE_CHARS, tokenize_partition
from shard_assets.lib.tokenizer import build_tokenizer, load_tokenizer

VAL_FRACTION = 0.2


def _documents() -> list[str]:
    """Short documents, non-ASCII ones, one longer than a piece with spaces and one without, enough text for several batches."""
    rng = np.random.default_rng(1)
    words = ["alpha", "béta", "γάμμα", "日本語", "tab\there", "line\nbreak", "emoji🙂", "x"]
    docs = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 400, size=500)]
    docs.append(" ".join(rng.choice(words, size=40_000)))  # > MAX_PIECE_CHARS, cut before spaces
    docs.append("ü" * (MAX_PIECE_CHARS * 2 + 7))  # > MAX_PIECE_CHARS without a space: cut mid-word
    docs.extend(" ".join(rng.choice(words, size=300_000)) for _ in range(3))  # > MAX_BATCH_CHARS together
    return [normalise(d) for d in docs]


def test_shards_decode_to_each_document(tmp_path):
    docs = _documents()
    assert max(map(len, docs)) > MAX_PIECE_CHARS and sum(map(len, docs)) > MAX_BATCH_CHARS
    hashes = doc_hashes(docs)
    pq.write_table(pa.table({"text": docs, "doc_hash": hashes}), tmp_path / "p.parquet", row_group_size=100)
    text, record = build_tokenizer(TokenizerSpec(vocab_size=400), iter(docs[:200]))
    tok = load_tokenizer(text)

    writers, stats = tokenize_partition(tmp_path / "p.parquet", tok, record.eod_id, record.token_dtype, VAL_FRACTION, tmp_path / "out", "p", batch_documents=64)

    val = is_val(hashes, VAL_FRACTION)
    for split, expected in (("train", [d for d, v in zip(docs, val) if not v]), ("val", [d for d, v in zip(docs, val) if v])):
        npy, bin_ = tmp_path / "out" / split / "p.npy", tmp_path / "out" / split / "p.bin"
        assert (writers[split].npy_path, writers[split].bin_path) == (npy, bin_)
        tokens = np.load(npy, mmap_mode="r", allow_pickle=False)
        assert tokens.dtype == np.dtype(record.token_dtype) and tokens.ndim == 1 and tokens.offset == HEADER_BYTES
        offsets = np.fromfile(bin_, dtype="<i8")
        assert offsets[0] == 0 and offsets[-1] == len(tokens) == stats.tokens[split]
        assert len(offsets) - 1 == len(expected) == stats.documents[split]
        for i, doc in enumerate(expected):
            ids = tokens[offsets[i] : offsets[i + 1]]
            assert ids[-1] == record.eod_id and record.eod_id not in ids[:-1]
            assert tok.decode(ids[:-1].tolist()) == doc


def test_failed_partition_leaves_no_files(tmp_path):
    pq.write_table(pa.table({"text": ["a document"], "doc_hash": doc_hashes(["a document"])}), tmp_path / "p.parquet")

    class Broken:
        def encode_batch_fast(self, *args, **kwargs):
            raise RuntimeError("tokenizer failed")

    with pytest.raises(RuntimeError, match="tokenizer failed"):
        tokenize_partition(tmp_path / "p.parquet", Broken(), 0, "uint16", 0.5, tmp_path / "out", "p")
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
