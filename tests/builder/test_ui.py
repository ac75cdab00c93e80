"""The README's UI flow in a real browser, on a copy of the tree as a fresh clone has it: `scripts/demo`, then
`.venv/bin/shard-assets dev` exactly as the README says, then "Materialize all" clicked in headless Chromium
(Playwright driving Debian's chromium): every run succeeds, into the CLI's store, and publishes the CLI's version.
Then `raw_files_sensor` and the automation sensor turned on in the UI build and publish a new raw file's partition.
Screenshots of the asset pages go to test-artifacts/ui/ (git-ignored). Waits follow run and backfill status over
GraphQL, with limits meant for a loaded 2-core machine."""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import shard_loader
from shard_assets.lib.layout import raw_record_key
from shard_assets.lib.records import RawRecord, get_record
from shard_assets.lib.store import LocalFolderStore
from tests.support.clone import fresh_clone, new_user_env
from tests.support.patience import HUNG
from tests.support.processes import stop_group

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "ui"
DATASET_GROUP = "/locations/shard_assets/asset-groups/dataset"  # the asset graph the README sends a user to
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup installs it with SETUP_APT=1)"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(condition, timeout: float, what: str, poll: float = 2.0):
    """Poll `condition` until it returns something true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(poll)
    pytest.fail(f"waited {timeout:.0f} s for {what}")


class Dagster:
    """The webserver `shard-assets dev` started: GraphQL queries and the runs it has."""

    def __init__(self, url: str):
        self.url = url

    def query(self, text: str, **variables) -> dict:
        body = json.dumps({"query": text, "variables": variables}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(request, timeout=HUNG).read())["data"]

    def runs(self) -> list[dict]:
        query = "{ runsOrError(limit: 200) { ... on Runs { results { runId jobName status tags { key value } } } } }"
        return self.query(query)["runsOrError"]["results"]

    def sensor_status(self, name: str) -> str:
        query = """query($name: String!) { sensorOrError(sensorSelector: {repositoryLocationName: "shard_assets",
                   repositoryName: "__repository__", sensorName: $name}) \
{ ... on Sensor { sensorState { status } } } }"""
        return self.query(query, name=name)["sensorOrError"]["sensorState"]["status"]


def _no_failed_run(dagster: Dagster) -> list[dict]:
    runs = dagster.runs()
    failed = [(r["jobName"], r["runId"]) for r in runs if r["status"] in ("FAILURE", "CANCELED")]
    assert not failed, f"runs failed: {failed}; see {dagster.url}/runs"
    return runs


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the tree as a clone has it, sharing this checkout's .venv; `scripts/demo` run in it."""
    fresh = fresh_clone(tmp_path_factory.mktemp("clone") / "fresh")
    env = new_user_env()
    demo = subprocess.run(["scripts/demo"], cwd=fresh, env=env, capture_output=True, text=True, timeout=HUNG)
    assert demo.returncode == 0, demo.stderr[-3000:]
    version = next(line.split()[1] for line in demo.stdout.splitlines() if line.startswith("version "))
    return fresh, env, version


