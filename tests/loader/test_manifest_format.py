"""Manifest format 2: the JSON names each split's shard table and the lineage detail by key, size and sha256;
a trainer keeps only its split's table (it reads the others to refuse a key in two splits), every table is verified
before use, and format 1 is still read."""

import hashlib
import json
import pickle
import re
from dataclasses import asdict

import numpy as np
import pytest

import shard_loader
from shard_loader import IntegrityError, ManifestError, TokenDataset
from shard_loader.cli import main
from shard_loader.format import LATEST_KEY, ShardTable
from tests.support.synthetic import random_docs, write_dataset


@pytest.fixture
def published(tmp_path):
    rng = np.random.default_rng(11)
    m = write_dataset(tmp_path, {"train": [random_docs(rng, 20) for _ in range(3)], "val": [random_docs(rng, 5)]})
    return tmp_path, m


def _batches(url, **kw):
    return [b["input_ids"] for b in TokenDataset(url, seq_len=32, batch_size=2, **kw)]


def test_the_json_holds_totals_and_refs_and_each_table_is_a_plain_npy(published):
    root, m = published
    doc = json.loads((root / LATEST_KEY).read_text())
    assert doc["format_version"] == 2
    train = doc["splits"]["train"]
    assert set(train) == {"tokens", "documents", "shard_count", "bytes", "table"} and train["shard_count"] == 3
    rows = np.load(root / train["table"]["key"], allow_pickle=False)  # any numpy reads it, no shard_loader needed
    assert [r.decode() for r in rows["npy_key"]] == [e.npy.key for e in m.splits["train"].shards]
    assert int(rows["tokens"].sum()) == train["tokens"] and train["table"]["key"].startswith("manifests/tables/")


def test_a_trainer_keeps_only_the_table_of_its_split_and_checks_the_others(published):
    root, m = published
    assert _batches(str(root))
    assert TokenDataset(str(root), seq_len=32, batch_size=2).opened.manifest.splits["val"].loaded is None  # not kept
    (root / m.splits["val"].table.key).unlink()
    for opening in (lambda: _batches(str(root)), lambda: shard_loader.open_manifest(str(root))):
        with pytest.raises(shard_loader.StoreError, match=m.splits["val"].table.key):
            opening()  # train reads val's table too, to refuse a key listed in both: the missing table is named


def test_a_changed_table_is_refused_naming_its_key(published):
    root, m = published
    key = m.splits["train"].table.key
    data = bytearray((root / key).read_bytes())
    data[-3] ^= 0x01
    (root / key).write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"{key}: .* manifest says"):
        TokenDataset(str(root))


def test_a_table_of_other_columns_is_refused(published):
    root, m = published
    key = m.splits["train"].table.key
    rows = np.load(root / key)
    np.save(root / key, rows[["partition", "tokens", "documents"]], allow_pickle=False)
    data = (root / key).read_bytes()
    doc = json.loads((root / LATEST_KEY).read_text())
    doc["splits"]["train"]["table"].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (root / LATEST_KEY).write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=f"{key}: expected a 1-D table with fields"):
        TokenDataset(str(root))


def test_a_format_1_manifest_with_shards_inline_is_still_read(published):
    root, m = published
    expected = _batches(str(root))
    doc = json.loads((root / LATEST_KEY).read_text())
    for name, split in doc["splits"].items():
        split.pop("table"), split.pop("shard_count"), split.pop("bytes")
        split["shards"] = [asdict(e) for e in m.splits[name].shards]
    doc["format_version"] = 1
    (root / LATEST_KEY).write_text(json.dumps(doc))
    for table in (root / "manifests" / "tables").iterdir():
        table.unlink()  # format 1 needs none
    got = _batches(str(root))
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert shard_loader.open_manifest(str(root)).manifest.splits["train"].table is None


def test_the_table_indexes_like_the_entries_it_was_made_of(published):
    _, m = published
    entries = list(m.splits["train"].shards)
    table = ShardTable.of(entries)
    assert [table[i] for i in range(len(table))] == entries and list(table[1:]) == entries[1:]
    assert table.tokens.tolist() == [e.tokens for e in entries] and table.nbytes.tolist() == [e.nbytes for e in entries]
    assert ShardTable.from_bytes(table.to_bytes(), "t", 2) == table


def test_a_pickled_dataset_carries_its_table_and_never_reads_it_again(published):
    root, _ = published
    ds = TokenDataset(str(root), seq_len=32, batch_size=2)
    for table in (root / "manifests" / "tables").iterdir():
        table.unlink()  # a spawned worker gets the table with the dataset
    clone = pickle.loads(pickle.dumps(ds))
    assert [b["input_ids"].tolist() for b in clone] == [b["input_ids"].tolist() for b in ds]


def test_info_checks_every_table(published, capsys):
    root, _ = published
    assert main(["info", str(root)]) == 0
    assert re.search(r"^train\s+[\d,]+ tokens\s+[\d,]+ documents\s+3 shards", capsys.readouterr().out, re.M)
    table = next((root / "manifests" / "tables").iterdir())
    table.write_bytes(table.read_bytes()[:-1] + b"\0")
    assert main(["info", str(root)]) == 2
    assert f"{table.relative_to(root)}: " in capsys.readouterr().err


def test_an_empty_split_has_an_empty_table(tmp_path):
    m = write_dataset(tmp_path, {"train": [random_docs(np.random.default_rng(3), 5)], "val": []})
    opened = shard_loader.open_manifest(str(tmp_path))
    assert (
        len(opened.manifest.splits["val"].shards) == 0 and opened.manifest.splits["val"].table == m.splits["val"].table
    )


def test_the_byte_total_from_the_json_equals_the_sum_over_every_file(published):
    root, m = published
    assert m.nbytes == sum(r.size for r in m.files())
    assert shard_loader.open_manifest(str(root), splits=[]).manifest.nbytes == m.nbytes  # no table read


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda s: s.update(table=None), r"splits\.train\.table: a format-2 split names its shard table"),
        (lambda s: s.pop("bytes"), r"splits\.train: missing field 'bytes'"),
        (lambda s: s.update(bytes=-5), r"splits\.train\.bytes: must not be negative, got -5"),
        (lambda s: s["table"].update(key="../tables/x.npy"), r"splits\.train\.table\.key: key '\.\./tables/x\.npy'"),
        (lambda s: s["table"].update(sha256="AB" * 32), r"splits\.train\.table\.sha256: 'AB.*not 64 lowercase hex"),
    ],
)
def test_a_split_whose_stored_fields_are_wrong_is_refused_naming_the_field(published, edit, said):
    root, _ = published
    doc = json.loads((root / LATEST_KEY).read_text())
    edit(doc["splits"]["train"])
    (root / LATEST_KEY).write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=said):
        shard_loader.open_manifest(str(root))


def test_a_flat_key_spelled_like_a_nested_field_is_not_read_as_it(published):
    """The dataset's name is read from `dataset.name` inside the `dataset` object, never from a top-level key
    written "dataset.name" (a forged second name a reader would otherwise show)."""
    root, m = published
    doc = json.loads((root / LATEST_KEY).read_text())
    doc["dataset.name"], doc["dataset.version"] = "forged", "forged-0"
    (root / LATEST_KEY).write_text(json.dumps(doc))
    opened = shard_loader.open_manifest(str(root)).manifest
    assert (opened.dataset, opened.version) == (m.dataset, m.version)
