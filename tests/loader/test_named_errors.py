"""Every failure the loader can meet is a ShardLoaderError naming the key or path, never a raw Python exception:
missing files (also deleted under a running reader), JSON nested past Python's recursion, keys no path can hold, a
table header claiming more rows than its bytes, keys that are not UTF-8; and verify/fetch cover every file a
manifest names (its shard tables and lineage file too)."""

import hashlib
import io
import json
import re
from dataclasses import replace

import numpy as np
import pytest

import shard_loader
from shard_loader import ManifestError, TokenDataset
from shard_loader.cli import main
from shard_loader.errors import MissingFileError
from tests.support.synthetic import publish_manifest, random_docs, tamper_json, write_dataset

OPTS = dict(seq_len=8, batch_size=1, window_shards=1)


@pytest.fixture
def published(tmp_path):
    rng = np.random.default_rng(7)
    m = write_dataset(tmp_path, {"train": [random_docs(rng, 20) for _ in range(4)], "val": [random_docs(rng, 3)]})
    return tmp_path, m


def _with_lineage(root, manifest, detail):
    """Republish `manifest` with a per-partition lineage file holding `detail`."""
    publish_manifest(root, replace(manifest, lineage_detail=detail, lineage_file=None))


def _nested(depth):
    value: dict = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def _rewrite_table(root, split, edit):
    """Apply `edit(raw_table_bytes) -> bytes` to a split's published table and point manifest.json at the result."""
    doc = json.loads((root / "manifest.json").read_text())
    ref = doc["splits"][split]["table"]
    data = edit((root / ref["key"]).read_bytes())
    key = f"manifests/tables/edited-{hashlib.sha256(data).hexdigest()[:16]}.npy"
    (root / key).write_bytes(data)
    ref.update(key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (root / "manifest.json").write_text(json.dumps(doc))


def _with_key(raw, key):
    """The table with its first row's .npy key replaced by the bytes `key` (the row stays otherwise valid)."""
    rows = np.load(io.BytesIO(raw), allow_pickle=False).copy()
    wide = np.dtype(
        [
            (n, f"S{max(len(key), rows.dtype[n].itemsize)}" if n.endswith("_key") else rows.dtype[n])
            for n in rows.dtype.names
        ]
    )
    rows = rows.astype(wide)
    rows["npy_key"][0] = key
    buf = io.BytesIO()
    np.save(buf, rows, allow_pickle=False)
    return buf.getvalue()


def test_a_missing_local_shard_is_named_not_a_raw_file_not_found(published):
    root, m = published
    key = m.splits["train"].shards[2].npy.key
    (root / key).unlink()
    with pytest.raises(MissingFileError, match=f"{key}: no file at {root}/{key}"):
        list(TokenDataset(str(root), **OPTS))


def test_a_reader_whose_files_are_deleted_under_it_stops_naming_the_first_it_misses(published):
    root, m = published
    ds = TokenDataset(str(root), **OPTS)
    batches = iter(ds)
    next(batches)  # the first window is open (and the next one maybe prefetched)
    for shard in m.splits["train"].shards:
        (root / shard.npy.key).unlink()  # as gc deletes a superseded version's files
    with pytest.raises(MissingFileError, match=r"tokenized/synthetic/train/part-\d+\.npy: no file at"):
        list(batches)
    for epoch in (1, 2):  # a window verified in an earlier epoch is opened again: still named
        ds.set_epoch(epoch)
        with pytest.raises(MissingFileError, match=r"tokenized/synthetic/train/part-\d+\.npy: no file at"):
            list(ds)


def test_a_manifest_nested_past_pythons_recursion_is_refused_naming_it(tmp_path):
    (tmp_path / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ManifestError, match="manifest.json: nests deeper than Python can parse"):
        shard_loader.open_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "shard-dataset", "lineage": _nested(200)}))
    with pytest.raises(ManifestError, match="manifest.json: nests deeper than 64 levels"):
        shard_loader.open_manifest(str(tmp_path))


