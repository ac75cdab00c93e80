"""The Dagster webserver, started on loopback from workspace.yaml after a demo build, shows the asset
graph and the manifest's metadata to a real browser (headless Chromium)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import shard_loader


ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.system, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup installs it with SETUP_APT=1)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chromium(url: str, home: Path, *args: str) -> str:
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={home}", "--window-size=1600,1000", "--virtual-time-budget=15000", *args, url],
        capture_output=True, text=True, timeout=120,
    )
    return out.stdout


@pytest.fixture(scope="module")
def webserver(tmp_path_factory, demo_spec):
    tmp = tmp_path_factory.mktemp("ui")
    env = {
        **os.environ, "DAGSTER_HOME": str(tmp / "home"), "DATASET_STORE_ROOT": str(tmp / "store"),
        "SHARD_DATASET_SPEC": str(demo_spec), "HF_HUB_OFFLINE": "1",
    }
    (tmp / "home").mkdir()
    (tmp / "home" / "dagster.yaml").symlink_to(ROOT / "dagster.yaml")
    subprocess.run([sys.executable, "-m", "shard_assets.cli", "build", "--workers", "1"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the Dagster webserver did not answer within 60 s")
        yield url, tmp
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_the_ui_shows_the_asset_graph(webserver):
    url, tmp = webserver
    shot = tmp / "asset-graph.png"
    _chromium(f"{url}/asset-groups", tmp / "chrome1", f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000
    dom = _chromium(f"{url}/assets", tmp / "chrome2", "--dump-dom")
    for name in ("raw_documents", "tokenizer", "tokenized_shards", "splits", "manifest"):
        assert name in dom
    docs_copy = os.environ.get("SHARD_UI_SCREENSHOT")
    if docs_copy:
        shutil.copy(shot, docs_copy)


def test_the_manifest_page_shows_its_token_count(webserver):
    url, tmp = webserver
    tokens = shard_loader.open_manifest(str(tmp / "store")).manifest.splits["train"].tokens
    dom = _chromium(f"{url}/assets/manifest", tmp / "chrome3", "--dump-dom")
    assert "train_tokens" in dom
    assert f"{tokens:,}" in dom or str(tokens) in dom
