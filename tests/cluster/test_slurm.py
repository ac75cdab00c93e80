"""Builds past one machine, on a real Slurm cluster: a controller and two nodes on this host
(tests/support/slurm.py), the instance in a real Postgres (tests/support/postgres.py), the store on a real S3
server (SeaweedFS) behind the test's proxy, which counts every write and holds one upload while the test kills
the node that sent it.

One build of 8 partitions, with deploy/slurm/dagster.yaml (its limits lowered to LIMIT jobs at once) and no
daemon running (the build runs one), is shared by the first scenarios: runs as Slurm jobs on both nodes with
their own scratch dirs; a node lost mid-run, its run failed, retried, nothing rewritten; the queue's limit held;
the same version as the default instance, byte for byte; the UI's runs and logs. Then the loader under srun
without torchrun, and docs/deploy.md's Slurm steps run verbatim.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG

import shard_loader
from shard_assets.execution.slurm import JOB_ID_TAG
from shard_assets.lib.spec import load_spec
from shard_assets.runner import build_dataset
from tests.support.build_helpers import build_command
from tests.support.dagster_helpers import tiny_dataset, tiny_resources
from tests.support.processes import session, stop_group
from tests.support.s3_proxy import PutGate, S3Proxy
from tests.support.seaweedfs import WRITER, _free_ports
from tests.support.synthetic import random_docs, write_dataset

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 2  # jobs at once in the test's instance; the build asks for 4 runs per job, so the queue holds the rest
PARTITIONS = 8
BUCKET = "slurm-build"
# the upload held while its node is killed: partition 1's, after partition 0's of the same run are up
HELD = "/train/web.part1-"
BUILD_SECONDS = 1800
STEP_SECONDS = 600
IN_PROGRESS = {dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING}


@contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` for the block (this process reads the same instance as the build)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def clean_environ() -> dict[str, str]:
    """This process's environment without any store, Dagster or Slurm setting a test did not choose."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("R2_", "AWS_", "DATASET_", "S3_", "DAGSTER_", "SLURM", "SHARD_"))
    }


def slurm_home(folder: Path) -> Path:
    """A DAGSTER_HOME holding deploy/slurm/dagster.yaml with LIMIT jobs at once, each job's scratch dir under
    folder/scratch/<node> and its Slurm output in folder/slurm-out."""
    config = yaml.safe_load((ROOT / "deploy/slurm/dagster.yaml").read_text())
    config["concurrency"] = {
        "runs": {
            "max_concurrent_runs": LIMIT,
            "tag_concurrency_limits": [{"key": "dataset/step", "value": "tokenize", "limit": LIMIT}],
        },
        "pools": {"default_limit": LIMIT},
    }
    (folder / "slurm-out").mkdir()
    config["run_launcher"]["config"].update(scratch_dir=f"{folder}/scratch/%n", output=f"{folder}/slurm-out/%j.out")
    home = folder / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return home


@dataclass
class Observed:
    """What the test saw while the build ran: squeue samples and the node it killed."""

    samples: int = 0
    live_max: int = 0  # RUNNING jobs whose run is in progress, most at once
    running_max: int = 0  # RUNNING jobs at all: a job whose run just ended may still be exiting
    exiting_max: float = 0.0  # the longest a job was seen RUNNING after its run had ended, in seconds
    killed_job: str = ""
    killed_node: str = ""
    killed_pids: list[int] = field(default_factory=list)
    puts_before_kill: list[str] = field(default_factory=list)


@dataclass
class Build:
    folder: Path
    spec: Path
    returncode: int
    stdout: str
    stderr: str
    observed: Observed
    proxy: S3Proxy
    instance: dg.DagsterInstance
    env: dict[str, str]

    def runs(self) -> list[dg.DagsterRun]:
        return list(self.instance.get_runs())


def _sample(slurm, instance: dg.DagsterInstance, observed: Observed, stop: threading.Event) -> None:
    """squeue every half second: how many jobs run, and how many of those belong to runs still in progress."""
    while not stop.is_set():
        running = [j for j in slurm.jobs() if j["state"] == "RUNNING"]
        run_ids = [j["name"][-36:] for j in running]
        records = instance.get_run_records(dg.RunsFilter(run_ids=run_ids)) if run_ids else []
        live = [r for r in records if r.dagster_run.status in IN_PROGRESS]
        ended = [time.time() - r.end_time for r in records if r.end_time is not None]
        observed.exiting_max = max([observed.exiting_max, *ended])
        observed.samples += 1
        observed.running_max = max(observed.running_max, len(running))
        observed.live_max = max(observed.live_max, len(live))
        stop.wait(0.5)  # the sampling period; the assertions are on what squeue said, never on time