def test_info_json_on_a_deeply_nested_lineage_file_is_one_line_naming_it(published, capsys):
    root, m = published
    _with_lineage(
        root, m, {"sources": _nested(400)}
    )  # parses, but printing it with indentation would exhaust the recursion limit
    assert main(["info", str(root), "--json"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: manifests/lineage/")
        and "nests deeper than 64 levels" in err
        and len(err.splitlines()) == 1
    )


def test_a_nul_in_a_key_is_refused_naming_the_row(published):
    root, _ = published
    _rewrite_table(root, "train", lambda raw: _with_key(raw, b"tokenized/synthetic/train/part\x00-00000.npy"))
    with pytest.raises(
        ManifestError,
        match=r"\[0\]\.npy_key: key 'tokenized/synthetic/train/part\\x00-00000.npy' holds a control character",
    ):
        TokenDataset(str(root), **OPTS)
    with pytest.raises(ManifestError, match="holds a control character"):
        shard_loader.format.check_key("a/b\0.npy", "key")


def test_a_table_header_claiming_more_rows_than_its_bytes_is_refused_before_allocating(published):
    root, _ = published

    def absurd(raw):
        rows = np.load(io.BytesIO(raw), allow_pickle=False)
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            buf, {"descr": np.lib.format.dtype_to_descr(rows.dtype), "fortran_order": False, "shape": (10**15,)}
        )
        return buf.getvalue() + rows.tobytes()

    _rewrite_table(root, "train", absurd)
    with pytest.raises(
        ManifestError,
        match=r"edited-\w+\.npy: its header says 1,000,000,000,000,000 rows of \d+ bytes, but it holds [\d,]+ bytes",
    ):
        TokenDataset(str(root), **OPTS)


@pytest.mark.parametrize("command", ["verify", "fetch"])
def test_a_key_that_is_not_utf8_is_refused_naming_the_row(published, command, capsys):
    root, _ = published
    _rewrite_table(root, "train", lambda raw: _with_key(raw, b"tokenized/synthetic/train/\xff-00000.npy"))
    assert main([command, str(root)]) == 2
    assert r"[0].npy_key: key b'tokenized/synthetic/train/\xff-00000.npy' is not UTF-8" in capsys.readouterr().err


def test_verify_and_fetch_cover_the_shard_tables_and_the_lineage_file(published, tmp_path_factory, capsys):
    root, m = published
    _with_lineage(root, m, {"sources": [{"name": "synthetic", "partitions": 5}]})
    opened = shard_loader.open_manifest(str(root))
    lineage = opened.manifest.lineage_file
    shards = sum(len(s.shards) for s in opened.manifest.splits.values())
    assert main(["fetch", str(root)]) == 0
    assert capsys.readouterr().out.startswith(f"{1 + 2 + 1 + 2 * shards} files")  # tokenizer, 2 tables, lineage, shards
    (root / lineage.key).write_bytes(b"{}" + b" " * (lineage.size - 2))  # same size, other bytes
    assert main(["verify", str(root)]) == 1
    assert f"BAD      {lineage.key}: sha256 is" in capsys.readouterr().out


def test_a_key_listed_in_two_splits_is_refused_wherever_both_tables_are_read(published, capsys):
    root, m = published
    val_key = m.splits["val"].shards[0].npy.key

    def share(doc):  # val's shard also listed in train, totals made to agree: val would serve train's data
        shard, train = doc["splits"]["val"]["shards"][0], doc["splits"]["train"]
        train["shards"].append(dict(shard))
        train.update(tokens=train["tokens"] + shard["tokens"], documents=train["documents"] + shard["documents"])

    tamper_json(root, share)
    message = rf"key {val_key.removesuffix('.npy')}\.(npy|bin) is listed in split 'train' and in split 'val'"
    with pytest.raises(ManifestError, match=message):
        shard_loader.open_manifest(str(root))
    for command in ("info", "verify", "fetch"):
        assert main([command, str(root)]) == 2
        assert re.search(message, capsys.readouterr().err)
    with pytest.raises(ManifestError, match=message):  # a trainer checks the other splits' tables too (#34)
        TokenDataset(str(root), split="val", **OPTS)
