"""Tokenizers: a trained byte-level BPE, and a pretrained one loaded through transformers from a local path."""

import os

from shard_assets.lib.spec import TokenizerSpec
from shard_assets.lib.tokenizer import build_tokenizer, load_tokenizer

TEXTS = [f"Document number {i} says: the quick brown fox jumps over the lazy dog, {i * 7} times." for i in range(300)]


def test_trained_bpe_is_deterministic_and_round_trips():
    text_a, rec_a = build_tokenizer(TokenizerSpec(vocab_size=400), iter(TEXTS))
    text_b, rec_b = build_tokenizer(TokenizerSpec(vocab_size=400), iter(TEXTS))
    assert text_a == text_b and rec_a == rec_b
    assert rec_a.eod_id == 0 and rec_a.token_dtype == "uint16" and rec_a.vocab_size <= 400
    tok = load_tokenizer(text_a)
    sample = "Ünïcödé and emoji 🚀 survive byte-level BPE\n\twith tabs"
    assert tok.decode(tok.encode(sample, add_special_tokens=False).ids) == sample


def test_pretrained_tokenizer_from_a_local_path_through_transformers(tmp_path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import PreTrainedTokenizerFast

    text, _ = build_tokenizer(TokenizerSpec(vocab_size=400), iter(TEXTS))
    hf = PreTrainedTokenizerFast(tokenizer_object=load_tokenizer(text), eos_token="<|endoftext|>")
    hf.save_pretrained(tmp_path / "my-tokenizer")
    _, record = build_tokenizer(TokenizerSpec(kind="pretrained", name=str(tmp_path / "my-tokenizer")), iter(()))
    assert record.name == str(tmp_path / "my-tokenizer")
    assert record.eod_id == hf.eos_token_id == 0
    assert record.vocab_size == len(hf)


def test_training_reads_bounded_pieces():
    from shard_assets.lib.tokenizer import training_pieces

    pieces = list(training_pieces(["a" * 10, "b" * 25, "c" * 100], max_chars=40, piece_chars=8))
    assert max(map(len, pieces)) <= 8 and sum(map(len, pieces)) == 40
    assert "".join(pieces) == "a" * 10 + "b" * 25 + "c" * 5


def _store_with_bpe(tmp_path, partitions, budget_reached):
    """A store whose current tokenizer is a small BPE that read `partitions` (key -> file fingerprint)."""
    from shard_assets.lib.records import TrainingSample
    from shard_assets.lib.store.local import LocalFolderStore
    from shard_assets.lib.tokenizer import store_tokenizer, store_training_sample

    store = LocalFolderStore(tmp_path / "store")
    text, record = build_tokenizer(TokenizerSpec(vocab_size=300), iter(["some text to train on"] * 50))
    sample = TrainingSample(tuple(f"{k}@{f}" for k, f in partitions.items()), budget_reached)
    store_training_sample(store, record.fingerprint, sample)
    store_tokenizer(store, text, record)
    return store, text, record


def _registered(partitions):
    from shard_assets.lib.records import FilePiece, PartitionRecord

    return {k: PartitionRecord("web", (FilePiece(f"/src/{k}.jsonl", f, 10),)) for k, f in partitions.items()}


def test_the_forecast_says_beforehand_when_making_the_tokenizer_would_replace_it(tmp_path):
    from shard_assets.lib.tokenizer import tokenizer_forecast

    two = {"web.part0": "a1", "web.part1": "b1"}
    store, text, record = _store_with_bpe(tmp_path, two, budget_reached=False)
    bpe = TokenizerSpec(vocab_size=300)
    assert tokenizer_forecast(store, bpe, _registered(two)) is None  # the same partitions: the same BPE
    line = tokenizer_forecast(store, bpe, _registered({**two, "web.part2": "c1"}))
    assert line.startswith(f"this build replaces the tokenizer {record.fingerprint}: the BPE would be trained again")
    assert "(1 partitions new or changed, 0 gone since it was trained)" in line and "every token id changes" in line
    assert f'set [tokenizer] fingerprint = "{record.fingerprint}"' in line and "\n" not in line
    changed = tokenizer_forecast(store, bpe, _registered({"web.part0": "a2", "web.part1": "b1"}))
    assert "(1 partitions new or changed, 1 gone" in changed  # a file whose content changed
    assert tokenizer_forecast(store, TokenizerSpec(fingerprint=record.fingerprint), _registered({})) is None
    assert "fingerprint pins 0123456789abcdef" in tokenizer_forecast(
        store, TokenizerSpec(fingerprint="0123456789abcdef"), _registered(two)
    )
    (tmp_path / "same.json").write_text(text)
    (tmp_path / "other.json").write_text(text.replace('"<|endoftext|>"', '"<|end|>"'))
    assert tokenizer_forecast(store, TokenizerSpec(kind="file", path=str(tmp_path / "same.json")), {}) is None
    assert "other.json differs" in tokenizer_forecast(
        store, TokenizerSpec(kind="file", path=str(tmp_path / "other.json")), {}
    )
    assert tokenizer_forecast(store, TokenizerSpec(kind="pretrained", name="gpt2"), {}) is None  # not knowable: unsaid


def test_a_bpe_whose_budget_ended_its_reading_is_kept_when_partitions_arrive_after_what_it_read(tmp_path):
    from shard_assets.lib.tokenizer import tokenizer_forecast

    store, _, _ = _store_with_bpe(tmp_path, {"web.part0": "a1"}, budget_reached=True)
    bpe = TokenizerSpec(vocab_size=300)
    assert tokenizer_forecast(store, bpe, _registered({"web.part0": "a1", "web.part1": "b1"})) is None
    assert "would be trained again" in tokenizer_forecast(store, bpe, _registered({"web.part0": "a2"}))


def test_training_reads_record_how_far_the_training_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shard_assets.lib.records import RawRecord, SourceFileRef
    from shard_assets.lib.store.local import LocalFolderStore
    from shard_assets.lib.tokenizer import TrainingReads, training_pieces, training_texts

    store = LocalFolderStore(tmp_path)
    raws = []
    for i in range(3):
        pq.write_table(pa.table({"text": [f"document {i} " * 100] * 10}), tmp_path / f"r{i}.parquet")
        ref = SourceFileRef(f"/src/{i}", f"f{i}")
        raws.append(RawRecord(f"web.part{i}", "web", ref, f"r{i}.parquet", "", 10, "", ""))
    reads = TrainingReads()
    list(training_pieces(training_texts(store, raws, reads), 20_000))  # the budget ends within the second
    assert [r.partition for r in reads.started] == ["web.part0", "web.part1"] and not reads.finished
    whole = TrainingReads()
    list(training_pieces(training_texts(store, raws, whole), 10**9))
    assert len(whole.started) == 3 and whole.finished
