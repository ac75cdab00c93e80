"""`shard-assets build` obeys the instance's dagster.yaml: it runs no more partition runs at once than its run,
tokenize-tag and tokenize-pool limits allow, and a re-run frees what a killed build left holding pool slots."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from shard_assets.definitions import build_definitions
from shard_assets.lib.spec import load_spec
from shard_assets.runner import build_dataset
from shard_assets.execution.local import BUILD_TAGS, TOKENIZE_POOL, release_killed_runs, worker_limit
from tests.support.dagster_helpers import tiny_dataset
from tests.support.patience import HUNG

ROOT = Path(__file__).resolve().parents[2]

KILLED_BUILD = """
import os, signal, socket, sys
import dagster as dg
from dagster._core.instance.ref import InstanceRef
from shard_assets.definitions import build_definitions
from tests.support.dagster_helpers import tiny_resources
from pathlib import Path
inst = dg.DagsterInstance.from_ref(InstanceRef.from_dir(sys.argv[1]))
job = build_definitions(tiny_resources(Path("spec.toml"), Path("store"))).resolve_job_def("tokenize_job")
tags = {"shard/build_host": socket.gethostname(), "shard/build_pid": str(os.getpid())}
run = inst.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, tags=tags)
inst.event_log_storage.initialize_concurrency_limit_to_default("tokenize")
assert inst.event_log_storage.claim_concurrency_slot("tokenize", run.run_id, "tokenized_shards").is_claimed
print(run.run_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # as `kill -9` of a build in the middle of a tokenize step
"""


def _home(tmp_path: Path, config: str | None) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    if config:
        (home / "dagster.yaml").symlink_to(ROOT / config)
    return home


def _instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))


def test_the_build_runs_no_more_at_once_than_the_projects_dagster_yaml_allows(tmp_path):
    with _instance(_home(tmp_path, "dagster.yaml")) as inst:
        config = inst.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 2 and config.run_queue_config.max_concurrent_runs == 3
        assert worker_limit(inst) == 2  # the tokenize tag and pool limits, below the run limit
        inst.event_log_storage.set_concurrency_slots(TOKENIZE_POOL, 1)  # `dagster instance concurrency set tokenize 1`
        assert worker_limit(inst) == 1


def test_an_instance_with_dagsters_defaults_allows_its_default_run_limit(tmp_path):
    with _instance(_home(tmp_path, None)) as inst:
        assert inst.get_concurrency_config().pool_config.default_pool_limit is None  # no pool limit, no slots claimed
        assert worker_limit(inst) == inst.get_concurrency_config().run_queue_config.max_concurrent_runs


@pytest.mark.integration
def test_a_rerun_frees_the_pool_slots_a_killed_build_held(tmp_path):
    _, _, resources = tiny_dataset(tmp_path, files=1, docs=10)
    home = _home(tmp_path, "dagster.yaml")
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_BUILD, str(home)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HUNG,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    killed = proc.stdout.split()[0]
    with _instance(home) as inst:
        job = build_definitions(resources).resolve_job_def("tokenize_job")
        live = inst.create_run_for_job(
            job,
            status=dg.DagsterRunStatus.STARTED,
            tags=dict(zip(BUILD_TAGS, (socket.gethostname(), str(os.getpid())))),
        )
        assert inst.event_log_storage.get_concurrency_run_ids() == {killed}
        assert release_killed_runs(inst) == [killed]
        assert inst.get_run_by_id(killed).status == dg.DagsterRunStatus.FAILURE
        assert inst.get_run_by_id(live.run_id).status == dg.DagsterRunStatus.STARTED  # its process (this one) is alive
        assert inst.event_log_storage.get_concurrency_run_ids() == set()
        assert inst.event_log_storage.get_concurrency_info(TOKENIZE_POOL).claimed_slots == []


@pytest.mark.integration
def test_a_build_asked_for_more_workers_runs_at_most_the_limit_at_once(tmp_path, capsys, monkeypatch):
    spec, _, resources = tiny_dataset(tmp_path, files=6, docs=30)
    home = _home(tmp_path, "dagster.yaml")
    for var in (
        "DAGSTER_HOME",
        "SHARD_DATASET_SPEC",
        "DATASET_STORE_ROOT",
    ):  # the pool's processes get the instance and settings as arguments
        monkeypatch.delenv(var, raising=False)
    with _instance(home) as inst:
        result = build_dataset(inst, load_spec(spec), resources, workers=6)
        records = inst.get_run_records(filters=dg.RunsFilter(job_name="tokenize_job"))
        keys = inst.event_log_storage.get_concurrency_keys()
    assert "running 2 partition runs at once, not 6" in capsys.readouterr().err
    assert result.partitions == 6 and all(result.checks.values())
    assert len(records) == 2  # planned for 2 workers: 3 partitions a run
    assert TOKENIZE_POOL in keys  # its tokenize steps claimed slots of the pool
    assert all(
        r.dagster_run.tags[BUILD_TAGS[0]] == socket.gethostname() and int(r.dagster_run.tags[BUILD_TAGS[1]])
        for r in records
    )  # a re-run can tell a killed build's runs


def test_tokenize_steps_carry_the_pool_however_their_run_is_launched(tmp_path):
    """The pool is on the asset: the asset job that the UI, automation and asset backfills launch carries it
    as tokenize_job (sensor, job backfills, the CLI) does, with no run tag needed."""
    _, _, resources = tiny_dataset(tmp_path, files=1, docs=10)
    defs = build_definitions(resources)
    for job in (defs.resolve_implicit_global_asset_job_def(), defs.resolve_job_def("tokenize_job")):
        assert job.graph.node_named("tokenized_shards").definition.pool == TOKENIZE_POOL, job.name
