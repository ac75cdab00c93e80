"""The encoder layer: the chosen engine gives exactly the reference's ids on every supported shape, the guard fails a
partition that differs, other shapes fall back."""

import json
import os
import random
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from tests.support.texts import doc_hashes, normalise
from shard_assets.lib.encoders import (
    GUARD_BUDGET,
    GUARD_FLOOR_TOKENS,
    MAX_PIECE_CHARS,
    PIECE_CHARS,
    SAFE_CUTS,
    VERIFIED_PATTERNS,
    Encoded,
    EncoderError,
    ExactnessError,
    ExactnessGuard,
    FastokensEncoder,
    ReferenceEncoder,
    encoders_for,
    piece_bounds,
    select_encoder,
)
from shard_assets.lib.encoding import EncodeSettings, tokenize_partition

EOD = "<|endoftext|>"
SPECIALS = [EOD, "<|im_start|>", "<|im_end|>", "<|eot_id|>"]
WORDS = [
    "the",
    "quick",
    "brown",
    "fox's",
    "DON'T",
    "I'LL",
    "мир",
    "世界",
    "مرحبا",
    "שלום",
    "नमस्ते",
    "ที่นี่",
    "🙂",
    "👍🏽",
    "👨‍👩‍👧‍👦",
    "e\u0301",
    "a\u0308\u0323",
    "ﬁ",
    "Å",
    "\u1100\u1161\u11a8",
    "1234567",
    "３４５",
    "x" * 40,
    "...",
    "—",
    "\t",
    "\n",
    "\r\n",
    "  ",
]


def _adversarial() -> list[str]:
    """Long whitespace runs, mixed scripts, emoji, combining marks, literal special tokens, CR/LF, and a 3 MB
    document."""
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
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_adversarial()[:150] * 3, trainer=trainer)
    return tok.to_str()


def _split(pattern: str):
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


SHAPES = {
    "byte-level BPE (GPT-2 regex)": lambda: _tokenizer(pre_tokenizers.ByteLevel(add_prefix_space=False)),
    **{
        f"Split({name}) + ByteLevel(use_regex=False), ignore_merges": (
            lambda p=p: _tokenizer(_split(p), ignore_merges=True)
        )
        for name, p in VERIFIED_PATTERNS.items()
    },
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
        (
            lambda c: c["added_tokens"].append(
                {**c["added_tokens"][0], "id": 5000, "content": "plain", "special": False}
            ),
            "not special",
        ),
        (
            lambda c: c.update(
                model={
                    "type": "WordPiece",
                    "vocab": {"[UNK]": 0},
                    "unk_token": "[UNK]",
                    "continuing_subword_prefix": "##",
                    "max_input_chars_per_word": 100,
                }
            ),
            "model type 'WordPiece'",
        ),
    ],
)
def test_an_unverified_shape_falls_back_to_the_reference_and_says_why(edit, reason):
    config = json.loads(SHAPES["added special tokens"]())
    edit(config)
    encoder = select_encoder(json.dumps(config))
    assert (
        isinstance(encoder, ReferenceEncoder)
        and encoder.reason.startswith("reference fallback:")
        and reason in encoder.reason
    )
    engine, reference = encoders_for(json.dumps(config))
    assert (
        engine is reference and not ExactnessGuard(engine, reference, "p", 100).checks
    )  # nothing to compare, nothing re-encoded


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
    assert (
        where == "first" or at % ExactnessGuard(engine, reference, "p", len(docs)).stride
    )  # the longest is outside the strided sample
    with pytest.raises(
        ExactnessError,
        match=f"partition p: fastokens .* differs from the reference on 1 of .* \\(first: document {at}\\)",
    ):
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
    [
        (
            "refrence",
            r"spec.toml.on_mismatch: 'refrence' is not one of \('fail', 'reference'\); did you mean 'reference'\?",
        ),
        (1, r"spec.toml.on_mismatch: expected str, got 1"),
    ],
)
def test_the_mismatch_policy_is_a_validated_spec_field(value, message):
    from shard_assets.lib.errors import SpecError
    from shard_assets.lib.spec import parse_spec

    source = {"name": "d", "uri": "/d"}
    assert parse_spec({"name": "t", "sources": [source]}, "spec.toml").on_mismatch == "fail"
    assert (
        parse_spec({"name": "t", "on_mismatch": "reference", "sources": [source]}, "spec.toml").on_mismatch
        == "reference"
    )
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
        return TokenizeJob(
            store, tokenizer, engine, reference, EncodeSettings(0, "uint16", 0.1, 100, on_mismatch), "run", "code"
        )

    built = build_partition_shards(job("reference"), raw, tmp_path / "work")
    assert built.record.encoder.reencoded_with_reference and built.record.encoder.differing == 1
    with pytest.raises(ExactnessError):
        build_partition_shards(job("fail"), raw, tmp_path / "work2")


