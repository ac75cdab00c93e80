"""The shard-loader command: info, fetch, verify (which fails on a tampered file), bench."""

import subprocess
import sys

import numpy as np

from tests.support.http_server import FolderServer
from tests.support.synthetic import random_docs, write_dataset
from tests.support.patience import HUNG
import pytest

pytestmark = pytest.mark.integration


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "shard_loader.cli", *args], capture_output=True, text=True, timeout=HUNG
    )


def test_info_fetch_verify_bench(tmp_path):
    rng = np.random.default_rng(0)
    m = write_dataset(
        tmp_path / "pub", {"train": [random_docs(rng, 40) for _ in range(3)], "val": [random_docs(rng, 5)]}
    )
    info = _run("info", str(tmp_path / "pub"))
    assert info.returncode == 0 and m.version in info.stdout and f"{m.splits['train'].tokens:,} tokens" in info.stdout
    with FolderServer(tmp_path / "pub") as server:
        fetched = _run("fetch", f"{server.url}/manifest.json", "--cache-dir", str(tmp_path / "cache"))
        assert fetched.returncode == 0, fetched.stderr
        assert "11 files" in fetched.stdout  # the tokenizer, 2 shard tables and 8 shard files
        ok = _run("verify", f"{server.url}/manifest.json", "--cache-dir", str(tmp_path / "cache"))
        assert ok.returncode == 0 and "all files verified" in ok.stdout
        key = m.splits["train"].shards[1].npy.key
        cached = tmp_path / "cache" / key
        data = bytearray(cached.read_bytes())
        data[200] ^= 1
        cached.write_bytes(bytes(data))
        bad = _run("verify", f"{server.url}/manifest.json", "--cache-dir", str(tmp_path / "cache"))
        assert bad.returncode == 1 and key in bad.stdout and "sha256" in bad.stdout
    bench = _run("bench", str(tmp_path / "pub"), "--seq-len", "16", "--batch-size", "2", "--batches", "20")
    assert bench.returncode == 0 and "tokens/s" in bench.stdout


def test_a_path_that_holds_no_manifest_is_one_line_naming_it_and_what_to_pass(tmp_path, capsys):
    from shard_loader.cli import main

    rng = np.random.default_rng(1)
    m = write_dataset(tmp_path / "pub", {"train": [random_docs(rng, 10)]})
    shard = tmp_path / "pub" / m.splits["train"].shards[0].npy.key
    (tmp_path / "empty").mkdir()
    for path, says in (
        (
            shard,
            "is a file, not a manifest: pass the dataset's folder (the one holding manifest.json) or a manifest's path",
        ),
        (tmp_path / "empty", "no file for key manifest.json"),
    ):
        assert main(["info", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path}") and says in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("command", ["info", "fetch", "verify", "bench"])
def test_an_unknown_split_is_refused_naming_the_known_ones(tmp_path, command, capsys):
    from shard_loader.cli import main

    rng = np.random.default_rng(2)
    write_dataset(tmp_path, {"train": [random_docs(rng, 10)], "val": [random_docs(rng, 3)]})
    assert main([command, str(tmp_path), "--split", "trian"]) == 2
    assert "split 'trian' is not in synthetic version v1; its splits are train, val" in capsys.readouterr().err


def _forge_tokenizer(root, **fields):
    """The published manifest's tokenizer fields edited (its shards and tokenizer file left as they are)."""
    import json

    for path in (root / "manifest.json", *(root / "manifests").glob("*.json")):
        doc = json.loads(path.read_text())
        doc["tokenizer"].update(fields)
        path.write_text(json.dumps(doc))


def test_verify_checks_the_manifests_vocab_size_and_eod_id_against_its_tokenizer_file_and_shards(tmp_path):
    """Issue 47, item 5: a vocab_size below the largest token id, or an eod_id that is not the tokenizer's special
    token, was verified (rc 0)."""
    rng = np.random.default_rng(3)
    pub = tmp_path / "pub"
    m = write_dataset(pub, {"train": [random_docs(rng, 10, vocab_size=1000)]}, vocab_size=1000)
    assert _run("verify", str(pub)).returncode == 0
    _forge_tokenizer(pub, vocab_size=900)
    below = _run("verify", str(pub))
    assert below.returncode == 1
    assert "holds token id 999, not below the manifest's tokenizer.vocab_size 900" in below.stdout
    assert f"{m.splits['train'].shards[0].npy.key}: token id 999 is not below vocab_size 900" in below.stdout
    _forge_tokenizer(pub, vocab_size=1000, eod_id=5)
    eod = _run("verify", str(pub))
    assert eod.returncode == 1 and "tokenizer.eod_id 5 is not a special token" in eod.stdout, eod.stdout


def test_the_loader_refuses_a_token_id_past_the_manifests_vocab_size_naming_the_shard(tmp_path):
    import shard_loader

    rng = np.random.default_rng(4)
    pub = tmp_path / "pub"
    m = write_dataset(pub, {"train": [random_docs(rng, 10, vocab_size=1000)]}, vocab_size=1000)
    assert len(list(shard_loader.TokenDataset(str(pub), seq_len=16, batch_size=2))) > 0
    _forge_tokenizer(pub, vocab_size=900)
    key = m.splits["train"].shards[0].npy.key
    with pytest.raises(shard_loader.ShardFormatError, match=f"{key}: token id 9.. is not below the manifest's"):
        list(shard_loader.TokenDataset(str(pub), seq_len=16, batch_size=2))
