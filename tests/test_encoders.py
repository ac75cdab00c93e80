"""The encoder layer: the chosen engine gives exactly the reference's ids on every supported shape, the guard fails a partition that differs, other shapes fall back."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from shard_assets.lib.text import doc_hashes, normalise
from shard_assets.lib.encoders import (
    VERIFIED_PATTERNS,
    Encoded,
    EncoderError,
    ExactnessError,
    ExactnessGuard,
    FastokensEncoder,
    ReferenceEncoder,
    encoders_for,
    select_encoder,
)
from shard_assets.lib.encoding import EncodeSettings, tokenize_partition

EOD = "<|endoftext|>"
SPECIALS = [EOD, "<|im_start|>", "<|im_end|>", "<|eot_id|>"]
WORDS = ["the", "quick", "brown", "fox's", "DON'T", "I'LL", "мир", "世界", "مرحبا", "שלום", "नमस्ते", "ที่นี่", "🙂", "👍🏽",
         "👨‍👩‍👧‍👦", "e\u0301", "a\u0308\u0323", "ﬁ", "Å", "\u1100\u1161\u11a8", "1234567", "３４５", "x" * 40, "...", "—", "\t", "\n", "\r\n", "  "]


def _adversarial() -> list[str]:
    """Long whitespace runs, mixed scripts, emoji, combining marks, literal special tokens, CR/LF, and a 3 MB document."""
    rng = np.random.default_rng(7)
    mixed = [" ".join(rng.choice(WORDS, size=int(n))) for n in rng.integers(1, 300, size=150)]
    return mixed + [
        "",
        " " * 100_000,
        "\n" * 50_000,
        "a" + " " * 70_000 + "b",
        "a  \n" + " \t\n" * 30_000 + "z",
        "x" * 200_000,
        "1" * 10_000,
        "text " + " then ".join(SPECIALS) + " <|endof <|im_start|>user\nhi<|im_end|>",
        EOD,
        "e" + "\u0301" * 5000,
        "line\r\nline\rline\n\n\n",
        "".join(rng.choice(WORDS, size=600_000)),  # several MB, one document
    ]


def _tokenizer(pre_tokenizer, normalizer=None, ignore_merges=False, specials=(EOD,)) -> str:
    """A small BPE of the given shape, trained here on the adversarial words."""
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=list(specials), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_adversarial()[:150] * 3, trainer=trainer)
    return tok.to_str()


def _split(pattern: str):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


SHAPES = {
    "byte-level BPE (GPT-2 regex)": lambda: _tokenizer(pre_tokenizers.ByteLevel(add_prefix_space=False)),
    **{f"Split({name}) + ByteLevel(use_regex=False), ignore_merges": (lambda p=p: _tokenizer(_split(p), ignore_merges=True)) for name, p in VERIFIED_PATTERNS.items()},
    "NFC + Split(qwen2)": lambda: _tokenizer(_split(VERIFIED_PATTERNS["qwen2"]), normalizers.NFC()),
    "added special tokens": lambda: _tokenizer(_split(VERIFIED_PATTERNS["llama3"]), specials=SPECIALS),
}


@pytest.fixture(scope="module")
def adversarial():
    return _adversarial()


@pytest.mark.integration  # ~5 s per shape: the reference encodes a 3 MB document
@pytest.mark.parametrize("shape", SHAPES)
def test_the_chosen_engine_equals_the_reference_on_adversarial_text(shape, adversarial):
    tokenizer_json = SHAPES[shape]()
    engine, reference = select_encoder(tokenizer_json), ReferenceEncoder(tokenizer_json)
    assert engine.name == "fastokens", engine.reason
    got, expected = engine.encode(adversarial), reference.encode(adversarial)
    assert got.ids.dtype == np.uint32 and got.lengths.dtype == np.int64
    differing = [i for i in range(len(adversarial)) if not np.array_equal(got.document(i), expected.document(i))]
    assert differing == [] and np.array_equal(got.lengths, expected.lengths)
    specials = [reference.tokenizer.token_to_id(s) for s in SPECIALS if reference.tokenizer.token_to_id(s) is not None]
    assert not np.isin(got.ids, specials).any()  # literal special-token strings are ordinary text


def test_one_document_is_one_document_whatever_the_batch():
    tokenizer_json = SHAPES["byte-level BPE (GPT-2 regex)"]()
    engine = select_encoder(tokenizer_json)
    docs = ["a   ", "  b", " " * 5]
    together = engine.encode(docs)
    assert [engine.encode([d]).ids.tolist() for d in docs] == [together.document(i).tolist() for i in range(3)]


def test_a_lone_surrogate_is_named_and_normalise_replaces_it():
    tokenizer_json = SHAPES["byte-level BPE (GPT-2 regex)"]()
    for encoder in (select_encoder(tokenizer_json), ReferenceEncoder(tokenizer_json)):
        with pytest.raises(EncoderError, match="document 1 of the batch is not valid Unicode"):
            encoder.encode(["fine", "bad \ud800 text"])
    assert normalise("bad \ud800 text") == "bad \ufffd text"


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda c: c["model"].update(byte_fallback=True), "byte_fallback"),
        (lambda c: c.update(normalizer={"type": "NFKC"}), "normalizer 'NFKC'"),
        (lambda c: c["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex=r"\w+|\s+"), "split regex"),
        (lambda c: c["pre_tokenizer"]["pretokenizers"][1].update(add_prefix_space=True), "pre-tokenizer"),
        (lambda c: c["added_tokens"].append({**c["added_tokens"][0], "id": 5000, "content": "plain", "special": False}), "not special"),
        (lambda c: c.update(model={"type": "WordPiece", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100}), "model type 'WordPiece'"),
    ],
)
def test_an_unverified_shape_falls_back_to_the_reference_and_says_why(edit, reason):
    config = json.loads(SHAPES["added special tokens"]())
    edit(config)
    encoder = select_encoder(json.dumps(config))
    assert isinstance(encoder, ReferenceEncoder) and encoder.reason.startswith("reference fallback:") and reason in encoder.reason
    engine, reference = encoders_for(json.dumps(config))
    assert engine is reference and not ExactnessGuard(engine, reference, "p", 100).checks  # nothing to compare, nothing re-encoded


class _Disagrees(FastokensEncoder):
    """fastokens made to disagree on documents holding a marker."""

    def _encode(self, texts):
        encoded = super()._encode(texts)
        ids = encoded.ids.copy()
        for i, t in enumerate(texts):
            if "MARK" in t:
                ids[encoded.offsets[i]] ^= 1
        return Encoded(ids, encoded.lengths)


def _partition(tmp_path, docs):
    pq.write_table(pa.table({"text": docs, "doc_hash": doc_hashes(docs)}), tmp_path / "p.parquet", row_group_size=500)
    return tmp_path / "p.parquet"


def _run(tmp_path, docs, encoder, reference, on_mismatch="fail"):
    settings = EncodeSettings(0, "uint16", 0.1, batch_documents=300, on_mismatch=on_mismatch)
    return tokenize_partition(_partition(tmp_path, docs), tmp_path / "out", "p", encoder, reference, settings)


@pytest.fixture(scope="module")
def gpt2_json():
    return SHAPES["byte-level BPE (GPT-2 regex)"]()


@pytest.mark.parametrize("where", ["first", "longest"])
def test_the_guard_fails_a_partition_where_the_engine_disagrees(tmp_path, gpt2_json, where):
    docs = [f"document {i} the quick brown fox" for i in range(5000)]
    at = 0 if where == "first" else 4321
    docs[at] = "MARK " + ("the quick brown fox " * 200 if where == "longest" else "")
    engine, reference = _Disagrees(gpt2_json, "test"), ReferenceEncoder(gpt2_json)
    assert where == "first" or at % ExactnessGuard(engine, reference, "p", len(docs)).stride  # the longest is outside the strided sample
    with pytest.raises(ExactnessError, match=f"partition p: fastokens .* differs from the reference on 1 of .* \\(first: document {at}\\)"):
        _run(tmp_path, docs, engine, reference)
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_the_reference_policy_re_encodes_the_partition_and_says_so(tmp_path, gpt2_json):
    docs = ["MARK first"] + [f"document {i}" for i in range(999)]
    reference = ReferenceEncoder(gpt2_json)
    writers, stats = _run(tmp_path, docs, _Disagrees(gpt2_json, "test"), reference, on_mismatch="reference")
    assert stats.guard.reencoded_with_reference and stats.guard.differing == 1 and stats.guard.documents == 1000
    tokens = np.concatenate([np.load(w.npy_path) for w in writers.values()])
    assert len(tokens) == int(reference.encode(docs).lengths.sum()) + len(docs)


def test_the_sample_is_at_least_one_percent_and_64_documents_and_holds_the_longest(gpt2_json):
    engine, reference = select_encoder(gpt2_json), ReferenceEncoder(gpt2_json)
    for n in (10, 100, 6_433, 20_050):
        guard = ExactnessGuard(engine, reference, f"part-{n}", n)
        docs = [f"doc {i}" for i in range(n)]
        for start in range(0, n, 3000):
            batch = docs[start : start + 3000]
            guard.check(batch, engine.encode(batch))
        result = guard.finish()
        assert result.documents == n and result.differing == 0
        assert result.sampled >= min(n, max(64, n / 100)) and result.engine == "fastokens"
        assert result.sampled <= max(64, n / 100) * 1.6 + 1  # not much more: the reference costs ~100x the engine


@pytest.mark.parametrize(
    "value, message",
    [("refrence", r"spec.toml.on_mismatch: 'refrence' is not one of \('fail', 'reference'\); did you mean 'reference'\?"), (1, r"spec.toml.on_mismatch: expected str, got 1")],
)
def test_the_mismatch_policy_is_a_validated_spec_field(value, message):
    from shard_assets.lib.errors import SpecError
    from shard_assets.lib.spec import parse_spec

    source = {"name": "d", "uri": "/d"}
    assert parse_spec({"name": "t", "sources": [source]}, "spec.toml").on_mismatch == "fail"
    assert parse_spec({"name": "t", "on_mismatch": "reference", "sources": [source]}, "spec.toml").on_mismatch == "reference"
    with pytest.raises(SpecError, match=message):
        parse_spec({"name": "t", "on_mismatch": value, "sources": [source]}, "spec.toml")


def test_the_build_follows_the_spec_s_mismatch_policy(tmp_path, gpt2_json):
    from shard_assets.lib.records import RawRecord, SourceFileRef, TokenizerRecord
    from shard_assets.lib.shard_build import TokenizeJob, build_partition_shards
    from shard_assets.lib.store import LocalFolderStore

    store = LocalFolderStore(tmp_path / "store")
    store.put_file("raw/p.parquet", _partition(tmp_path, ["MARK first"] + [f"document {i}" for i in range(199)]))
    raw = RawRecord("p", "src", SourceFileRef("/src/p", "f"), "raw/p.parquet", "-", 200, "v", "run")
    tokenizer = TokenizerRecord("t", "fp", 1200, 0, "uint16")
    engine, reference = _Disagrees(gpt2_json, "test"), ReferenceEncoder(gpt2_json)
    def job(on_mismatch):
        return TokenizeJob(store, tokenizer, engine, reference, EncodeSettings(0, "uint16", 0.1, 100, on_mismatch), "run", "code")

    built = build_partition_shards(job("reference"), raw, tmp_path / "work")
    assert built.record.encoder.reencoded_with_reference and built.record.encoder.differing == 1
    with pytest.raises(ExactnessError):
        build_partition_shards(job("fail"), raw, tmp_path / "work2")
