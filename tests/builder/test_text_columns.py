"""Issue 35: the columnar normalisation and document hash (shard_assets/lib/text.py, on Arrow kernels) give byte for
byte what the per-document rule published so far gave, on the adversarial corpora of the tests and on random Unicode."""

import hashlib
from collections import Counter
import re
import unicodedata

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shard_assets.lib.text import column_hashes, normalise_column, to_arrow
from tests.builder.test_encoders import WORDS, _adversarial
from tests.builder.test_tokenize import _documents

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_BREAK = re.compile(r"\r\n?")
_SURROGATE = re.compile("[\ud800-\udfff]")


def published_normalise(text: str) -> str:
    """The rule as published before issue 35, per document in Python: the reference the columns must equal."""
    text = _LINE_BREAK.sub("\n", _SURROGATE.sub("\ufffd", text))
    return _CONTROL.sub("", unicodedata.normalize("NFC", text)).strip()


def published_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def _assert_same(texts: list[str]) -> None:
    got = normalise_column(to_arrow(texts))
    expected = [published_normalise(t) for t in texts]
    assert got.to_pylist() == expected
    assert column_hashes(got).tolist() == [published_hash(t) for t in expected]
    assert column_hashes(got.slice(1)).tolist() == [published_hash(t) for t in expected[1:]]  # an offset column


# Characters where the rule has edges: NFC pairs and reorderings (Latin, Hangul jamo, Indic and Tamil vowel signs that
# compose, singletons that decompose), controls C0/C1, every kind of whitespace str.strip removes and some it keeps,
# CR/LF, lone surrogates, and a character NFC leaves alone.
EDGES = (
    "e\u0301\u0308\u0323\u031b\u0345\u05b0\u0f71\u0f72\u1161\u11a8\u1100\uac00\u0b47\u0b3e\u0bc6\u0bbe\u0cd5\u0dcf"
    "\u212b\u2126\u0344\u0958\uf900\u1e9b\ufb1d\u00c5\u0041\u0300\u0327\u1dce\U0001d15e\U0001d165\U0001d16d\u3099"
    "\u304b\u0000\u0008\t\n\u000b\u000c\r\u001c\u001f \u007f\u0080\u0085\u009f\u00a0\u1680\u2000\u200a\u200b\u2028"
    "\u2029\u202f\u205f\u3000\ufeff\ud800\udfff\ufffd\U0001f600x"
)
edge_text = st.text(alphabet=st.sampled_from(EDGES), max_size=40)
any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)


def test_the_columns_equal_the_published_rule_on_the_adversarial_corpora():
    _assert_same(_documents())
    _assert_same(_adversarial() + WORDS)
    _assert_same(["", " ", "\r", "\r\n", "a\r\r\nb", "bad \ud800 text", "\x00\x85 \u3000e\u0301\u0000"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(edge_text, any_text), min_size=1, max_size=8))
def test_the_columns_equal_the_published_rule_on_random_unicode(texts):
    _assert_same(texts)


def test_every_character_alone_and_after_a_base_letter_is_normalised_as_published():
    """All of Unicode, each code point alone and between 'a' and a combining mark, in columns of 4,096."""
    points = [chr(i) for i in range(0x110000)]
    for start in range(0, len(points), 1 << 16):
        chunk = points[start : start + (1 << 16)]
        texts = [f"a{c}\u0301" for c in chunk] + chunk
        got = normalise_column(to_arrow(texts)).to_pylist()
        expected = [published_normalise(t) for t in texts]
        assert got == expected, next(t for t, g, e in zip(texts, got, expected) if g != e)


def test_hashes_of_an_empty_column_and_of_empty_texts():
    assert column_hashes(pa.array([], pa.large_string())).dtype == np.uint64
    assert column_hashes(to_arrow(["", ""])).tolist() == [published_hash("")] * 2


def test_a_raw_partition_holds_what_the_per_document_rule_keeps(tmp_path):
    """Ingest on columns (batches of 7, so duplicates and drops cross batches) keeps, hashes and counts exactly the
    documents the published per-document loop kept, in order, from a JSONL file holding lone surrogates and CRLF."""
    import json

    import pyarrow.parquet as pq

    from shard_assets.lib.raw_writer import HISTOGRAM_EDGES, write_raw_partition
    from shard_assets.lib.sources.listing import list_source_files
    from shard_assets.lib.spec import parse_spec

    docs = _adversarial()[:-1] + WORDS + ["  short ", "\x00", "\ud800 lone surrogate, long enough to be kept"]
    docs += docs[::3] + [" " + d + "\r\n" for d in docs[::5]]  # exact duplicates, and ones equal once normalised
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    spec = parse_spec(
        {
            "name": "t",
            "min_chars": 4,
            "batch_documents": 7,
            "sources": [{"name": "s", "uri": f"{tmp_path}/*.jsonl", "format": "jsonl"}],
        },
        "t",
    )
    stats = write_raw_partition(spec, list_source_files(spec.sources[0])[0], tmp_path / "raw.parquet")

    kept, seen, dropped = [], set(), {"empty": 0, "too_short": 0, "duplicate": 0}
    for text in map(published_normalise, docs):
        reason = "empty" if not text else "too_short" if len(text) < 4 else "duplicate" if text in seen else None
        if reason:
            dropped[reason] += 1
        else:
            seen.add(text)
            kept.append(text)
    table = pq.read_table(tmp_path / "raw.parquet")
    assert table.column("text").to_pylist() == kept
    assert table.column("doc_hash").to_pylist() == [published_hash(t) for t in kept]
    assert {k: stats.dropped[k] for k in dropped} == dropped
    assert (stats.documents_in, stats.documents_out) == (len(docs), len(kept))
    assert stats.bytes_in == sum(len(d.encode("utf-8", "surrogatepass")) for d in docs)
    assert stats.bytes_out == sum(len(t.encode()) for t in kept)
    edges = HISTOGRAM_EDGES[:-1]
    assert stats.length_histogram == Counter(max(lo for lo in edges if len(t) >= lo) for t in kept)
    assert normalise_column(pa.array(["e\u0301 x\r\n"], pa.string())).to_pylist() == [
        "\u00e9 x"
    ]  # a parquet file's string column


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), max_size=40), max_size=30))
def test_seen_hashes_answers_as_a_set_does_in_a_logarithmic_number_of_sorted_runs(batches):
    """Ingest's within-file copy check (issue 48: it rescanned every hash seen per batch, quadratic in a file's
    documents): membership equals a set's after each batch, and n hashes sit in at most log2(n) + 1 sorted runs."""
    from shard_assets.lib.raw_writer import SeenHashes

    seen, truth = SeenHashes(), set()
    for batch in batches:
        hashes = np.array(batch, dtype=np.uint64)
        assert seen.contains(hashes).tolist() == [h in truth for h in batch]
        fresh = np.unique(hashes[~seen.contains(hashes)])
        seen.add(fresh)
        truth |= set(fresh.tolist())
        assert all(np.all(run[:-1] < run[1:]) for run in seen.runs)
        assert len(seen.runs) <= max(1, len(truth).bit_length())
    assert sorted(np.concatenate(seen.runs or [np.empty(0, np.uint64)]).tolist()) == sorted(truth)
