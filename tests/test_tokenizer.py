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
