"""A read-only trainer whose version gc collected mid-epoch (issue 34, case 13): it reads over http, so it can write
no lease; `shard-assets gc --delete` run as a user runs it collects the superseded version while the trainer is
between windows. The trainer's error says that gc collected the version and how to protect one (a pin, or a lease
with keys that may write), not "check the URL"."""

from __future__ import annotations

import numpy as np
import pytest

import shard_loader
from shard_loader.errors import NotFoundError
from tests.support.http_server import FolderServer
from tests.support.mixtures import dagster_home, shard_assets
from tests.support.synthetic import random_docs, write_dataset


def _shards(seed: int) -> list:
    return [random_docs(np.random.default_rng(seed + i), 20, vocab_size=300, mean_len=60) for i in range(6)]


def test_a_reader_without_a_lease_is_told_gc_collected_its_version(tmp_path):
    pub = tmp_path / "pub"
    write_dataset(pub, {"train": _shards(0)}, vocab_size=300, version="v1", tag="t1")
    with FolderServer(pub) as server:
        ds = shard_loader.TokenDataset(
            f"{server.url}/manifest.json", seq_len=16, batch_size=4, window_shards=1, cache_dir=tmp_path / "cache"
        )
        batches = iter(ds)
        next(batches)
        write_dataset(pub, {"train": _shards(10)}, vocab_size=300, version="v2", tag="t2")
        done = shard_assets(
            ["gc", "--store", str(pub), "--keep", "1", "--max-age", "0s", "--grace", "0s", "--delete"],
            cwd=tmp_path,
            home=dagster_home(tmp_path),
        )
        assert done.returncode == 0 and "versions dropped  1: v1" in done.stdout, done.stdout + done.stderr
        with pytest.raises(NotFoundError) as raised:
            for _ in batches:
                pass
    message = str(raised.value)
    assert "version v1 was collected by gc while this reader read it" in message, message
    assert f"shard-loader pin {server.url}" not in message  # https cannot be written to: pin where it is published
    assert "shard-loader pin" in message and "check the URL" not in message, message
