"""Sources are configured data: parquet (FineWeb and DCLM schemas as they are), JSONL, text, presets, caps."""

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_assets.lib.errors import SourceError, SpecError
from shard_assets.lib.sources.listing import list_source_files
from shard_assets.lib.sources.readers import iter_document_batches
from shard_assets.lib.spec import parse_spec


def _docs(spec, source_name):
    source = spec.source(source_name)
    return {f.part: [d for b in iter_document_batches(source, f, 3) for d in b] for f in list_source_files(source)}


def test_parquet_with_fineweb_and_dclm_columns_reads_the_text_column(tmp_path):
    fineweb = {
        "text": ["a", "b", "c", "d"],
        "id": ["1", "2", "3", "4"],
        "dump": ["CC"] * 4,
        "url": ["u"] * 4,
        "date": ["d"] * 4,
        "file_path": ["f"] * 4,
        "language": ["en"] * 4,
        "language_score": [0.9] * 4,
        "token_count": [1] * 4,
    }
    (tmp_path / "CC-MAIN-2024-10").mkdir()
    pq.write_table(pa.table(fineweb), tmp_path / "CC-MAIN-2024-10" / "000_00000.parquet")
    dclm = {
        "bff_contained_ngram_count_before_dedupe": [0, 1],
        "language_id_whole_page_fasttext": [{"en": 0.9}] * 2,
        "metadata": [{"Content-Length": "1"}] * 2,
        "previous_word_count": [5, 6],
        "text": ["x", "y"],
        "url": ["u", "v"],
        "warcinfo": ["w", "w"],
        "fasttext_openhermes_reddit_eli5_vs_rw_v2_bigram_200k_train_prob": [0.5, 0.6],
    }
    pq.write_table(pa.table(dclm), tmp_path / "shard_00000000_processed.parquet")
    spec = parse_spec(
        {
            "name": "t",
            "sources": [
                {"name": "fw", "uri": f"{tmp_path}/*/*.parquet"},
                {"name": "dclm", "uri": f"{tmp_path}/*.parquet"},
            ],
        },
        "test",
    )
    assert _docs(spec, "fw") == {"CC-MAIN-2024-10__000_00000": ["a", "b", "c", "d"]}
    assert _docs(spec, "dclm") == {"shard_00000000_processed": ["x", "y"]}


def test_jsonl_and_text_sources_and_max_documents(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"content": f"doc {i}"}) for i in range(10)) + "\n")
    (tmp_path / "play.txt").write_text("First speech.\n\nSecond speech,\nover two lines.\n\nThird.")
    spec = parse_spec(
        {
            "name": "t",
            "sources": [
                {
                    "name": "j",
                    "uri": str(tmp_path / "a.jsonl"),
                    "format": "jsonl",
                    "text_column": "content",
                    "max_documents": 4,
                },
                {"name": "s", "uri": str(tmp_path / "play.txt"), "format": "text", "document_separator": "\n\n"},
            ],
        },
        "test",
    )
    assert _docs(spec, "j") == {"a": ["doc 0", "doc 1", "doc 2", "doc 3"]}
    assert _docs(spec, "s") == {"play": ["First speech.", "Second speech,\nover two lines.", "Third."]}


def test_a_remote_source_without_a_cap_is_refused_unless_allowed():
    remote = {"name": "fw", "preset": "fineweb"}
    with pytest.raises(SpecError, match=r"remote source 'fw' \(hf:.*no max_documents cap.*allow_unbounded"):
        parse_spec({"name": "t", "sources": [remote]}, "spec.toml")
    capped = parse_spec({"name": "t", "sources": [{**remote, "max_documents": 10}]}, "spec.toml").sources[0]
    assert capped.uri.startswith("hf://datasets/HuggingFaceFW/fineweb/") and capped.text_column == "text"
    assert (
        parse_spec({"name": "t", "sources": [{**remote, "allow_unbounded": True}]}, "spec.toml")
        .sources[0]
        .max_documents
        is None
    )


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {"name": "t", "sources": [{"name": "x", "uri": "/d", "text_colum": "t"}]},
            r"sources\[0\]: unknown field 'text_colum'; did you mean 'text_column'\?",
        ),
        (
            {"name": "t", "sources": [{"name": "x", "uri": "/d", "max_documents": -3}]},
            r"sources\[0\].max_documents: must be at least 1, got -3",
        ),
        (
            {"name": "t", "sources": [{"name": "x", "uri": "/d", "max_files": "10"}]},
            r"sources\[0\].max_files: expected int, got '10'",
        ),
        (
            {"name": "t", "tokenizer": {"vocab_size": -5}, "sources": [{"name": "x", "uri": "/d"}]},
            r"\[tokenizer\].vocab_size: must be between 257 and 4294967296, got -5",
        ),
        (
            {"name": "t", "batch_documents": 0, "sources": [{"name": "x", "uri": "/d"}]},
            r"spec.toml.batch_documents: must be between 1 and 1000000, got 0",
        ),
        (
            {"name": "t", "on_partition_failure": "ignore", "sources": [{"name": "x", "uri": "/d"}]},
            r"on_partition_failure must be one of \('skip', 'block'\)",
        ),
        ({"name": "t", "sources": [{"name": "x", "uri": "/d", "format": "csv"}]}, r"sources\[0\].format: 'csv'"),
        ({"name": "t", "sources": [{"preset": "nope"}]}, r"sources\[0\].preset: unknown preset 'nope'"),
        ({"name": "t", "sources": []}, r"at least one \[\[sources\]\]"),
        (
            {"name": "t", "val_fraction": 1.5, "sources": [{"name": "d", "uri": "x.jsonl", "format": "jsonl"}]},
            "val_fraction must be in",
        ),
        (
            {
                "name": "t",
                "tokenizer": {"kind": "pretrained"},
                "sources": [{"name": "d", "uri": "x.jsonl", "format": "jsonl"}],
            },
            r"\[tokenizer\].name is needed",
        ),
    ],
)
def test_bad_specs_name_the_field(spec, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(spec, "spec.toml")


def test_presets_command_lists_the_catalogue():
    out = subprocess.run(
        [sys.executable, "-m", "shard_assets.cli", "presets"], capture_output=True, text=True, check=True
    ).stdout
    for name in ("dclm-baseline", "fineweb", "fineweb-edu", "tiny-shakespeare"):
        assert name in out
    assert "hf://datasets/mlfoundations/dclm-baseline-1.0-parquet" in out


def test_an_hf_source_in_offline_mode_says_offline_mode_is_on(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = parse_spec({"name": "t", "sources": [{"preset": "tiny-shakespeare", "max_documents": 10}]}, "spec.toml")
    with pytest.raises(
        SourceError, match=r"HF_HUB_OFFLINE is set, so hf://datasets/karpathy/.* cannot be listed from the Hub"
    ):
        list_source_files(spec.sources[0])


def test_a_preset_whose_uri_is_a_relative_path_reads_it_beside_the_spec(tmp_path):
    """A preset names the format and column; a `uri` given with it is resolved against the spec's folder like any
    other relative path (it once met the preset's own fields in its place and raised a raw TypeError)."""
    source = {"preset": "tiny-shakespeare", "uri": "local/input.txt"}
    spec = parse_spec({"name": "t", "sources": [source]}, "spec.toml", tmp_path)
    assert spec.sources[0].uri == str(tmp_path / "local/input.txt") and spec.sources[0].format == "text"
