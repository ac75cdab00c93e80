"""The hot path writes shard files whose tokens decode back to each document's normalised text."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_assets.lib.text import is_val
from shard_loader.format.shard import HEADER_BYTES
from shard_assets.lib.spec import TokenizerSpec
from shard_assets.lib.encoders import (
    GUARD_BUDGET,
    GUARD_FLOOR_TOKENS,
    PIECE_CHARS,
    EncoderError,
    ReferenceEncoder,
    select_encoder,
)
from shard_assets.lib.encoding import MAX_BATCH_CHARS, EncodeSettings, tokenize_partition
from shard_assets.lib.layout import part_record_key, quarantine_key, raw_key, raw_record_key
from shard_assets.lib.records import Quarantine, RawRecord, SourceFileRef, get_record, put_record
from shard_assets.lib.shard_build import TokenizeJob, tokenize_partitions
from shard_assets.lib.splits import prove_split
from shard_assets.lib.store import LocalFolderStore
from shard_assets.lib.tokenizer import build_tokenizer, load_tokenizer

from tests.support.texts import doc_hashes, normalise

LONG = 1 << 16

VAL_FRACTION = 0.2


def _documents() -> list[str]:
    """Short documents, non-ASCII ones, long ones with and without spaces, CR line breaks, enough text for several
    batches."""
    rng = np.random.default_rng(1)
    words = ["alpha", "béta", "γάμμα", "日本語", "tab\there", "line\nbreak", "emoji🙂", "x"]
    docs = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 400, size=500)]
    docs.append(" ".join(rng.choice(words, size=40_000)))  # long, with spaces
    docs.append("ü" * (LONG * 2 + 7))  # long, without a space
    docs.append("a  " + " " * LONG + "\n\r\nb")  # a long whitespace run (old cuts changed ids here)
    docs.append("literal <|endoftext|> inside the text, twice: <|endoftext|>")
    docs.extend(" ".join(rng.choice(words, size=300_000)) for _ in range(3))  # > MAX_BATCH_CHARS together
    return [normalise(d) for d in docs]


def test_shards_decode_to_each_document(tmp_path):
    docs = _documents()
    assert max(map(len, docs)) > LONG and sum(map(len, docs)) > MAX_BATCH_CHARS
    hashes = doc_hashes(docs)
    pq.write_table(pa.table({"text": docs, "doc_hash": hashes}), tmp_path / "p.parquet", row_group_size=100)
    text, record = build_tokenizer(TokenizerSpec(vocab_size=400), iter(docs[:200]))
    tok = load_tokenizer(text)
    reference = ReferenceEncoder(text)

    settings = EncodeSettings(record.eod_id, record.token_dtype, VAL_FRACTION, batch_documents=64)
    writers, stats = tokenize_partition(
        tmp_path / "p.parquet", tmp_path / "out", "p", select_encoder(text), reference, settings
    )
    assert stats.guard.engine == "fastokens" and stats.guard.documents == len(docs) and stats.guard.differing == 0
    guard = (
        stats.guard
    )  # 1% of the documents and at least 64 while they fit in the guard's token budget, and the longest
    assert (
        guard.sampled >= 1
        and 0 < guard.sampled_tokens <= GUARD_FLOOR_TOKENS + GUARD_BUDGET * guard.tokens + 2 * PIECE_CHARS
    )

    val = is_val(hashes, VAL_FRACTION)
    for split, expected in (
        ("train", [d for d, v in zip(docs, val) if not v]),
        ("val", [d for d, v in zip(docs, val) if v]),
    ):
        npy, bin_ = tmp_path / "out" / split / "p.npy", tmp_path / "out" / split / "p.bin"
        assert (writers[split].npy_path, writers[split].bin_path) == (npy, bin_)
        tokens = np.load(npy, mmap_mode="r", allow_pickle=False)
        assert tokens.dtype == np.dtype(record.token_dtype) and tokens.ndim == 1 and tokens.offset == HEADER_BYTES
        offsets = np.fromfile(bin_, dtype="<i8")
        assert offsets[0] == 0 and offsets[-1] == len(tokens) == stats.tokens[split]
        assert len(offsets) - 1 == len(expected) == stats.documents[split]
        reference_ids = reference.encode(expected)
        for i, doc in enumerate(expected):
            ids = tokens[offsets[i] : offsets[i + 1]]
            assert ids[-1] == record.eod_id and record.eod_id not in ids[:-1]
            assert tok.decode(ids[:-1].tolist()) == doc
            assert np.array_equal(ids[:-1], reference_ids.document(i))  # the whole-document reference, exactly


def test_dedup_drops_are_left_out_as_the_raw_file_is_read_never_rewritten(tmp_path, monkeypatch):
    """Issue 48: tokenize and the split proof skip the documents dedup drops while reading the raw parquet; no second
    parquet of the kept documents is written (it cost a zstd compression of the whole partition)."""
    docs = [normalise(f"document {i} with a few words, some more words") for i in range(400)]
    hashes = doc_hashes(docs)
    pq.write_table(pa.table({"text": docs, "doc_hash": hashes}), tmp_path / "p.parquet", row_group_size=64)
    text, record = build_tokenizer(TokenizerSpec(vocab_size=300), iter(docs))
    monkeypatch.setattr(pq, "ParquetWriter", None)  # nothing may write a parquet file from here on
    dropped = hashes[::3]
    settings = EncodeSettings(record.eod_id, record.token_dtype, VAL_FRACTION, batch_documents=50)
    _, stats = tokenize_partition(
        tmp_path / "p.parquet",
        tmp_path / "out",
        "p",
        select_encoder(text),
        ReferenceEncoder(text),
        settings,
        pa.array(dropped),
    )
    kept = ~np.isin(hashes, dropped)
    val = is_val(hashes[kept], VAL_FRACTION)
    assert (
        stats.documents == {"train": int((~val).sum()), "val": int(val.sum())} and stats.guard.documents == kept.sum()
    )
    proof = prove_split(tmp_path / "p.parquet", VAL_FRACTION, stats.documents, pa.array(dropped))
    assert (proof.train_documents, proof.val_documents) == (int((~val).sum()), int(val.sum()))


def test_failed_partition_leaves_no_files(tmp_path):
    pq.write_table(pa.table({"text": ["a document"], "doc_hash": doc_hashes(["a document"])}), tmp_path / "p.parquet")

    text, _ = build_tokenizer(TokenizerSpec(vocab_size=300), iter(["a document"] * 10))

    class Broken(ReferenceEncoder):
        def _encode(self, texts):
            raise RuntimeError("tokenizer failed")

    with pytest.raises(RuntimeError, match="tokenizer failed"):
        tokenize_partition(
            tmp_path / "p.parquet",
            tmp_path / "out",
            "p",
            Broken(text),
            ReferenceEncoder(text),
            EncodeSettings(0, "uint16", 0.5),
        )
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_a_text_that_encodes_to_the_eod_id_fails_the_partition(tmp_path):
    pq.write_table(pa.table({"text": ["one", "two"], "doc_hash": doc_hashes(["one", "two"])}), tmp_path / "p.parquet")
    text, record = build_tokenizer(TokenizerSpec(vocab_size=300), iter(["one two"] * 10))

    class EodInside(ReferenceEncoder):
        def _encode(self, texts):
            encoded = super()._encode(texts)
            encoded.ids[-1] = record.eod_id
            return encoded

    with pytest.raises(EncoderError, match="partition p: document 1 of the batch encodes to the end-of-document id 0"):
        encoder = EodInside(text)  # as its own reference: the check holds whatever the engine
        tokenize_partition(
            tmp_path / "p.parquet",
            tmp_path / "out",
            "p",
            encoder,
            encoder,
            EncodeSettings(record.eod_id, "uint16", 0.5),
        )
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_normalise_keeps_every_line_break():
    assert normalise("a\r\nb\rc\nd\r\n\r\ne") == "a\nb\nc\nd\n\ne"


def _raw_partition(store, tmp_path, partition: str, docs: list[str]) -> None:
    """A raw partition as the raw asset leaves it: its parquet under its key, and its record."""
    path = tmp_path / f"{partition}.parquet"
    pq.write_table(pa.table({"text": docs, "doc_hash": doc_hashes(docs)}), path)
    key = raw_key(partition, partition.replace(".", ""))
    store.put_file(key, path)
    put_record(
        store,
        raw_record_key(partition),
        RawRecord(partition, "web", SourceFileRef(f"/src/{partition}", "f"), key, "-", len(docs), "v", "run"),
    )


def test_a_failing_partition_is_quarantined_naming_its_raw_file_while_the_others_are_stored(tmp_path):
    store = LocalFolderStore(tmp_path / "store")
    docs = [f"document {i} about alpha and beta" for i in range(200)]
    text, record = build_tokenizer(TokenizerSpec(vocab_size=300), iter(docs))
    _raw_partition(store, tmp_path, "web.a", docs[:100])
    _raw_partition(store, tmp_path, "web.b", docs[100:] + ["a BAD document"])
    reference = ReferenceEncoder(text)

    class Refuses(ReferenceEncoder):
        def _encode(self, texts):
            if any("BAD" in t for t in texts):
                raise EncoderError("tokenizers: cannot encode a BAD document")
            return super()._encode(texts)

    def job(engine, run_id):
        return TokenizeJob(
            store, record, engine, reference, EncodeSettings(record.eod_id, record.token_dtype, 0.2), run_id, "code"
        )

    outcome = tokenize_partitions(job(Refuses(text), "run-1"), ["web.a", "web.b"])
    assert [d.record.partition for d in outcome.stored] == ["web.a"] and list(outcome.failed) == ["web.b"]
    quarantined = get_record(store, quarantine_key(record.fingerprint, "web.b"), Quarantine, "test")
    assert (
        quarantined.error == "raw/web/b-webb.parquet: EncoderError: tokenizers: cannot encode a BAD document"
        and quarantined.run_id == "run-1"
    )
    assert store.exists(part_record_key(record.fingerprint, "web.a")) and not store.exists(
        part_record_key(record.fingerprint, "web.b")
    )
    assert outcome.stored[0].stats.documents == {s: e.documents for s, e in outcome.stored[0].record.shards.items()}
    assert len(outcome.stored[0].samples) == 3 and outcome.stored[0].samples[0].startswith("document ")
    again = tokenize_partitions(job(reference, "run-2"), ["web.b"])  # fixed: stored, and no longer quarantined
    assert [d.record.partition for d in again.stored] == ["web.b"] and not again.failed
    assert not store.exists(quarantine_key(record.fingerprint, "web.b"))


def test_the_asset_s_decoded_samples_read_a_prefix_of_a_long_document(tmp_path):
    """The UI's glance at a shard decodes at most a few hundred tokens of each first document, however long it is."""
    from shard_assets.lib.shard_build import decoded_samples
    from shard_loader.format import ShardWriter

    docs = ["a short first document", "line one\nline two " * 50_000]
    text, record = build_tokenizer(TokenizerSpec(vocab_size=300), iter(docs))
    reference, encoded = ReferenceEncoder(text), select_encoder(text).encode(docs)
    writer = ShardWriter(tmp_path / "s.npy", tmp_path / "s.bin", "uint16")
    writer.append(*encoded.with_eod(record.eod_id, "uint16", "test"))
    writer.close()
    seen = []
    decode = reference.tokenizer.decode

    class Counting:  # the tokenizer's decode, counting the ids it is given
        def decode(self, ids, **kw):
            seen.append(len(ids))
            return decode(ids, **kw)

    reference.tokenizer = Counting()
    assert decoded_samples(reference, writer, chars=160) == (
        "a short first document",
        docs[1].replace("\n", " ")[:160] + "…",
    )
    assert max(seen) <= 4 * 160 + 1 < len(encoded.document(1))
