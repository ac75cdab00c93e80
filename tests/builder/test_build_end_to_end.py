"""Issue 2: the demo builds end to end with real Dagster runs, and what it publishes is exactly right."""

import json
import os
import re
import subprocess
import sys

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

import shard_loader
from shard_assets.runner import build_dataset
from shard_assets.lib.text import is_val
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.lib.curation.dedup import read_drops
from shard_assets.lib.spec import load_spec
from shard_assets.lib.store import LocalFolderStore
from shard_loader.cache.checksum import verify_file
from shard_loader.format import open_shard
from tests.support.build_helpers import build_command
from tests.support.patience import HUNG
from tests.support.texts import doc_hash

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def built(tmp_path_factory, demo_spec):
    store = tmp_path_factory.mktemp("store")
    instance = dg.DagsterInstance.ephemeral()
    resources = {"dataset": DatasetResource(spec_path=str(demo_spec)), "store": StoreResource(root=str(store))}
    result = build_dataset(instance, load_spec(demo_spec), resources)
    return instance, resources, store, result


def _raw_path(store, partition):
    """The raw parquet a partition was tokenized from, as the manifest's lineage names it."""
    lineage = shard_loader.open_manifest(str(store)).lineage()
    keys = {f["partition"]: f["raw_key"] for source in lineage["sources"] for f in source["files"]}
    return store / keys[partition]


def _dropped(store, partition) -> np.ndarray:
    """The hashes of the partition's documents left out as copies of documents kept elsewhere (lineage `dedup`)."""
    lineage = shard_loader.open_manifest(str(store)).lineage()
    dedup = {f["partition"]: f["dedup"] for source in lineage["sources"] for f in source["files"]}[partition]
    return read_drops(LocalFolderStore(store), dedup["drops"]).docs


def _shards(store, manifest, split):
    for e in manifest.split(split).shards:
        yield (
            e,
            open_shard(e, store / e.npy.key, store / e.bin.key, manifest.token_dtype, manifest.tokenizer.vocab_size),
        )


def test_every_document_decodes_to_its_normalised_text(built):
    _, _, store, _ = built
    m = shard_loader.open_manifest(str(store)).manifest
    tok = Tokenizer.from_file(str(store / m.tokenizer.file.key))
    val_fraction = m.lineage["val_fraction"]
    checked = 0
    for split in ("train", "val"):
        for entry, shard in _shards(store, m, split):
            raw = pq.read_table(_raw_path(store, entry.partition))
            hashes = raw.column("doc_hash").to_numpy()
            in_split = (is_val(hashes, val_fraction) == (split == "val")) & ~np.isin(
                hashes, _dropped(store, entry.partition)
            )
            expected = [t for t, keep in zip(raw.column("text").to_pylist(), in_split) if keep]
            assert shard.offsets.shape[0] - 1 == len(expected) == entry.documents
            docs = [shard.document(i) for i in range(entry.documents)]
            assert all(int(d[-1]) == m.tokenizer.eod_id for d in docs)
            decoded = tok.decode_batch([d[:-1].tolist() for d in docs], skip_special_tokens=False)
            assert decoded == expected
            checked += len(expected)
    assert checked == m.splits["train"].documents + m.splits["val"].documents > 1000


def test_splits_are_disjoint_and_cover_every_kept_document(built):
    _, _, store, _ = built
    m = shard_loader.open_manifest(str(store)).manifest
    tok = Tokenizer.from_file(str(store / m.tokenizer.file.key))
    hashes = {}
    for split in ("train", "val"):
        texts = []
        for entry, shard in _shards(store, m, split):
            texts += tok.decode_batch([shard.document(i)[:-1].tolist() for i in range(entry.documents)])
        hashes[split] = {doc_hash(t) for t in texts}
    kept = set()
    for raw in sorted(store.glob("raw/*/*.parquet")):
        kept |= set(pq.read_table(raw, columns=["doc_hash"]).column(0).to_pylist())
    assert hashes["train"] and hashes["val"]
    assert not hashes["train"] & hashes["val"]
    assert hashes["train"] | hashes["val"] == kept


def test_every_published_file_matches_the_manifest(built):
    _, _, store, result = built
    m = shard_loader.open_manifest(str(store)).manifest
    assert m.version == result.version
    refs = m.files()
    for ref in refs:
        verify_file(store / ref.key, ref)
    assert (store / f"manifests/{m.version}.json").read_bytes() == (store / "manifest.json").read_bytes()
    tokens = np.load(store / m.splits["train"].shards[0].npy.key, mmap_mode="r", allow_pickle=False)
    assert tokens.dtype == np.uint16 and m.tokenizer.vocab_size <= 1 << 16


def test_every_tokenized_partition_names_its_encoder_and_passed_the_guard(built):
    instance, _, store, _ = built
    records = instance.fetch_materializations(dg.AssetKey("tokenized_shards"), limit=1000).records
    assert records
    for record in records:
        meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}
        assert meta["encoder_engine"] == "fastokens" and meta["encoder_differing"] == 0
        assert meta["encoder_sampled"] >= min(64, meta["dagster/row_count"])
    parts = [json.loads(p.read_text()) for p in store.glob("tokenized/*/parts/*.json")]
    assert parts and all(p["encoder"]["engine"] == "fastokens" and p["encoder"]["differing"] == 0 for p in parts)


def test_second_materialisation_publishes_the_same_content(built, demo_spec):
    instance, resources, store, first = built
    before = {
        p.relative_to(store): p.read_bytes()
        for p in store.rglob("*")
        if p.is_file() and "tokenized" in p.parts and p.suffix in (".npy", ".bin")
    }
    versioned = (store / f"manifests/{first.version}.json").read_bytes()
    published = sorted(p.relative_to(store) for p in (store / "manifests").rglob("*") if p.is_file())
    second = build_dataset(instance, load_spec(demo_spec), resources)
    assert second.version == first.version
    assert second.tokens == first.tokens and second.documents == first.documents
    after = {
        p.relative_to(store): p.read_bytes()
        for p in store.rglob("*")
        if p.is_file() and "tokenized" in p.parts and p.suffix in (".npy", ".bin")
    }
    assert after == before
    assert (store / f"manifests/{first.version}.json").read_bytes() == versioned
    assert (
        sorted(p.relative_to(store) for p in (store / "manifests").rglob("*") if p.is_file()) == published
    )  # nothing new, not even lineage
    assert len(published) == 4  # the version, the train and val shard tables, the lineage detail


def test_the_build_command_prints_a_summary_and_a_first_batch(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    (tmp_path / "home").mkdir()
    demo = subprocess.run(
        [sys.executable, "-m", "shard_assets.cli", "demo", "--folder", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        env=env,
        timeout=HUNG,
    )
    assert demo.returncode == 0, demo.stderr
    out = subprocess.run(
        build_command(tmp_path / "demo" / "demo.toml", tmp_path / "store", 2),
        capture_output=True,
        text=True,
        env=env,
        timeout=HUNG,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Warning" not in out.stderr, out.stderr[-3000:]  # no library notice (Dagster's preview ones) in a build
    text = out.stdout
    assert f"{tmp_path / 'store'}/manifest.json" in text
    assert re.search(r"^train\s+[\d,]+ tokens", text, re.M) and re.search(r"^val\s+[\d,]+ tokens", text, re.M)
    assert re.search(r"^build time\s+[\d.]+ s", text, re.M)
    assert re.search(r"^first batch\s+input_ids \(4, 128\) int64", text, re.M)
