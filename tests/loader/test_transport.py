"""Hostile transports on loopback: a server without Range, a trickling server, percent-encoded traversal,
size-cap attacks over HTTP, a tampered tokenizer, and the CLI's default cache for remote URLs."""

from __future__ import annotations

import hashlib
import logging
import os

import numpy as np
import pytest

import shard_loader
from shard_loader import ManifestError, StoreError, TokenDataset
from shard_loader.cli import main
from shard_loader.cache.download import DownloadConfig, download_file
from shard_loader.errors import DeadlineError, DiskBudgetError, TooLargeError
from shard_loader.format import FileRef
from shard_loader.storage.retry import RequestStats, RetryPolicy
from shard_loader.storage.https import HttpStore
from tests.support.hostile_http import NoRangeServer, TrickleServer
from tests.support.http_server import FolderServer
from tests.support.synthetic import random_docs, tamper_json, write_dataset

pytestmark = pytest.mark.integration

FAST_RETRY = RetryPolicy(attempts=8, base_delay=0.01, max_delay=0.05)


@pytest.fixture
def published(tmp_path):
    rng = np.random.default_rng(13)
    m = write_dataset(
        tmp_path / "pub", {"train": [random_docs(rng, 30) for _ in range(2)], "val": [random_docs(rng, 4)]}
    )
    return tmp_path / "pub", m


def _blob(folder, key: str, size: int) -> FileRef:
    data = os.urandom(size)
    (folder / key).parent.mkdir(parents=True, exist_ok=True)
    (folder / key).write_bytes(data)
    return FileRef(key=key, size=size, sha256=hashlib.sha256(data).hexdigest())


def test_a_server_without_range_support_is_read_in_one_streamed_get_not_retried(tmp_path, caplog):
    ref = _blob(tmp_path / "srv", "tokenized/big.npy", 5 * (64 << 10) + 123)
    stats = RequestStats()
    config = DownloadConfig(part_size=64 << 10, concurrency=1, retry=FAST_RETRY)
    with NoRangeServer(tmp_path / "srv") as server, caplog.at_level(logging.WARNING, logger="shard_loader"):
        path = download_file(HttpStore(server.url), ref, tmp_path / "cache" / ref.key, config, stats)
        requests = list(server.requests)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ref.sha256
    assert stats.range_fallbacks == 1 and stats.retries == 0 and stats.failures == 0
    assert len(requests) == 2  # one ranged GET answered 200, then one whole GET; concurrency 1 starts no other part
    assert "ignored Range" in caplog.text and ref.key in caplog.text


def test_a_dataset_on_a_plain_http_server_loads_and_the_cli_fetches_it(published, tmp_path):
    root, m = published
    with NoRangeServer(root) as server:
        ds = TokenDataset(f"{server.url}/manifest.json", seq_len=16, batch_size=2, cache_dir=tmp_path / "cache")
        assert sum(1 for _ in ds) == len(ds) > 0
        assert main(["fetch", server.url, "--cache-dir", str(tmp_path / "cli-cache")]) == 0


def test_a_trickling_server_fails_at_the_files_deadline_with_a_clear_error(tmp_path):
    ref = FileRef(key="tokenized/slow.npy", size=10_000, sha256="0" * 64)
    config = DownloadConfig(retry=FAST_RETRY, deadline_base=1.0, min_rate=1e12)
    stats = RequestStats()
    with TrickleServer(size=ref.size, interval=0.1) as server:
        with pytest.raises(DeadlineError, match=r"tokenized/slow.npy: not complete after 1 s") as info:
            download_file(HttpStore(server.url, timeout=5.0), ref, tmp_path / ref.key, config, stats)
    assert "too slowly" in str(info.value) and "DownloadConfig.min_rate" in str(info.value)
    assert stats.retries == 0  # a deadline is final: no 8 more attempts at a dead link


def test_a_percent_encoded_dotdot_never_reaches_the_server(published, tmp_path):
    root, m = published
    key = m.splits["train"].shards[0].npy.key
    evil = "tokenized/%2e%2e/%2e%2e/%2e%2e/secret.npy"
    tamper_json(root, lambda d: d["splits"]["train"]["shards"][0]["npy"].update(key=evil))
    with FolderServer(root) as server:
        with pytest.raises(ManifestError, match=r"percent-decoded 'tokenized/%2e%2e.*'\.\.'"):
            list(TokenDataset(server.url, seq_len=16, batch_size=2, cache_dir=tmp_path / "cache", window_shards=1))
        assert not [p for p in server.gets if "%2e" in p.lower() or "secret" in p]
    assert (root / key).exists()