# Long documents: the guard compares them in pieces cut where the verified split regexes always split.

CUT_FRAGMENTS = [
    "\n",
    "\n\n",
    "\n\n\n",
    "\r",
    "\r\n",
    "\r\r",
    " ",
    "  ",
    "   ",
    "\t",
    " \t\n",
    "\n ",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1f",
    "\x85",
    "\xa0",
    "\u2028",
    "\u3000",
    "'",
    "'s",
    "'LL",
    "'ve",
    "a",
    "Z",
    "word",
    "é",
    "e\u0301",
    "\u0301",
    "\u0308\u0323",
    "Å",
    "\u1100\u1161",
    "1",
    "123",
    "4567",
    "½",
    "٣",
    "中文",
    "🙂",
    "👍🏽",
    ".",
    ",",
    "(",
    "-",
    "_",
    "...",
    "—",
    *SPECIALS,
    "<|endof",
    "|>",
    "<|",
]


def _cut_shapes() -> dict[str, str]:
    """Every verified split regex, with and without NFC, over one BPE trained without any split on text made of
    CUT_FRAGMENTS: its merges cross spaces, line breaks and punctuation, so a split that moved would change the ids."""
    rng = random.Random(5)
    corpus = ["".join(rng.choice(CUT_FRAGMENTS) for _ in range(rng.randint(1, 40))) for _ in range(3000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=3000,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    splits = {
        "ByteLevel (GPT-2 regex)": pre_tokenizers.ByteLevel(add_prefix_space=False),
        **{f"Split({n})": _split(p) for n, p in VERIFIED_PATTERNS.items()},
    }
    shapes = {}
    for name, pre_tokenizer in splits.items():
        for normalizer in (None, normalizers.NFC()):
            tok.pre_tokenizer, tok.normalizer = pre_tokenizer, normalizer
            shapes[name + (" + NFC" if normalizer else "")] = tok.to_str()
    return shapes


@pytest.fixture(scope="module")
def cut_references():
    """{shape: its reference}, every shape one fastokens is chosen for."""
    shapes = _cut_shapes()
    assert all(select_encoder(tokenizer_json).name == "fastokens" for tokenizer_json in shapes.values())
    return {shape: ReferenceEncoder(tokenizer_json) for shape, tokenizer_json in shapes.items()}


_text_around_cuts = st.lists(st.one_of(st.sampled_from(CUT_FRAGMENTS), st.text(max_size=3)), max_size=60).map("".join)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(_text_around_cuts, min_size=1, max_size=8), size=st.integers(1, 12))
def test_cutting_at_safe_cuts_never_changes_the_reference_ids(cut_references, texts, size):
    for shape, reference in cut_references.items():
        assert reference.cuts is not None, shape
        whole = reference.encode(texts)
        for i, text in enumerate(texts):
            bounds = piece_bounds(text, reference.cuts, size)
            assert np.array_equal(
                reference.encode([text[a:b] for a, b in zip(bounds, bounds[1:])]).ids, whole.document(i)
            ), (shape, text, bounds)


@pytest.mark.parametrize("name", VERIFIED_PATTERNS)
def test_a_cut_anywhere_else_could_change_the_split(name):
    """The property above is not trivial: the same text cut where the regex need not split pre-tokenizes differently."""
    text, split = "end.\n\nNext  word", pre_tokenizers.Split(Regex(VERIFIED_PATTERNS[name]), behavior="isolated")
    whole = [s for s, _ in split.pre_tokenize_str(text)]
    cut = lambda at: [s for a, b in zip([0, *at], [*at, len(text)]) for s, _ in split.pre_tokenize_str(text[a:b])]  # noqa: E731
    safe = [m.start() for m in SAFE_CUTS[VERIFIED_PATTERNS[name]].finditer(text)]
    assert safe and cut(safe) == whole
    assert cut([text.index("word")]) != whole  # inside a whitespace run
    assert (
        cut([m.start() for m in SAFE_CUTS[VERIFIED_PATTERNS["llama3" if name == "gpt2" else "gpt2"]].finditer(text)])
        != whole
    )  # the other family's cuts


def _long_document(chars: int, seed: int = 3) -> str:
    """Prose-like text (words, punctuation, single and double line breaks) of about `chars` characters."""
    rng = np.random.default_rng(seed)
    words = np.array(
        [
            "the",
            "quick",
            "brown",
            "fox's",
            "jumps",
            "over",
            "мир",
            "世界",
            "1984",
            "e\u0301t\u00e9",
            "(see",
            "below).",
            "end.\n\n",
            "line\n",
        ]
    )
    return " ".join(rng.choice(words, size=chars // 5))


class _DiffersAtMark(FastokensEncoder):
    """fastokens made to differ at the first token of each ' MARK' (a safe cut) in texts of at least `min_chars`: with
    `min_chars` above a piece, only in its ids of a whole long document; with 0, in its ids of any text holding it."""

    def __init__(self, tokenizer_json: str, min_chars: int = 0):
        super().__init__(tokenizer_json, "test")
        self.min_chars = min_chars

    def _encode(self, texts):
        encoded = super()._encode(texts)
        ids = encoded.ids.copy()
        for i, text in enumerate(texts):
            if len(text) >= self.min_chars and " MARK" in text:
                segments = super()._encode(re.split("(?= MARK)", text))  # each after the first starts with ' MARK'
                at = encoded.offsets[i] + segments.offsets[1:-1]
                ids[at] = np.where(ids[at] == 5, 6, 5)
        return Encoded(ids, encoded.lengths)


def _guarded(guard, docs, batch=50):
    for start in range(0, len(docs), batch):
        texts = docs[start : start + batch]
        guard.check(texts, guard.engine.encode(texts))
    return guard.finish()


@pytest.mark.parametrize(
    "inconsistent", [True, False], ids=["only in the whole document's ids", "in every encoding of that text"]
)
def test_a_difference_inside_a_long_document_fails_the_partition_naming_where(gpt2_json, inconsistent):
    docs = [f"document {i} the quick brown fox" for i in range(300)]
    long = _long_document(20 * PIECE_CHARS)
    at = len(long) * 2 // 3
    at = long.index(" ", at)
    docs[150] = long[:at] + " MARK" + long[at:]
    engine, reference = _DiffersAtMark(gpt2_json, 2 * PIECE_CHARS if inconsistent else 0), ReferenceEncoder(gpt2_json)
    # an engine wrong only on whole documents is caught whatever the budget (it re-encodes the sampled ones in pieces);
    # one wrong on that text everywhere is caught where the reference compares the piece holding it: here, all of them
    guard = ExactnessGuard(engine, reference, "p", len(docs), budget=0.02 if inconsistent else 1.0)
    with pytest.raises(
        ExactnessError,
        match=(
            r"partition p: fastokens .* differs from the reference on 1 of \d+ sampled documents "
            r"\(first: document 150, characters ([\d,]+)-([\d,]+) of ([\d,]+)"
        ),
    ) as failed:
        _guarded(guard, docs)
    a, b, n = (
        int(x.replace(",", ""))
        for x in re.search(r"characters ([\d,]+)-([\d,]+) of ([\d,]+)", str(failed.value)).groups()
    )
    assert a <= at < b and b - a < 2 * PIECE_CHARS and n == len(docs[150])
    assert guard.result().differing == 1 and guard.result().first_differing == 150


def test_a_difference_in_a_piece_under_the_reference_policy_re_encodes_the_partition(tmp_path, gpt2_json):
    long = _long_document(8 * PIECE_CHARS)
    docs = [f"document {i}" for i in range(99)] + [long[: len(long) // 2] + " MARK" + long[len(long) // 2 :]]
    reference = ReferenceEncoder(gpt2_json)
    writers, stats = _run(
        tmp_path, docs, _DiffersAtMark(gpt2_json, 2 * PIECE_CHARS), reference, on_mismatch="reference"
    )
    assert stats.guard.reencoded_with_reference and stats.guard.differing == 1 and stats.guard.first_differing == 99
    tokens = np.concatenate([np.load(w.npy_path) for w in writers.values()])
    assert len(tokens) == int(reference.encode(docs).lengths.sum()) + len(docs)


def _mb_partition() -> list[str]:
    """A partition of web-sized documents with MB-sized ones among them, the longest in the middle."""
    docs = [
        _long_document(int(n), seed=i) for i, n in enumerate(np.random.default_rng(4).integers(200, 3000, size=2000))
    ]
    for i, at in enumerate(range(3, 2000, 250)):
        docs[at] = _long_document((1 << 20) + i * 50_000, seed=100 + i)
    return docs


class _Measured(ReferenceEncoder):
    """The reference, noting the longest text it was given."""

    longest = 0

    def _encode(self, texts):
        self.longest = max(self.longest, *map(len, texts))
        return super()._encode(texts)


def test_the_guard_s_share_of_tokens_stays_within_its_budget_with_mb_sized_documents(gpt2_json):
    docs = _mb_partition()
    engine, reference = select_encoder(gpt2_json), _Measured(gpt2_json)
    results = [_guarded(ExactnessGuard(engine, reference, "p", len(docs)), docs) for _ in range(2)]
    result = results[0]
    assert results[1] == result  # the sample depends on the data only
    longest = max(map(len, docs))
    piece_tokens = result.tokens * PIECE_CHARS / sum(map(len, docs)) * 2  # one piece, generously
    # every 31st document while the budget allows (0.2% of the tokens: 31 of the 65 here), and the longest
    assert result.differing == 0 and result.documents == len(docs) and result.sampled >= 30
    assert (
        result.sampled_tokens <= GUARD_FLOOR_TOKENS + GUARD_BUDGET * result.tokens + piece_tokens
    )  # a few percent, not the MB documents whole
    assert result.sampled_tokens / result.tokens < 0.035, result
    assert (
        longest > 30 * PIECE_CHARS and reference.longest < PIECE_CHARS + 100
    )  # the reference never held a long document


def test_text_without_a_safe_cut_is_never_given_to_the_reference_whole(gpt2_json):
    """A document whose first 1.2M characters hold no safe cut: the reference compares its other pieces, never that
    one."""
    docs = [f"document {i} the quick brown fox" for i in range(100)] + [
        "a1" * 600_000 + " " + _long_document(4 * PIECE_CHARS)
    ]
    engine, reference = select_encoder(gpt2_json), _Measured(gpt2_json)
    result = _guarded(ExactnessGuard(engine, reference, "p", len(docs), budget=1.0), docs)
    assert result.differing == 0 and result.sampled == len(docs) and 0 < result.sampled_tokens < result.tokens - 600_000
    assert reference.longest <= MAX_PIECE_CHARS < 1_200_000


def test_the_longest_document_is_compared_at_least_in_part_whatever_the_budget(gpt2_json):
    """A difference in every piece of the longest document is found though the budget leaves it one piece."""
    long = _long_document(3 << 20)
    marked = " MARK".join(
        long[a:b]
        for a, b in zip(
            range(0, len(long), PIECE_CHARS // 2), range(PIECE_CHARS // 2, len(long) + PIECE_CHARS, PIECE_CHARS // 2)
        )
    )
    docs = [f"document {i} the quick brown fox" for i in range(200)] + [marked] + [f"document {i}" for i in range(200)]
    engine, reference = _DiffersAtMark(gpt2_json), ReferenceEncoder(gpt2_json)
    guard = ExactnessGuard(
        engine, reference, "p", len(docs), budget=0.0
    )  # the floor only: less than the longest document's first piece
    with pytest.raises(ExactnessError, match=r"\(first: document 200, characters"):
        _guarded(guard, docs)
    assert guard.result().sampled_tokens < 3 * GUARD_FLOOR_TOKENS


BUILD_PEAK_RSS = """
import sys
from shard_assets.cli import main
code = main(["build", "--spec", sys.argv[1], "--store", sys.argv[2], "--workers", "1"])
print("VmHWM", next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1], flush=True)
sys.exit(code)
"""


@pytest.mark.system  # a whole build, ~1 min here
def test_a_build_over_one_20_mib_document_peaks_under_1_gib(tmp_path):
    """`shard-assets build` of a source holding one 20 MiB document (the Python standard library's sources joined)
    and a few small ones, in its own process: its peak RSS (VmHWM) stays under 1 GiB, because the guard compares
    pieces of it."""
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    from shard_assets.lib.tokenizer import train_bpe

    files, text = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")), []
    while sum(map(len, text)) < 20 << 20:
        text.append(files[len(text)].read_text(errors="replace"))
    document = "\n\n".join(text)[: 20 << 20]
    (tmp_path / "src").mkdir()
    with open(tmp_path / "src" / "big.jsonl", "w") as out:
        out.write(json.dumps({"text": document}) + "\n")
        out.writelines(
            json.dumps({"text": f"A small document, number {i}, beside the big one."}) + "\n" for i in range(50)
        )
    (tmp_path / "tokenizer.json").write_text(train_bpe([document[: 2 << 20]], 4096, EOD).to_str())
    (tmp_path / "spec.toml").write_text(
        f'name = "big"\nmin_chars = 10\nval_fraction = 0.0\n[tokenizer]\nkind = "file"\npath = "tokenizer.json"\n'
        f'[[sources]]\nname = "js"\nuri = "{tmp_path}/src/*.jsonl"\nformat = "jsonl"\n'
    )
    (tmp_path / "home").mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", BUILD_PEAK_RSS, str(tmp_path / "spec.toml"), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    peak = int(re.search(r"^VmHWM (\d+)$", out.stdout, re.M).group(1)) << 10
    [part] = [json.loads(p.read_text()) for p in (tmp_path / "store").glob("tokenized/*/parts/*.json")]
    guard = part["encoder"]
    assert (
        guard["engine"] == "fastokens"
        and guard["differing"] == 0
        and guard["documents"] == 51
        and guard["sampled"] >= 1
    )
    assert 0 < guard["sampled_tokens"] <= 0.035 * guard["tokens"], guard  # pieces of the big document, not all of it
    assert peak < 1 << 30, f"peak RSS {peak / 2**20:.0f} MiB"
