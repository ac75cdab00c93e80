"""Hostile or broken manifests and shard files are refused with an error naming the key or field,
before any file is used; so are symlinks, FIFOs, devices and paths outside the dataset root."""

import hashlib
import io
import json
import os

import numpy as np
import pytest

import shard_loader
from shard_loader import IntegrityError, ManifestError, ShardFormatError, TokenDataset
from shard_loader.cli import main
from shard_loader.errors import TooLargeError, UnsafeFileError
from shard_loader.format.shard import open_regular
from shard_loader.storage import LocalStore
from tests.support.synthetic import random_docs, tamper_json, write_dataset


@pytest.fixture
def published(tmp_path):
    rng = np.random.default_rng(5)
    m = write_dataset(tmp_path, {"train": [random_docs(rng, 30) for _ in range(2)], "val": [random_docs(rng, 4)]})
    return tmp_path, m


def _shard(doc):
    return doc["splits"]["train"]["shards"][0]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: _shard(d)["npy"].update(key="/etc/passwd"), "is absolute"),
        (lambda d: _shard(d)["npy"].update(key="C:\\windows\\x.npy"), "is absolute"),
        (lambda d: _shard(d)["npy"].update(key="s3://other-bucket/x.npy"), "is absolute"),
        (lambda d: _shard(d)["npy"].update(key="tokenized/../../outside.npy"), r"'\.\.'"),
        (lambda d: _shard(d)["bin"].update(key="tokenized//x.bin"), "empty"),
        (lambda d: _shard(d)["npy"].update(key=_shard(d)["bin"]["key"]), "listed twice"),
        (lambda d: d.update(format_version=3), "format_version 3 is not supported"),
        (lambda d: d.update(format="other-format"), "format is 'other-format'"),
        (
            lambda d: d["tokenizer"].update(vocab_size=100_000),
            "uint16 cannot hold ids of a vocabulary of 100000; expected uint32",
        ),
        (
            lambda d: d.update(token_dtype="uint32"),
            r"token_dtype: uint32 is not the format's dtype for ids of a vocabulary of \d+; expected uint16",
        ),
        (lambda d: d["tokenizer"].update(eod_id=60_000), "eod_id: 60000 is not below vocab_size"),
        (lambda d: _shard(d)["npy"].update(sha256="not-a-hash"), "not 64 lowercase hex"),
        (
            lambda d: _shard(d).update(documents=_shard(d)["documents"] + 1),
            r"documents need \d+ bytes|differ from the sum",
        ),
        (lambda d: d["splits"]["train"].update(tokens=1), "the manifest says 1, "),
        (lambda d: _shard(d).update(tokens=-1), "must not be negative"),
        (lambda d: d.update(token_dtype="float32"), "token_dtype: 'float32' is not one of"),
        (lambda d: d.pop("tokenizer"), "missing field 'tokenizer'"),
    ],
)
def test_broken_manifests_are_refused_before_any_file_is_read(published, edit, message):
    root, _ = published
    tamper_json(root, edit)
    for path in [*(root / "tokenized").rglob("*.npy"), *(root / "tokenized").rglob("*.bin")]:
        # refused from the manifest and its shard table alone: had any shard been touched first, the error would differ
        path.unlink()
    with pytest.raises(ManifestError, match=message):
        TokenDataset(str(root))


def test_a_manifest_that_is_not_json_names_itself(published):
    root, _ = published
    (root / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="manifest.json: not valid JSON"):
        shard_loader.open_manifest(str(root))


def _rewrite(root, key, data: bytes, manifest_edit=None):
    """Replace a file and record its true size and sha256 in manifest.json, as an attacker with write access would."""
    (root / key).write_bytes(data)

    def edit(doc):
        for split in doc["splits"].values():
            for shard in split["shards"]:
                for ref in (shard["npy"], shard["bin"]):
                    if ref["key"] == key:
                        ref.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        if manifest_edit:
            manifest_edit(doc)

    tamper_json(root, edit)


def test_size_or_hash_mismatch_is_refused_naming_the_key(published):
    root, m = published
    key = m.splits["train"].shards[1].npy.key
    data = bytearray((root / key).read_bytes())
    data[-2] ^= 0x55
    (root / key).write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"{key}: sha256 is"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1))
    (root / key).write_bytes(bytes(data) + b"extra")
    with pytest.raises(IntegrityError, match=f"{key}: size is"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1))


def test_offsets_that_decrease_or_pass_the_token_count_are_refused(published):
    root, m = published
    entry = m.splits["train"].shards[0]
    offsets = np.fromfile(root / entry.bin.key, dtype="<i8")
    swapped = offsets.copy()
    swapped[2], swapped[3] = swapped[3], swapped[2]
    _rewrite(root, entry.bin.key, swapped.tobytes())
    with pytest.raises(ShardFormatError, match=f"{entry.bin.key}: offsets decrease at document 2"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1, window_shards=2))
    beyond = offsets.copy()
    beyond[-1] = entry.tokens + 10
    _rewrite(root, entry.bin.key, beyond.tobytes())
    with pytest.raises(ShardFormatError, match=f"{entry.bin.key}: offsets must run from 0 to the token count"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1, window_shards=2))


