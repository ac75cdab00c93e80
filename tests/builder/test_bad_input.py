"""Bad input: each bad file fails its own partition with an error naming the file and what is wrong;
the other partitions and the already published manifest are unaffected."""

import re
from pathlib import Path
import time

import dagster as dg
import numpy as np
import pytest

import shard_loader
from shard_assets.defs.partitions import sync_partitions
from shard_assets.runner import RunFailed, build_dataset
from shard_assets.lib.errors import SourceError, TokenizerError
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.lib.sources.listing import list_source_files
from shard_assets.lib.spec import TokenizerSpec, load_spec
from shard_assets.lib.encoding import encode_documents
from shard_assets.lib.tokenizer import build_tokenizer, load_pretrained, load_tokenizer
from tests.support.build_helpers import (
    BAD_INPUTS,
    GOOD_INPUTS,
    assert_every_manifest_whole,
    bad_corpus_spec,
    write_bad_corpus,
)
from tests.support.dagster_helpers import materialize_raw, write_jsonl

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
    good_spec.write_text(
        'name = "bad"\nmin_chars = 10\nval_fraction = 0.2\n[tokenizer]\nvocab_size = 300\n'
        f'[[sources]]\nname = "js"\nuri = "{tmp}/good/*.jsonl"\nformat = "jsonl"\n'
    )
    result = build_dataset(
        inst,
        load_spec(good_spec),
        {"dataset": DatasetResource(spec_path=str(good_spec)), "store": StoreResource(root=str(store))},
    )
    write_bad_corpus(tmp / "src")
    spec = bad_corpus_spec(tmp / "spec.toml", tmp / "src")
    resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": StoreResource(root=str(store))}
    sync_partitions(inst, resources["store"].store(), load_spec(spec))
    return inst, resources, store, result


@pytest.mark.parametrize("partition", sorted(BAD_INPUTS))
def test_each_bad_file_fails_its_partition_with_a_clear_error(published, partition):
    inst, resources, store, first = published
    ok, message = materialize_raw(inst, resources, partition)
    assert not ok
    assert "SourceError" in message
    assert re.search(BAD_INPUTS[partition], message), message
    assert (
        shard_loader.open_manifest(str(store)).manifest.version == first.version
    )  # what was published before is untouched
    assert assert_every_manifest_whole(store) == 2


@pytest.mark.parametrize("partition", GOOD_INPUTS)
def test_good_files_next_to_bad_ones_still_build(published, partition):
    inst, resources, _, _ = published
    assert materialize_raw(inst, resources, partition) == (True, "")


def test_bad_files_are_left_out_and_the_good_ones_beside_them_published(published, capsys):
    inst, resources, store, first = published
    result = build_dataset(inst, resources["dataset"].spec(), resources)
    assert result.version != first.version
    assert result.left_out == len(BAD_INPUTS) + 1  # and the first version's js.a, whose file the spec no longer lists
    warnings = capsys.readouterr().err
    for partition in BAD_INPUTS:
        assert re.search(rf"ingest_job \[{re.escape(partition)}\].*SourceError", warnings), partition
    opened = shard_loader.open_manifest(str(store))
    assert {e.partition for s in opened.manifest.splits.values() for e in s.shards} == set(GOOD_INPUTS)
    left_out = {x["partition"]: x["reason"] for x in opened.lineage()["left_out"]}
    assert (
        set(left_out) == {*BAD_INPUTS, "js.a"} and "good/a.jsonl" in left_out["js.a"] and "vanished" in left_out["js.a"]
    )
    for partition, pattern in BAD_INPUTS.items():  # each names the run, the file and what is wrong with it
        assert re.search(rf"^ingest failed in run [0-9a-f-]+: SourceError: .*{pattern}", left_out[partition]), left_out[
            partition
        ]
    assert opened.manifest.lineage["partitions_left_out"] == len(BAD_INPUTS) + 1
    assert assert_every_manifest_whole(store) == 3  # the first version, the new one, manifest.json
    assert not [p for p in store.rglob("*") if p.name.endswith(".tmp")]


def test_block_policy_refuses_to_publish_and_leaves_the_live_version(published, tmp_path):
    inst, resources, store, _ = published
    live = (store / "manifest.json").read_bytes()
    spec_path = tmp_path / "block.toml"
    spec_path.write_text(
        Path(resources["dataset"].spec_path)
        .read_text()
        .replace("min_chars = 10", 'min_chars = 10\non_partition_failure = "block"')
    )
    blocking = {**resources, "dataset": DatasetResource(spec_path=str(spec_path))}
    with pytest.raises(RunFailed, match=r"publish_job failed.*partitions cannot be published.*on_partition_failure"):
        build_dataset(inst, blocking["dataset"].spec(), blocking)
    assert (store / "manifest.json").read_bytes() == live


def test_an_empty_source_is_refused_naming_it(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(f'name = "e"\n[[sources]]\nname = "nothing"\nuri = "{tmp_path}/none/*.parquet"\n')
    with pytest.raises(SourceError, match=r"source 'nothing': no files match .*/none/\*.parquet"):
        list_source_files(load_spec(spec).sources[0])


def test_a_tokenizer_path_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(TokenizerError, match=f"tokenizer path {tmp_path}/missing-tokenizer does not exist"):
        load_pretrained(str(tmp_path / "missing-tokenizer"), "<|endoftext|>")


def test_a_20_mb_document_tokenizes_in_linear_time():
    words = ["alpha", "beta", "gamma", "delta", "x" * 300]
    text, _ = build_tokenizer(TokenizerSpec(vocab_size=300), iter([" ".join(words)] * 50))
    tok = load_tokenizer(text)
    big = " ".join(np.random.default_rng(0).choice(words, size=400_000))[: 18 << 20] + "y" * (
        2 << 20
    )  # 2 MB without a space
    timings = {}
    for size in (2 << 20, 20 << 20):
        doc = big[:size] if size < len(big) else big
        started = time.process_time()  # this process's CPU time: what other processes on the machine do is not counted
        tokens, lengths = encode_documents(tok, [doc], 0, "uint16")
        timings[size] = time.process_time() - started
        assert lengths[0] == len(tokens) and tokens[-1] == 0
    assert len(big) == 20 << 20 and tok.decode(tokens[:-1].tolist()) == big
    assert timings[20 << 20] < 25 * timings[2 << 20]  # 10x the text: about 10x the time, not 100x
