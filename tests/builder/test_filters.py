"""The quality filters (issue 44): datatrove's FineWeb recipe decided the reference's way, its text rewritten the
reference's way, on a held-out web-like corpus; their [filters] table and its refusals; the spaCy guard.

Where the builder may differ from datatrove (none seen on the corpora here; `benchmarks/bench_filters.py` counts them):
- words: spaCy's special cases that only its second matcher pass finds across two chunks (`x) :` read as `):`) are
  not merged, and a sentence count ignores whitespace tokens (a run of 2+ spaces between a sentence end and the last
  punctuation of a line);
- Gopher repetition: n-grams compared by 64-bit hashes of word ids, so two n-grams whose words concatenate to the
  same string (`ab c` and `a bc`, which datatrove's "".join calls equal) count as different, and a hash collision
  (about 2^-64 per pair) as equal;
- Gopher quality with `min_doc_words = 0` on a document without words: dropped, where datatrove divides by zero."""

import json
import subprocess

import pytest

from shard_assets.lib.curation.filters import (
    FilterSettings,
    GopherQualityRule,
    filter_documents,
    lid_model,
    parse_filters,
)
from shard_assets.lib.curation.words import RULES_FILE, english_words
from shard_assets.lib.errors import SpecError
from shard_assets.lib.spec import parse_spec
from tests.support.filter_corpus import web_like
from tests.support.filter_reference import english_rules, reference_decide, spacy_english
from tests.support.mixtures import shard_assets
from tests.support.patience import HUNG

FINEWEB = parse_filters({"preset": "fineweb"}, "[filters]")


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return web_like(500, seed=4401, planted=0.4)


def _agreement(docs: list[str], settings: FilterSettings) -> tuple[float, object]:
    out = filter_documents(docs, settings)
    ref = reference_decide(docs, settings)
    same = sum((t, r) == x for t, r, x in zip(out.texts, out.dropped_by, ref))
    return same / len(docs), out


def test_the_fineweb_preset_publishes_what_datatrove_keeps_with_its_rewritten_text(corpus):
    share, out = _agreement(corpus, FINEWEB)
    assert share >= 0.99, share
    assert set(out.dropped) == {"language", "gopher_repetition", "gopher_quality", "c4", "fineweb_quality"}
    assert sum(out.dropped.values()) == sum(t is None for t in out.texts)
    kept = [(doc, t) for doc, t in zip(corpus, out.texts) if t is not None]
    assert len(kept) > 100 and sum(doc != t for doc, t in kept) > 10  # C4's line removal rewrote some


def test_overridden_parameters_are_the_reference_s_parameters(corpus):
    table = {
        "preset": "fineweb",
        "language": {"languages": ["en", "de"], "language_threshold": 0.5},
        "gopher_repetition": {"top_n_grams": [[2, 0.1], [3, 0.1]], "dup_line_frac": 0},
        "gopher_quality": {"min_doc_words": 20, "max_non_alpha_words_ratio": 0.7, "stop_words": ["the", "a"]},
        "c4": {"filter_no_terminal_punct": True, "min_num_sentences": 3},
        "fineweb_quality": {"enabled": False},
    }
    settings = parse_filters(table, "[filters]")
    assert [n for n, _ in settings.rules] == ["language", "gopher_repetition", "gopher_quality", "c4"]
    share, out = _agreement(corpus, settings)
    assert share >= 0.99, share
    assert out.dropped != filter_documents(corpus, FINEWEB).dropped


def test_a_rule_table_alone_turns_that_rule_on():
    settings = parse_filters({"c4": {}}, "[filters]")
    assert [n for n, _ in settings.rules] == ["c4"]
    docs = ["one line only.", "\n".join(f"Line {i} has some words. And two sentences." for i in range(4))]
    out = filter_documents(docs, settings)
    assert out.dropped_by == ["c4", None] and out.texts[1] == docs[1]


def test_without_filters_every_document_is_kept_as_it_is():
    docs = web_like(20, seed=1)
    assert FilterSettings().rules == ()
    out = filter_documents(docs, parse_filters({}, "[filters]"))
    assert out.texts == docs and out.dropped == {} and out.guard_sampled == 0


def test_the_word_splitter_is_spacy_s_blank_english_tokenizer(corpus):
    spacy_tok, ours = spacy_english(), english_words()
    same = sum(ours.words(doc) == spacy_tok.word_tokenize(doc) for doc in corpus)
    assert same >= 0.99 * len(corpus), same
    lines = [line.strip() for doc in corpus[:200] for line in doc.splitlines() if line.strip()]
    assert sum(ours.sentences(x) == len(spacy_tok.sent_tokenize(x)) for x in lines) >= 0.99 * len(lines)


def test_the_rules_file_is_what_spacy_and_datatrove_hold():
    """A spaCy or datatrove upgrade that changes them shows here (`python -m tests.support.filter_reference`)."""
    assert json.loads(RULES_FILE.read_text()) == json.loads(json.dumps(english_rules(), ensure_ascii=False))