def test_keys_are_percent_quoted_so_a_literal_percent_names_a_file_not_an_escape(tmp_path):
    ref = _blob(tmp_path / "srv", "tokenized/a%2Fb.npy", 1000)  # a file whose name holds a literal '%2F'
    with NoRangeServer(tmp_path / "srv") as server:  # a server that percent-decodes paths finds the literal name
        assert HttpStore(server.url).read_bytes(ref.key) == (tmp_path / "srv" / ref.key).read_bytes()
        assert [r.split()[1] for r in server.requests] == ["/tokenized/a%252Fb.npy"]


def test_a_size_of_2_to_the_63_is_refused_before_any_allocation(published, tmp_path):
    root, m = published
    tamper_json(
        root, lambda d: d["splits"]["train"]["shards"][0]["npy"].update(size=2**63 - 1)
    )  # the most an int64 table holds
    with (
        FolderServer(root) as server,
        pytest.raises(ManifestError, match=r"its files add up to 9,223,372,036,854,7\d\d,\d+ bytes"),
    ):
        TokenDataset(server.url, seq_len=16, batch_size=2, cache_dir=tmp_path / "cache", window_shards=1)
    tamper_json(root, lambda d: d["splits"]["train"]["shards"][0]["npy"].update(size=2**62))
    key = m.splits["train"].shards[0].npy.key
    with FolderServer(root) as server:
        ds = TokenDataset(server.url, seq_len=16, batch_size=2, cache_dir=tmp_path / "cache", window_shards=1)
        with pytest.raises(DiskBudgetError, match=f"{key}: needs 4,611,686,018,427,387,904 bytes"):
            list(ds)
    assert not list((tmp_path / "cache").rglob("*.part"))


def test_an_object_over_the_read_cap_is_refused_unread(published):
    root, _ = published
    with FolderServer(root) as server:
        with pytest.raises(TooLargeError, match=r"manifest.json: [\d,]+ bytes is over the 100-byte cap"):
            HttpStore(server.url).read_bytes("manifest.json", limit=100)


def test_a_tampered_tokenizer_fails_fetch_and_verify_naming_its_key(published, tmp_path, capsys):
    root, m = published
    key = m.tokenizer.file.key
    (root / key).write_bytes(b'{"evil": true}\n')
    assert main(["verify", str(root)]) == 1
    assert f"BAD      {key}: size is" in capsys.readouterr().out
    with FolderServer(root) as server:
        assert main(["fetch", server.url, "--cache-dir", str(tmp_path / "cache")]) == 2
    assert key in capsys.readouterr().err
    assert not (tmp_path / "cache" / key).exists()


def test_fetch_without_cache_dir_uses_the_default_cache_and_verify_finds_it(published, tmp_path, monkeypatch, capsys):
    root, m = published
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with FolderServer(root) as server:
        assert main(["verify", server.url]) == 1
        out = capsys.readouterr().out
        assert (
            "is remote" in out
            and f"shard-loader fetch {server.url}" in out
            and str(tmp_path / "xdg" / "shard_loader") in out
        )
        assert main(["fetch", server.url]) == 0
        assert main(["verify", server.url]) == 0
        assert "all files verified" in capsys.readouterr().out
    cached = list((tmp_path / "xdg" / "shard_loader").glob(f"*/{m.tokenizer.file.key}"))
    assert len(cached) == 1 and cached[0].read_bytes() == (root / m.tokenizer.file.key).read_bytes()


def test_a_trickling_manifest_read_fails_at_its_deadline(monkeypatch):
    monkeypatch.setattr("shard_loader.storage.transfer.READ_BYTES_SECONDS", 1.0)
    with TrickleServer(size=10_000, interval=0.1) as server:
        with pytest.raises(DeadlineError, match=r"manifest.json: not complete after 1 s"):
            shard_loader.open_manifest(f"{server.url}/manifest.json")


def test_http_errors_say_what_to_check(tmp_path):
    with FolderServer(tmp_path) as server:
        with pytest.raises(
            StoreError, match=r"manifest.json: HTTP 404 .*check the URL and that the dataset is published there"
        ):
            shard_loader.open_manifest(server.url)
