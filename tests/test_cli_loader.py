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
    return subprocess.run([sys.executable, "-m", "shard_loader.cli", *args], capture_output=True, text=True, timeout=HUNG)


def test_info_fetch_verify_bench(tmp_path):
    rng = np.random.default_rng(0)
    m = write_dataset(tmp_path / "pub", {"train": [random_docs(rng, 40) for _ in range(3)], "val": [random_docs(rng, 5)]})
    info = _run("info", str(tmp_path / "pub"))
    assert info.returncode == 0 and m.version in info.stdout and f"{m.splits['train'].tokens:,} tokens" in info.stdout
    with FolderServer(tmp_path / "pub") as server:
        fetched = _run("fetch", f"{server.url}/manifest.json", "--cache-dir", str(tmp_path / "cache"))
        assert fetched.returncode == 0, fetched.stderr
        assert "9 files" in fetched.stdout  # the tokenizer and 8 shard files
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