def test_a_batch_whose_sample_disagrees_with_spacy_is_decided_with_spacy_s_words(corpus, monkeypatch):
    """The guard guards: a word splitter gone wrong (here whitespace words) is caught by the sample and the batch's
    decisions are the reference's, not the fast splitter's."""
    from shard_assets.lib.curation.words import EnglishWords

    docs, settings = corpus[:60], parse_filters({"preset": "fineweb", "guard_sample": 6}, "[filters]")
    truth = reference_decide(docs, settings)
    monkeypatch.setattr(EnglishWords, "words", lambda self, text: text.split())
    out = filter_documents(docs, settings)
    assert out.guard_agreed < out.guard_sampled == 6
    assert list(zip(out.texts, out.dropped_by)) == truth


def test_the_guard_re_decides_a_sample_with_spacy_and_counts_agreement(corpus):
    out = filter_documents(corpus[:100], parse_filters({"preset": "fineweb", "guard_sample": 10}, "[filters]"))
    assert (out.guard_sampled, out.guard_agreed) == (10, 10)
    off = filter_documents(corpus[:100], parse_filters({"preset": "fineweb", "guard_sample": 0}, "[filters]"))
    assert (off.guard_sampled, off.dropped_by) == (0, out.dropped_by)


def test_lineage_names_the_model_and_the_parameters_and_the_fingerprint_follows_them():
    lineage = FINEWEB.lineage()
    assert lineage["model"]["name"] == "lid.176.ftz" and lineage["model"]["sha256"] == lid_model().sha256
    assert lineage["rules"]["c4"]["filter_no_terminal_punct"] is False
    changed = parse_filters({"preset": "fineweb", "gopher_quality": {"min_doc_words": 51}}, "[filters]")
    assert changed.gopher_quality == GopherQualityRule(min_doc_words=51)
    assert len({FINEWEB.fingerprint, changed.fingerprint, FilterSettings().fingerprint}) == 3
    every_rule = parse_filters({name: {} for name, _ in FINEWEB.rules} | {"guard_sample": 2}, "x")
    assert FINEWEB.fingerprint == every_rule.fingerprint  # the same decisions, the same version


SPEC = {"name": "t", "sources": [{"name": "web", "uri": "/data/*.jsonl", "format": "jsonl"}]}


@pytest.mark.parametrize(
    "table, message",
    [
        ({"preset": "finweb"}, r"preset: 'finweb' is not one of"),
        ({"gopher": {}}, r": unknown key 'gopher'; did you mean 'gopher_quality'"),
        ({"gopher_quality": {"min_doc_word": 5}}, r"gopher_quality: unknown parameter 'min_doc_word'; did you mean"),
        ({"language": {"language_threshold": 1.5}}, r"language.language_threshold: must be between 0 and 1"),
        ({"fineweb_quality": {"line_punct_thr": -0.1}}, r"fineweb_quality.line_punct_thr: must be between 0 and 1"),
        ({"language": {"languages": ["en", "xx"]}}, r"language.languages: \['xx'\] not among lid.176's"),
        ({"c4": {"enabled": "no"}}, r"c4.enabled: expected true or false"),
        ({"c4": {"min_words_per_line": -2}}, r"c4.min_words_per_line: must be at least -1"),
        (
            {"gopher_repetition": {"top_n_grams": [[0, 0.2]]}},
            r"gopher_repetition.top_n_grams: expected \[n, fraction\] pairs",
        ),
        ({"gopher_quality": "on"}, r"gopher_quality: must be a table"),
    ],
)
def test_a_bad_filters_table_is_refused_naming_the_key(table, message):
    with pytest.raises(SpecError, match=rf"^s.toml: \[filters\].?{message}"):
        parse_spec({**SPEC, "filters": table}, "s.toml")


@pytest.mark.integration
def test_a_bad_filters_table_makes_build_exit_2_with_one_line_and_nothing_written(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "a document long enough to keep around"}\n')
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'name = "t"\n[[sources]]\nname = "web"\nuri = "{tmp_path}/*.jsonl"\nformat = "jsonl"\n'
        '[filters]\npreset = "fineweb"\n[filters.gopher_quality]\nmin_doc_words = 50\nmax_doc_wrds = 3\n'
    )
    store = tmp_path / "store"
    out: subprocess.CompletedProcess = shard_assets(
        ["build", "--spec", str(spec)],
        tmp_path,
        str(tmp_path),
        HUNG,
        {"DATASET_STORE_ROOT": str(store), "SHARD_DATASET_SPEC": ""},
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines == [
        f"error: {spec}: [filters].gopher_quality: unknown parameter 'max_doc_wrds'; did you mean 'max_doc_words'?"
    ]
    assert not store.exists() or not any(store.rglob("*.parquet"))
