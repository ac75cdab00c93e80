"""Bad input: each bad file fails its own partition with an error naming the file and what is wrong;
the other partitions and the already published manifest are unaffected."""

import json
import time

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shard_loader
from shard_assets.build import build_dataset, failure_message, register_partitions
from shard_assets.definitions import ASSETS
from shard_assets.errors import SourceError, TokenizerError
from shard_assets.resources import DatasetResource, StoreResource
from shard_assets.spec import TokenizerSpec, load_spec
from shard_assets.tokenize import encode_documents
from shard_assets.tokenizer import build_tokenizer, load_pretrained
from shard_loader.checksum import verify_file
from tests.dagster_helpers import write_jsonl


def _write_bad_inputs(src):
    pq.write_table(pa.table({"body": ["no text column here"] * 3}), src / "no_text_column.parquet")
    pq.write_table(pa.table({"text": ["fine document number one", None, "three"]}), src / "nulls.parquet")
    pq.write_table(pa.table({"text": pa.array([b"valid utf-8 text here", b"\xff\xfe broken \xc3"], pa.binary())}), src / "bad_utf8.parquet")
    pq.write_table(pa.table({"text": [f"document {i} " * 20 for i in range(500)]}), src / "truncated.parquet")
    data = (src / "truncated.parquet").read_bytes()
    (src / "truncated.parquet").write_bytes(data[: len(data) // 2])
    (src / "zero_bytes.parquet").write_bytes(b"")
    (src / "not_parquet.parquet").write_text("just some text, not a parquet file at all\n" * 10)
    (src / "good.parquet").unlink(missing_ok=True)
    pq.write_table(pa.table({"text": [f"a good document about item {i}, long enough to keep" for i in range(50)]}), src / "good.parquet")


BAD = {
    "pq.no_text_column": r"no_text_column.parquet: no column 'text' .*columns are \['body'\]",
    "pq.nulls": r"nulls.parquet: column 'text' has a null at row 1",
    "pq.bad_utf8": r"bad_utf8.parquet: failed reading column 'text'.*(UTF-?8|utf-?8)",
    "pq.truncated": r"truncated.parquet: not a readable parquet file",
    "pq.zero_bytes": r"zero_bytes.parquet: not a readable parquet file",
    "pq.not_parquet": r"not_parquet.parquet: not a readable parquet file",
    "js.broken": r"broken.jsonl:2: not a JSON object",
    "js.empty": r"empty.jsonl: source 'js' file has no documents",
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A good dataset already published, and a spec whose sources hold one bad file each next to good ones."""
    tmp = tmp_path_factory.mktemp("bad")
    store = tmp / "store"
    inst = dg.DagsterInstance.ephemeral()
    (tmp / "good").mkdir()
    write_jsonl(tmp / "good" / "a.jsonl", 80, seed=1)
    good_spec = tmp / "good.toml"
    good_spec.write_text(f'name = "bad"\nmin_chars = 10\n[tokenizer]\nvocab_size = 300\n[[sources]]\nname = "js"\nuri = "{tmp}/good/*.jsonl"\nformat = "jsonl"\n')
    result = build_dataset(inst, load_spec(good_spec), {"dataset": DatasetResource(spec_path=str(good_spec)), "store": StoreResource(root=str(store))})
    src = tmp / "src"
    src.mkdir()
    _write_bad_inputs(src)
    write_jsonl(src / "fine.jsonl", 30, seed=3)
    (src / "broken.jsonl").write_text('{"text": "first line is fine"}\n{this is not json}\n')
    (src / "empty.jsonl").write_text("")
    spec = tmp / "spec.toml"
    spec.write_text(
        f'name = "bad"\nmin_chars = 10\n[tokenizer]\nvocab_size = 300\n'
        f'[[sources]]\nname = "pq"\nuri = "{src}/*.parquet"\n'
        f'[[sources]]\nname = "js"\nuri = "{src}/*.jsonl"\nformat = "jsonl"\n'
    )
    resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": StoreResource(root=str(store))}
    register_partitions(inst, load_spec(spec))
    return inst, resources, store, result


def _materialize_raw(inst, resources, partition):
    result = dg.materialize(ASSETS, selection=["raw_documents"], partition_key=partition, instance=inst, resources=resources, raise_on_error=False)
    return result.success, failure_message(result)


@pytest.mark.parametrize("partition", sorted(BAD))
def test_each_bad_file_fails_its_partition_with_a_clear_error(published, partition):
    inst, resources, store, first = published
    ok, message = _materialize_raw(inst, resources, partition)
    assert not ok
    assert "SourceError" in message
    import re

    assert re.search(BAD[partition], message), message
    m = shard_loader.open_manifest(str(store)).manifest  # what was published before is untouched
    assert m.version == first.version
    for ref in [r for s in m.splits.values() for e in s.shards for r in (e.npy, e.bin)]:
        verify_file(store / ref.key, ref)


@pytest.mark.parametrize("partition", ["pq.good", "js.fine"])
def test_good_files_next_to_bad_ones_still_build(published, partition):
    inst, resources, _, _ = published
    assert _materialize_raw(inst, resources, partition) == (True, "")


def test_an_empty_source_is_refused_naming_it(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(f'name = "e"\n[[sources]]\nname = "nothing"\nuri = "{tmp_path}/none/*.parquet"\n')
    from shard_assets.sources.listing import list_all_files

    with pytest.raises(SourceError, match=r"source 'nothing': no files match .*/none/\*.parquet"):
        list_all_files(load_spec(spec))


def test_a_tokenizer_path_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(TokenizerError, match=f"tokenizer path {tmp_path}/missing-tokenizer does not exist"):
        load_pretrained(str(tmp_path / "missing-tokenizer"), "<|endoftext|>")


def test_a_20_mb_document_tokenizes_in_linear_time():
    text, _ = build_tokenizer(TokenizerSpec(vocab_size=300), iter(["the quick brown fox jumps over the lazy dog"] * 50))
    from shard_assets.tokenizer import load_tokenizer

    tok = load_tokenizer(text)
    words = np.random.default_rng(0).choice(["alpha", "beta", "gamma", "delta", "x" * 300], size=4_000_000)
    big = " ".join(words)[: 20 << 20]
    timings = {}
    for size in (2 << 20, 20 << 20):
        started = time.perf_counter()
        tokens, lengths = encode_documents(tok, [big[:size]], 0, "uint16")
        timings[size] = time.perf_counter() - started
        assert lengths[0] == len(tokens) and tokens[-1] == 0
    assert tok.decode(tokens[:-1].tolist()) == big
    assert timings[20 << 20] < 25 * timings[2 << 20]  # 10x the text: about 10x the time, not 100x