def test_a_pickled_or_wrongly_typed_npy_is_never_loaded(published):
    root, m = published
    entry = m.splits["train"].shards[0]
    buf = io.BytesIO()
    np.save(buf, np.array([{"evil": 1}] * entry.tokens, dtype=object), allow_pickle=True)
    _rewrite(root, entry.npy.key, buf.getvalue())
    with pytest.raises(ShardFormatError, match=f"{entry.npy.key}: not a readable .npy"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1, window_shards=2))
    buf = io.BytesIO()
    np.save(buf, np.zeros(entry.tokens, dtype=np.int32))
    _rewrite(root, entry.npy.key, buf.getvalue())
    with pytest.raises(
        ShardFormatError, match=f"{entry.npy.key}: expected a 1-D C-ordered uint16 array, found 1-D int32"
    ):
        list(TokenDataset(str(root), seq_len=8, batch_size=1, window_shards=2))


def test_a_versioned_manifest_resolves_keys_from_the_dataset_root(published):
    root, m = published
    opened = shard_loader.open_manifest(str(root / f"manifests/{m.version}.json"))
    assert opened.key == f"manifests/{m.version}.json" and opened.store.url == str(root)
    assert json.loads((root / opened.key).read_text())["dataset"]["version"] == m.version


def _outside_copy(root, key, outside):
    """A copy of a dataset file outside the dataset root, as an attacker's symlink target would be."""
    target = outside / "copy"
    target.write_bytes((root / key).read_bytes())
    return target


def test_a_symlink_inside_the_dataset_is_refused_even_with_the_right_bytes(published, tmp_path_factory, capsys):
    root, m = published
    key = m.splits["train"].shards[0].npy.key
    target = _outside_copy(root, key, tmp_path_factory.mktemp("outside"))
    (root / key).unlink()
    (root / key).symlink_to(target)
    with pytest.raises(UnsafeFileError, match=f"key {key} resolves to .*outside the dataset root"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1, window_shards=2))
    assert main(["verify", str(root)]) == 1
    assert f"BAD      {root.resolve()}: key {key} resolves to" in capsys.readouterr().out


def test_a_symlinked_folder_pointing_outside_the_root_is_refused(published, tmp_path_factory):
    root, m = published
    key = m.splits["train"].shards[0].npy.key
    folder, moved = (root / key).parent, tmp_path_factory.mktemp("outside") / "moved"
    folder.rename(moved)
    folder.symlink_to(moved)
    with pytest.raises(UnsafeFileError, match="outside the dataset root"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1, window_shards=2))


def test_a_fifo_named_by_a_key_is_refused_not_opened(published, capsys):
    root, m = published
    key = m.splits["train"].shards[0].bin.key
    (root / key).unlink()
    os.mkfifo(root / key)  # opening it for reading would block forever: it must be refused from its metadata
    with pytest.raises(UnsafeFileError, match=f"key {key} is a FIFO"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1, window_shards=2))
    assert main(["verify", str(root)]) == 1
    assert "is a FIFO" in capsys.readouterr().out


def test_a_device_named_by_a_key_is_refused():
    """A real device (/dev/null, named by a key of a store rooted at /dev, so no CAP_MKNOD is needed to make one) is
    refused from its metadata, and the shard opener refuses it too."""
    with pytest.raises(UnsafeFileError, match="key null is a device"):
        LocalStore("/dev").read_bytes("null")
    with pytest.raises(UnsafeFileError, match="/dev/null is not a regular file"):
        open_regular("/dev/null")


def test_a_manifest_over_the_read_cap_is_refused_unread(published):
    root, _ = published
    with pytest.raises(TooLargeError, match=r"manifest.json: [\d,]+ bytes is over the 64-byte cap"):
        LocalStore(root).read_bytes("manifest.json", limit=64)


def test_a_manifest_that_is_a_fifo_is_refused_not_awaited(tmp_path):
    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(UnsafeFileError, match="manifest.json is a FIFO"):
        shard_loader.open_manifest(str(tmp_path))


def test_a_symlink_to_a_file_inside_the_root_is_refused_too(published):
    root, m = published
    key = m.splits["train"].shards[0].npy.key
    twin = root / "twin.npy"
    (root / key).rename(twin)
    (root / key).symlink_to(twin)
    with pytest.raises(UnsafeFileError, match=f"key {key} is a symlink"):
        list(TokenDataset(str(root), seq_len=8, batch_size=1, window_shards=2))