@contextmanager
def dev_server(cwd: Path, env: dict, log_path: Path) -> Iterator[Dagster]:
    """`shard-assets dev` as the README starts it, in `cwd`, until its code location has loaded; stopped on exit."""
    port = _free_port()
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [str(cwd / ".venv/bin/shard-assets"), "dev", "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = Dagster(f"http://127.0.0.1:{port}")
    try:

        def loaded():
            try:
                entries = server.query(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
                )["workspaceOrError"]["locationEntries"]
            except OSError:
                return None
            return [e["name"] for e in entries if e["loadStatus"] == "LOADED"]

        assert _until(loaded, HUNG, f"shard-assets dev to load the code location ({log_path})") == ["shard_assets"]
        yield server
    finally:
        stop_group(proc, 60)
        log.close()


@pytest.fixture(scope="module")
def dagster(project):
    fresh, env, _ = project
    with dev_server(fresh, env, fresh / "dev.log") as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Debian chromium with a fresh profile, driven by Playwright (never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=BROWSER_ARGS,
            viewport={"width": 1600, "height": 1200},
        )
        context.set_default_timeout(HUNG * 1000)
        try:
            yield context.new_page()
        finally:
            context.close()


def _screenshot(page, url: str, name: str, ready: str) -> str:
    """Open `url`, wait for the element `ready` (a Playwright selector) to show its data, save a full-page screenshot
    under test-artifacts/ui/, and return the page's text."""
    page.goto(url)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        page.locator(ready).first.wait_for()
        page.wait_for_load_state("networkidle")
    finally:  # what the page showed, also when it never got ready
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    return page.inner_text("body")


def test_dev_starts_as_the_readme_says_without_the_dagster_yaml_warning(project, dagster):
    fresh, _, _ = project
    log = (fresh / "dev.log").read_text()
    assert (
        f"spec {fresh}/data/demo/demo.toml, store {fresh}/data/store" in log
    )  # what the UI's runs will read and write
    assert "will not be used" not in log and "SupersessionWarning" not in log


def test_materialize_all_in_the_browser_publishes_the_clis_version_into_the_clis_store(project, dagster, browser):
    fresh, _, cli_version = project
    before = {r["runId"] for r in dagster.runs()}
    browser.goto(f"{dagster.url}{DATASET_GROUP}")  # the README's page: the dataset's asset graph
    browser.get_by_role("button", name="Materialize all…").click()
    dialog = browser.get_by_role("dialog")
    dialog.get_by_role("button", name="All", exact=True).click()
    dialog.get_by_role("button", name="Launch backfill").click()
    dialog.wait_for(state="hidden")

    backfill = "{ partitionBackfillsOrError { ... on PartitionBackfills { results { id status } } } }"
    status = _until(
        lambda: [
            b["status"]
            for b in dagster.query(backfill)["partitionBackfillsOrError"]["results"]
            if _no_failed_run(dagster) and b["status"] != "REQUESTED"
        ],
        1200,
        "the backfill to end",
    )
    assert status == ["COMPLETED_SUCCESS"]
    runs = [r for r in dagster.runs() if r["runId"] not in before]
    assert runs and {r["status"] for r in runs} == {"SUCCESS"}
    assert shard_loader.open_manifest(str(fresh / "data/store")).manifest.version == cli_version
    assert not (fresh / ".dagster_home" / "data").exists()  # one store: the CLI's

    graph = _screenshot(
        browser, f"{dagster.url}{DATASET_GROUP}", "asset-graph", r"text=/5 \/ 5 Passed/"
    )  # the manifest node with its checks: the graph's data loaded
    assert all(name in graph for name in ("raw_documents", "tokenizer", "tokenized_shards", "splits", "manifest"))
    if docs_copy := os.environ.get("SHARD_UI_SCREENSHOT"):
        shutil.copy(ARTIFACTS / "asset-graph.png", docs_copy)
    own = get_record(
        LocalFolderStore(fresh / "data/store"), raw_record_key("stdlib.part-000"), RawRecord, "test"
    ).documents
    raw = _screenshot(
        browser,
        f"{dagster.url}/assets/raw_documents?view=partitions&partition=stdlib.part-000",
        "raw-documents-partition",
        'text="dagster/row_count"',
    )
    assert (
        re.search(rf"dagster/row_count\s+{own}\b", raw) and "dropped_too_short" in raw and "part-000.jsonl" in raw
    )  # its own count, not the run's
    tokenized = _screenshot(
        browser,
        f"{dagster.url}/assets/tokenized_shards?view=partitions&partition=stdlib.part-000",
        "tokenized-shards-partition",
        'text="dagster/row_count"',
    )
    assert (
        re.search(rf"dagster/row_count\s+{own}\b", tokenized)
        and "train_tokens" in tokenized
        and "encoder_engine" in tokenized
    )
    manifest = _screenshot(browser, f"{dagster.url}/assets/manifest", "manifest", 'text="train_tokens"')
    assert cli_version in manifest and "train_tokens" in manifest and " bytes)" in manifest
    checks = _screenshot(browser, f"{dagster.url}/assets/manifest?view=checks", "manifest-checks", 'text="Passed"')
    assert "reads_with_shard_loader" in checks and "Passed" in checks


def test_the_sensor_turned_on_in_the_browser_builds_and_publishes_a_new_file(project, dagster, browser):
    fresh, _, cli_version = project
    before = {r["runId"] for r in dagster.runs()}
    corpus = fresh / "data/demo/corpus"
    docs = [json.loads(line)["text"] for line in (corpus / "part-000.jsonl").read_text().splitlines()[:300]]
    (corpus / "part-new.jsonl").write_text("".join(json.dumps({"text": f"A revised note. {d}"}) + "\n" for d in docs))
    browser.goto(f"{dagster.url}/automation")
    for sensor in ("raw_files_sensor", "default_automation_condition_sensor"):
        row = browser.locator("[class*=ListItem_listItem]", has=browser.get_by_text(sensor, exact=True))
        row.locator("label[class*=formatSwitch]").click()
        _until(lambda: dagster.sensor_status(sensor) == "RUNNING", HUNG, f"{sensor} to run")
    store = str(fresh / "data/store")

    def published():
        _no_failed_run(dagster)
        m = shard_loader.open_manifest(store).manifest
        return m.version != cli_version and "stdlib.part-new" in {
            e.partition for s in m.splits.values() for e in s.shards
        }

    _until(published, 900, "automation to publish the new file's partition")
    tokenize = [
        r for r in dagster.runs() if r["jobName"] == "tokenize_job" and r["runId"] not in before
    ]  # the sensor's
    assert [(t["key"], t["value"]) for r in tokenize for t in r["tags"] if t["key"] == "dagster/partition"] == [
        ("dagster/partition", "stdlib.part-new")
    ]
    _screenshot(
        browser,
        f"{dagster.url}/assets/tokenized_shards?view=partitions&partition=stdlib.part-new",
        "tokenized-shards-new-partition",
        'text="dagster/row_count"',
    )
