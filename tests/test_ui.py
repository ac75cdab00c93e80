"""`shard-assets dev`, the README's command, started on loopback after a demo build, shows the code location
`shard_assets`, the asset graph, metadata with its length-histogram picture, and the automation page to a real
browser (headless Chromium), without the misleading dagster.yaml warning."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import shard_loader
from tests.support.patience import HUNG, wait_for


ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.system, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup installs it with SETUP_APT=1)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=10)
        return True
    except OSError:
        return False


def _chromium(url: str, home: Path, *args: str) -> str:
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={home}", "--window-size=1600,1000", "--virtual-time-budget=15000", *args, url],
        capture_output=True, text=True, timeout=HUNG,
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
    subprocess.run([sys.executable, "-m", "shard_assets.cli", "build", "--workers", "1"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=HUNG)
    port = _free_port()
    log = open(tmp / "dev.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "shard_assets.cli", "dev", "--project", str(ROOT), "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/server_info") or proc.poll() is not None, f"shard-assets dev on {url}")
        assert proc.poll() is None, f"shard-assets dev exited: {(tmp / 'dev.log').read_text()[-2000:]}"
        yield url, tmp
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_dev_serves_the_shard_assets_location_without_the_dagster_yaml_warning(webserver):
    url, tmp = webserver
    query = json.dumps({"query": "{ workspaceOrError { ... on Workspace { locationEntries { name } } } }"}).encode()
    request = urllib.request.Request(f"{url}/graphql", data=query, headers={"Content-Type": "application/json"})
    body = json.loads(urllib.request.urlopen(request, timeout=HUNG).read())
    assert [e["name"] for e in body["data"]["workspaceOrError"]["locationEntries"]] == ["shard_assets"]
    log = (tmp / "dev.log").read_text()
    assert "will not be used" not in log and "SupersessionWarning" not in log


def test_a_raw_partition_page_shows_its_row_count_schema_and_histogram(webserver):
    url, tmp = webserver
    page = f"{url}/assets/raw_documents?view=partitions&partition=stdlib.part-000"
    dom = _chromium(page, tmp / "chrome4", "--dump-dom")
    for shown in ("dagster/row_count", "dagster/column_schema", "normalised document text", "length_histogram", "Show Markdown"):
        assert shown in dom, shown
    shot = tmp / "raw-asset.png"
    _chromium(page, tmp / "chrome5", f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000


def test_the_automation_page_lists_the_sensor_and_schedules(webserver):
    url, tmp = webserver
    dom = _chromium(f"{url}/automation", tmp / "chrome6", "--dump-dom")
    for name in ("raw_files_sensor", "retokenize_schedule", "gc_schedule"):
        assert name in dom


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