def _writer_of(client: tuple[str, int], proxy_port: int) -> psutil.Process:
    """The process whose connection to the proxy came from `client`."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == client[1] and conn.raddr and conn.raddr.port == proxy_port and conn.pid:
            return psutil.Process(conn.pid)
    raise AssertionError(f"no process holds the connection from {client}")


def _lose_the_node_of_the_held_upload(
    slurm, proxy: S3Proxy, gate: PutGate, proc: subprocess.Popen, observed: Observed
) -> None:
    """When a run's upload is held: kill its node (slurmd and the job's processes), release the upload (refused:
    it never lands), wait for Slurm to call the job NODE_FAIL, then bring the node back."""
    deadline = time.monotonic() + BUILD_SECONDS
    while not gate.held.wait(1.0):
        assert proc.poll() is None, "the build ended before any run uploaded partition 1's shards"
        assert time.monotonic() < deadline, "no upload of partition 1's shards within the build's time"
    writer = _writer_of(gate.client, int(proxy.url.rsplit(":", 1)[1]))
    env = writer.environ()
    observed.killed_job, observed.killed_node = env["SLURM_JOB_ID"], env["SLURMD_NODENAME"]
    observed.puts_before_kill = list(proxy.puts)
    observed.killed_pids = slurm.lose_node(observed.killed_node, observed.killed_job)
    gate.release.set()
    deadline = time.monotonic() + STEP_SECONDS
    while not any(j["id"] == observed.killed_job and j["state"] == "NODE_FAIL" for j in slurm.jobs()):
        assert time.monotonic() < deadline, (
            f"job {observed.killed_job} not NODE_FAIL: {slurm.jobs()} {slurm.log_tail()}"
        )
        time.sleep(1.0)  # the controller declares the node lost after SlurmdTimeout
    slurm.start_node(observed.killed_node)
    slurm.wait_nodes("idle", (observed.killed_node,), seconds=STEP_SECONDS)


@pytest.fixture(scope="module")
def cluster_build(slurm, postgres, seaweed, tmp_path_factory) -> Iterator[Build]:
    folder = tmp_path_factory.mktemp("slurm-build")
    postgres.create_database("build")
    seaweed.create_bucket(BUCKET)
    proxy = S3Proxy(int(seaweed.url.rsplit(":", 1)[1]))
    proxy.gate = gate = PutGate(HELD)
    spec, _, _ = tiny_dataset(folder, files=PARTITIONS, docs=40)
    env = {
        **clean_environ(),
        **slurm.env(),
        **postgres.env("build"),
        "DAGSTER_HOME": str(slurm_home(folder)),
        "SHARD_SLURM_PARTITION": slurm.partition,
        "HF_HUB_OFFLINE": "1",
        "XDG_CACHE_HOME": str(folder / "cache"),
        "AWS_ACCESS_KEY_ID": WRITER[0],
        "AWS_SECRET_ACCESS_KEY": WRITER[1],
        "S3_ENDPOINT_URL": proxy.url,
    }
    with environ({k: v for k, v in env.items() if k.startswith(("DAGSTER_PG_", "SHARD_SLURM", "SLURM_CONF"))}):
        instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"]))
        observed, stop = Observed(), threading.Event()
        sampler = threading.Thread(target=_sample, args=(slurm, instance, observed, stop), daemon=True)
        with open(folder / "build.err", "w") as err:
            with session(build_command(spec, f"s3://{BUCKET}/tiny", 4), folder, env, stderr=err) as proc:
                sampler.start()
                try:
                    _lose_the_node_of_the_held_upload(slurm, proxy, gate, proc, observed)
                    stdout, _ = proc.communicate(timeout=BUILD_SECONDS)
                finally:
                    gate.release.set()
                    stop.set()
                    sampler.join()
        try:
            yield Build(
                folder,
                spec,
                proc.returncode,
                stdout,
                (folder / "build.err").read_text(),
                observed,
                proxy,
                instance,
                env,
            )
        finally:
            instance.dispose()
            proxy.close()


@pytest.fixture(scope="module")
def default_build(cluster_build, tmp_path_factory) -> Path:
    """The same spec built on the default (in-process) instance into a local folder."""
    store = tmp_path_factory.mktemp("default-build") / "store"
    build_dataset(
        dg.DagsterInstance.ephemeral(), load_spec(cluster_build.spec), tiny_resources(cluster_build.spec, store)
    )
    return store


def _succeeded(build: Build) -> None:
    assert build.returncode == 0, build.stderr[-4000:]


def test_runs_execute_as_slurm_jobs_on_both_nodes_each_in_its_own_scratch_dir(cluster_build, slurm):
    _succeeded(cluster_build)
    runs = [r for r in cluster_build.runs() if r.status == dg.DagsterRunStatus.SUCCESS]
    assert {r.job_name for r in runs} == {"ingest_job", "tokenizer_job", "tokenize_job", "publish_job"}
    records = {c["id"]: c for c in slurm.completed()}  # sacct's job completion records
    jobs = {r.tags[JOB_ID_TAG]: r for r in runs}
    assert set(jobs) <= set(records)
    assert all(
        records[j]["name"] == f"{r.job_name}-{r.run_id}" and records[j]["state"] == "COMPLETED" for j, r in jobs.items()
    )
    assert {records[j]["nodes"] for j in jobs} == {"n1", "n2"}
    scratch = cluster_build.folder / "scratch"
    for job, run in jobs.items():
        said = (cluster_build.folder / "slurm-out" / f"{job}.out").read_text()
        node = records[job]["nodes"]
        assert re.search(
            rf"^Slurm job {job} on {node}: scratch {re.escape(str(scratch / node))}/dagster-run-{job}\.\w+$", said, re.M
        ), said[:500]
    assert sorted(p.name for p in scratch.iterdir()) == ["n1", "n2"]
    lost = cluster_build.observed.killed_job
    assert [p.name.split(".")[0] for p in scratch.glob("*/*")] == [
        f"dagster-run-{lost}"
    ]  # every job removed its own, but the one killed with its node
    config = json.dumps(runs[0].run_config)
    assert (
        "[[sources]]" in config and WRITER[1] not in config and '"env": "AWS_SECRET_ACCESS_KEY"' in config
    )  # the spec travels; the key only by name


def test_a_node_lost_mid_run_fails_the_run_which_is_retried_and_no_published_file_is_rewritten(cluster_build, slurm):
    _succeeded(cluster_build)
    observed = cluster_build.observed
    assert observed.killed_pids, "no process of the held job was found to kill"
    killed = next(r for r in cluster_build.runs() if r.tags.get(JOB_ID_TAG) == observed.killed_job)
    assert (
        killed.job_name == "tokenize_job"
        and killed.status == dg.DagsterRunStatus.FAILURE
        and killed.tags[WILL_RETRY_TAG] == "true"
    )
    failure = next(
        e for e in cluster_build.instance.all_logs(killed.run_id) if e.dagster_event and e.dagster_event.is_run_failure
    )
    assert f"Slurm job {observed.killed_job} NODE_FAIL" in failure.message
    retry = cluster_build.instance.get_run_by_id(killed.tags[AUTO_RETRY_RUN_ID_TAG])
    assert retry.status == dg.DagsterRunStatus.SUCCESS and retry.tags["dagster/parent_run_id"] == killed.run_id
    line = re.search(
        rf"tokenize_job \[web\.part0\.\.web\.part1\] failed \(run {killed.run_id}\); "
        rf"Dagster retries it as run {retry.run_id}: .*NODE_FAIL.*",
        cluster_build.stderr,
    )
    assert line and "begins:" not in line.group(0)  # the cause and the retry lead; the job's output stays in its log
    manifest = shard_loader.open_manifest(
        f"s3://{BUCKET}/tiny/manifest.json", cache_dir=cluster_build.folder / "cache", client=_client(cluster_build)
    ).manifest
    published = [f"/{BUCKET}/tiny/{ref.key}" for ref in manifest.files()] + [
        f"/{BUCKET}/tiny/manifests/{manifest.version}.json"
    ]
    puts = Counter(cluster_build.proxy.puts)
    assert {k: puts[k] for k in published if puts[k] != 1} == {}  # each published file written once, never again
    written_by_the_lost_run = [k for k in published if "/web.part0-" in k and "/tokenized/" in k]
    assert written_by_the_lost_run and set(written_by_the_lost_run) <= set(observed.puts_before_kill)


def test_the_instance_limit_holds_on_the_cluster(cluster_build):
    _succeeded(cluster_build)
    observed = cluster_build.observed
    print(
        f"squeue samples {observed.samples}: at most {observed.live_max} jobs of unfinished runs running, "
        f"{observed.running_max} jobs in all; "
        f"a job ran on at most {observed.exiting_max:.1f} s after its run had ended"
    )
    assert observed.samples > 20
    assert observed.live_max == LIMIT, observed  # never more, and reached: the limit is what held the other runs back


def test_the_version_is_the_default_instances_byte_for_byte(cluster_build, default_build):
    _succeeded(cluster_build)
    local = shard_loader.open_manifest(str(default_build)).manifest
    remote = shard_loader.open_manifest(
        f"s3://{BUCKET}/tiny/manifest.json", cache_dir=cluster_build.folder / "cache", client=_client(cluster_build)
    ).manifest
    assert remote.version == local.version
    assert [r.key for r in remote.files() if not r.key.startswith("manifests/lineage/")] == [
        r.key for r in local.files() if not r.key.startswith("manifests/lineage/")
    ]
    s3 = _client(cluster_build)
    for ref in local.files():
        if ref.key.startswith("manifests/lineage/"):
            continue  # the lineage detail names each build's own Dagster runs
        body = s3.get_object(Bucket=BUCKET, Key=f"tiny/{ref.key}")["Body"].read()
        assert body == (default_build / ref.key).read_bytes(), ref.key
    assert f"version       {local.version}" in cluster_build.stdout


def _client(build: Build):
    from shard_loader.storage.s3_client import make_s3_client

    return make_s3_client(build.env["S3_ENDPOINT_URL"], WRITER[0], WRITER[1], retries=5)


def _graphql(url: str, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{url}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.load(response)
    assert "errors" not in answer, answer
    return answer["data"]


@contextmanager
def webserver(env: dict[str, str], folder: Path) -> Iterator[str]:
    port = _free_ports(1)[0]
    with open(folder / "webserver.log", "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster_webserver",
                "-w",
                str(ROOT / "workspace.yaml"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STEP_SECONDS
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=5)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (folder / "webserver.log").read_text()[
                    -2000:
                ]
                time.sleep(1.0)  # polling a starting server, bounded above
        yield url
    finally:
        stop_group(proc, 30)


RUNS = """{ runsOrError { ... on Runs { results { runId jobName status tags { key value } } } } }"""
LOGS = """query ($runId: ID!) { logsForRun(runId: $runId) { ... on EventConnection { events {
  __typename ... on MessageEvent { message } ... on LogsCapturedEvent { fileKey } } } } }"""
CAPTURED = """query ($logKey: [String!]!) { capturedLogs(logKey: $logKey) { stdout stderr } }"""


def test_the_ui_shows_the_runs_as_named_jobs_with_their_logs(cluster_build):
    _succeeded(cluster_build)
    with webserver(cluster_build.env, cluster_build.folder) as url:
        runs = _graphql(url, RUNS)["runsOrError"]["results"]
        assert {r["jobName"] for r in runs if r["status"] == "SUCCESS"} == {
            "ingest_job",
            "tokenizer_job",
            "tokenize_job",
            "publish_job",
        }
        tokenize = next(r for r in runs if r["jobName"] == "tokenize_job" and r["status"] == "SUCCESS")
        tags = {t["key"]: t["value"] for t in tokenize["tags"]}
        assert tags["dagster/code_location"] == "shard_assets" and tags[JOB_ID_TAG].isdigit()
        events = _graphql(url, LOGS, {"runId": tokenize["runId"]})["logsForRun"]["events"]
        assert any(f"Submitted Slurm job {tags[JOB_ID_TAG]}" in (e.get("message") or "") for e in events)
        file_key = next(e["fileKey"] for e in events if e["__typename"] == "LogsCapturedEvent")
        logs = _graphql(url, CAPTURED, {"logKey": [tokenize["runId"], "compute_logs", file_key]})["capturedLogs"]
        assert "tokenized_shards" in (logs["stdout"] or "") + (
            logs["stderr"] or ""
        )  # written by the node, read by the UI


def test_a_run_whose_job_dies_before_the_run_starts_fails_at_once_and_the_build_exits_2(slurm, postgres, tmp_path):
    postgres.create_database("broken")
    config = yaml.safe_load((ROOT / "deploy/slurm/dagster.yaml").read_text())
    config["run_launcher"]["config"]["python"] = "/nonexistent/bin/python"  # a wrong path to the nodes' Python
    config["run_retries"]["max_retries"] = 0
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text(yaml.safe_dump(config))
    spec, store, _ = tiny_dataset(tmp_path, files=1, docs=20)
    env = {
        **clean_environ(),
        **slurm.env(),
        **postgres.env("broken"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "SHARD_SLURM_PARTITION": slurm.partition,
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        build_command(spec, store),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_SECONDS,
    )  # well inside the instance's 1 h start timeout
    assert done.returncode == 2, done.stderr[-3000:]
    died = (
        r"ingest_job \[web\.part0\] failed \(run [0-9a-f-]+\): "
        r"its worker ended before the run started: Slurm job \d+ FAILED"
    )
    assert re.search(rf"^warning: {died}", done.stderr, re.M), done.stderr[-3000:]  # as it fails
    assert re.search(
        rf"^error: every partition failed in ingest_job \(1 of 1\); the first: {died}", done.stderr, re.M
    ), done.stderr[-3000:]


LOADER = """
import json, sys
from shard_loader import TokenDataset
url, out = sys.argv[1:3]
ds = TokenDataset(url, seq_len=16, batch_size=4, seed=3, window_shards=2)
with open(f"{out}/{ds.world.rank}.json", "w") as f:
    json.dump({"world": [ds.world.rank, ds.world.world_size, ds.world.local_rank], \
"batches": [b["input_ids"].tolist() for b in ds]}, f)
"""


def test_two_srun_tasks_without_torchrun_serve_disjoint_halves_of_each_global_batch(slurm, tmp_path):
    import numpy as np

    write_dataset(
        tmp_path / "pub", {"train": [random_docs(np.random.default_rng(i), 40, mean_len=120) for i in range(4)]}
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "loader.py").write_text(LOADER)
    env = {k: v for k, v in clean_environ().items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run(
        [
            "srun",
            "--ntasks=2",
            "--kill-on-bad-exit=1",
            sys.executable,
            str(tmp_path / "loader.py"),
            str(tmp_path / "pub"),
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        env={**env, **slurm.env()},
        capture_output=True,
        text=True,
        timeout=STEP_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    served = [json.loads((tmp_path / "out" / f"{r}.json").read_text()) for r in (0, 1)]
    assert [s["world"] for s in served] == [[0, 2, 0], [1, 2, 1]] or [s["world"][:2] for s in served] == [
        [0, 2],
        [1, 2],
    ]
    expected = [
        [
            b["input_ids"].tolist()
            for b in shard_loader.TokenDataset(
                str(tmp_path / "pub"), seq_len=16, batch_size=4, seed=3, window_shards=2, rank=r, world_size=2
            )
        ]
        for r in (0, 1)
    ]
    assert [s["batches"] for s in served] == expected and len(expected[0]) == len(expected[1]) > 0
    for a, b in zip(*expected):
        assert not {tuple(x) for x in a} & {tuple(x) for x in b}  # the two halves of a global batch share no sample


def docs_block(marker: str) -> str:
    """The bash block that follows `<!-- marker -->` in docs/deploy.md."""
    found = re.search(rf"<!-- {marker} -->\n```bash\n(.*?)```", (ROOT / "docs/deploy.md").read_text(), re.S)
    assert found, f"docs/deploy.md has no bash block after <!-- {marker} -->"
    return found.group(1)


def test_the_deploy_docs_slurm_steps_run_verbatim(cluster_build, default_build, slurm, postgres, tmp_path):
    postgres.create_database("docs")
    shared = tmp_path / "shared"
    shared.mkdir()
    pg = postgres.env("docs")
    values = {
        "shared folder": str(shared),
        "postgres host": pg["DAGSTER_PG_HOST"],
        "postgres port": pg["DAGSTER_PG_PORT"],
        "user": pg["DAGSTER_PG_USER"],
        "password": pg["DAGSTER_PG_PASSWORD"],
        "database": pg["DAGSTER_PG_DB"],
        "partition": slurm.partition,
        "ui port": str(_free_ports(1)[0]),
        "spec": str(cluster_build.spec),
        "dataset": "tiny",
    }
    script = "\n".join(docs_block(m) for m in ("slurm-instance", "slurm-services", "slurm-build"))
    for placeholder, value in values.items():
        script = script.replace(f"<{placeholder}>", value)
    assert "<" not in script, script
    env = {**clean_environ(), **slurm.env(), "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    # its daemon and webserver stay in this session: stopped on leaving it, the daemon given 5 s for an orderly stop
    with session(["bash", "-euo", "pipefail", "-c", script], ROOT, env, grace=5.0) as proc:
        stdout, stderr = proc.communicate(timeout=BUILD_SECONDS)
    assert proc.returncode == 0, stderr[-4000:]
    local = shard_loader.open_manifest(str(default_build)).manifest
    assert f"version       {local.version}" in stdout
    assert shard_loader.open_manifest(str(shared / "datasets/tiny")).manifest.version == local.version
    assert "running one for this build" not in stderr  # the docs' own daemon served the build
    with environ({**pg, "SHARD_SLURM_PARTITION": slurm.partition, **slurm.env()}):
        with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(shared / "dagster_home"))) as instance:
            runs = list(instance.get_runs())
    states = {j["id"]: j["state"] for j in slurm.jobs()}
    assert runs and all(states[r.tags[JOB_ID_TAG]] == "COMPLETED" for r in runs)  # every run was a Slurm job
