"""Bad input: each bad file fails its own partition with an error naming the file and what is wrong;
the other partitions and the already published manifest are unaffected."""

import re
import time

import dagster as dg
import numpy as np
import pytest

import shard_loader
from shard_assets.build import BuildFailed, build_dataset, failure_message, register_partitions
from shard_assets.definitions import ASSETS
from shard_assets.errors import SourceError, TokenizerError
from shard_assets.resources import DatasetResource, StoreResource
from shard_assets.sources.listing import list_all_files
from shard_assets.spec import TokenizerSpec, load_spec
from shard_assets.tokenize import encode_documents
from shard_assets.tokenizer import build_tokenizer, load_pretrained, load_tokenizer
from tests.support.build_helpers import BAD_INPUTS, GOOD_INPUTS, assert_every_manifest_whole, bad_corpus_spec, write_bad_corpus
from tests.support.dagster_helpers import write_jsonl

pytestmark = pytest.mark.integration


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
    write_bad_corpus(tmp / "src")
    spec = bad_corpus_spec(tmp / "spec.toml", tmp / "src")
    resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": StoreResource(root=str(store))}
    register_partitions(inst, load_spec(spec))
    return inst, resources, store, result


def _materialize_raw(inst, resources, partition):
    result = dg.materialize(ASSETS, selection=["raw_documents"], partition_key=partition, instance=inst, resources=resources, raise_on_error=False)
    return result.success, failure_message(result)


@pytest.mark.parametrize("partition", sorted(BAD_INPUTS))
def test_each_bad_file_fails_its_partition_with_a_clear_error(published, partition):
    inst, resources, store, first = published
    ok, message = _materialize_raw(inst, resources, partition)
    assert not ok
    assert "SourceError" in message
    assert re.search(BAD_INPUTS[partition], message), message
    assert shard_loader.open_manifest(str(store)).manifest.version == first.version  # what was published before is untouched
    assert assert_every_manifest_whole(store) == 2


@pytest.mark.parametrize("partition", GOOD_INPUTS)
def test_good_files_next_to_bad_ones_still_build(published, partition):
    inst, resources, _, _ = published
    assert _materialize_raw(inst, resources, partition) == (True, "")


def test_a_failed_full_build_names_the_file_and_loses_nothing_published(published):
    inst, resources, store, first = published
    with pytest.raises(BuildFailed, match=r"raw_documents.*\[(js|pq)\.\w+\].*SourceError: .*\.(jsonl|parquet)"):
        build_dataset(inst, resources["dataset"].spec(), resources)
    assert shard_loader.open_manifest(str(store)).manifest.version == first.version
    assert assert_every_manifest_whole(store) == 2
    assert not [p for p in store.rglob("*") if p.name.endswith(".tmp")]


def test_an_empty_source_is_refused_naming_it(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(f'name = "e"\n[[sources]]\nname = "nothing"\nuri = "{tmp_path}/none/*.parquet"\n')
    with pytest.raises(SourceError, match=r"source 'nothing': no files match .*/none/\*.parquet"):
        list_all_files(load_spec(spec))


def test_a_tokenizer_path_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(TokenizerError, match=f"tokenizer path {tmp_path}/missing-tokenizer does not exist"):
        load_pretrained(str(tmp_path / "missing-tokenizer"), "<|endoftext|>")


def test_a_20_mb_document_tokenizes_in_linear_time():
    words = ["alpha", "beta", "gamma", "delta", "x" * 300]
    text, _ = build_tokenizer(TokenizerSpec(vocab_size=300), iter([" ".join(words)] * 50))
    tok = load_tokenizer(text)
    big = " ".join(np.random.default_rng(0).choice(words, size=400_000))[: 18 << 20] + "y" * (2 << 20)  # 2 MB without a space
    timings = {}
    for size in (2 << 20, 20 << 20):
        doc = big[:size] if size < len(big) else big
        started = time.perf_counter()
        tokens, lengths = encode_documents(tok, [doc], 0, "uint16")
        timings[size] = time.perf_counter() - started
        assert lengths[0] == len(tokens) and tokens[-1] == 0
    assert len(big) == 20 << 20 and tok.decode(tokens[:-1].tolist()) == big
    assert timings[20 << 20] < 25 * timings[2 << 20]  # 10x the text: about 10x the time, not 100x
