"""`shard-loader info|fetch|verify` on a mixture URL: info shows each component's weight, natural share, tokens and
implied epochs per mixture epoch (the small component says it repeats); fetch and verify cover every component's
files, over HTTP into one cache folder per component, and verify names the component of a damaged file."""

import json
import subprocess
import sys

import pytest

from tests.support.http_server import FolderServer
from tests.support.mixture_files import Part, write_components, write_mixture

pytestmark = pytest.mark.integration

PARTS = [Part("web", (3000,) * 4, 0.6, 0), Part("code", (2000,) * 6, 0.3, 1), Part("math", (120,), 0.1, 2)]


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "shard_loader.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_info_fetch_verify_a_mixture(tmp_path):
    store = write_components(tmp_path / "store", PARTS)
    url = write_mixture(store, "blend", PARTS, tokens_per_epoch=12_000)
    info = _run("info", url)
    assert info.returncode == 0, info.stderr
    lines = {line.split()[0]: line for line in info.stdout.splitlines() if line.startswith("  ")}
    assert lines["web"].split()[1:6] == ["0.600", "0.497", "12,004", "0.600", "web-v1"]  # epochs: 0.6 * 12,000 / 12,004
    math = lines["math"].split()
    assert (
        math[1:5] == ["0.100", "0.005", "121", "9.917"]
        and "repeats: 9.92 of its epochs per mixture epoch" in lines["math"]
    )
    assert "repeats" not in lines["web"] and "12,000 tokens per mixture epoch" in info.stdout
    as_json = _run("info", url, "--json")
    report = json.loads(as_json.stdout[as_json.stdout.index("{") :])
    assert report["lineage"]["spec"] == "test" and [c["name"] for c in report["splits"]["train"]] == [
        "web",
        "code",
        "math",
    ]
    with FolderServer(store) as server:
        remote = f"{server.url}/mixtures/blend.json"
        cache = tmp_path / "cache"
        fetched = _run("fetch", remote, "--cache-dir", str(cache))
        assert fetched.returncode == 0, fetched.stderr
        assert [line.split(":")[0] for line in fetched.stdout.splitlines()] == ["web", "code", "math"]
        assert (
            "web: 10 files" in fetched.stdout and "math: 4 files" in fetched.stdout
        )  # the tokenizer, the train table, .npy and .bin per shard
        ok = _run("verify", remote, "--cache-dir", str(cache))
        assert ok.returncode == 0 and ok.stdout.count("all files verified") == 3
        damaged = next((cache).glob("code-*/tokenized/**/part-00002.npy"))
        data = bytearray(damaged.read_bytes())
        data[-1] ^= 1
        damaged.write_bytes(bytes(data))
        bad = _run("verify", remote, "--cache-dir", str(cache))
        assert bad.returncode == 1 and "code: BAD" in bad.stdout and "part-00002.npy" in bad.stdout
        assert "web: all files verified" in bad.stdout
    (store / "math/manifests/math-v1.json").write_text((store / "math/manifests/math-v1.json").read_text() + " ")
    refused = _run("info", url)
    assert refused.returncode == 2 and "component 'math'" in refused.stderr and "pinned as" in refused.stderr


def test_info_and_verify_refuse_a_mixture_the_loader_refuses_with_its_words(tmp_path):
    """Issue 47, item 4: tokens_per_epoch past 2**48 (epoch arithmetic would overflow) was described by info
    (`repeats: 8235153604334622.00`) and verified (rc 0) while the loader refused it."""
    import shard_loader

    store = write_components(tmp_path / "store", PARTS)
    url = write_mixture(store, "blend", PARTS, tokens_per_epoch=(1 << 48) + 1)
    with pytest.raises(shard_loader.ManifestError) as loader:
        shard_loader.TokenDataset(url, seq_len=16, batch_size=2)
    for command in ("info", "verify"):
        refused = _run(command, url)
        assert refused.returncode == 2 and "repeats" not in refused.stdout, (command, refused.stdout)
        assert str(loader.value) in refused.stderr, (command, refused.stderr)
