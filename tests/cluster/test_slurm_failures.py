"""The Slurm path's failures as issue 34 met them, each a `shard-assets build` run verbatim against the real 2-node
cluster and Postgres of tests/cluster/test_slurm.py (the session's `slurm` and `postgres`), a store folder every node
sees:

- case 11: the nodes' `python` lacks Dagster: the build stops after the same job failed the same way twice at start,
  with the job's first output lines (`No module named dagster`) and the output file in the one-line error;
- case 10 and 13: the publish job is cancelled (`scancel`) while `sbatch` answers slowly: the retry, which carries its
  parent's `slurm/job_id` until its own job is submitted, is judged by its own job and succeeds; the summary counts
  the checks of both attempts and every run, retries included;
- case 9: Postgres stops for 40 s mid-build: the build waits for it and ends, and no run is left in progress.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, PARENT_RUN_ID_TAG

from shard_assets.definitions import build_definitions
from shard_assets.execution.slurm import JOB_ID_TAG
from tests.support.dagster_helpers import tiny_dataset
from tests.support.processes import session
from tests.support.seaweedfs import _free_ports
from tests.cluster.test_slurm import clean_environ, environ, slurm_home

pytestmark = pytest.mark.system

BUILD_SECONDS = 1200
IN_PROGRESS = {
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
}


@dataclass
class Built:
    returncode: int
    stdout: str
    stderr: str
    runs: list[dg.DagsterRun]
    jobs: list[dict[str, str]]  # the Slurm jobs of this build's runs


def _build(
    slurm,
    postgres,
    folder: Path,
    database: str,
    files: int,
    workers: int,
    edit: Callable[[dict], None] = lambda config: None,
    during: Callable[[dg.DagsterInstance, subprocess.Popen], None] | None = None,
    env: dict[str, str] | None = None,
) -> Built:
    """`shard-assets build` on a Slurm instance of its own database (deploy/slurm/dagster.yaml, edited by `edit`),
    `during` run beside it; the runs and Slurm jobs it made."""
    postgres.create_database(database)
    home = slurm_home(folder)
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    edit(config)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    spec, store, _ = tiny_dataset(folder, files=files, docs=30)
    full_env = {
        **clean_environ(),
        **slurm.env(),
        **postgres.env(database),
        "DAGSTER_HOME": str(home),
        "SHARD_SLURM_PARTITION": slurm.partition,
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
    }
    args = ["build", "--spec", str(spec), "--store", str(store), "--workers", str(workers)]
    with environ({k: v for k, v in full_env.items() if k.startswith(("DAGSTER_PG_", "SHARD_SLURM", "SLURM_CONF"))}):
        instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
        try:
            with session([sys.executable, "-m", "shard_assets.cli", *args], folder, full_env) as proc:
                side = threading.Thread(target=during, args=(instance, proc), daemon=True) if during else None
                if side:
                    side.start()
                stdout, stderr = proc.communicate(timeout=BUILD_SECONDS)
            if side:
                side.join(timeout=120)
            runs = list(instance.get_runs())
        finally:
            instance.dispose()
    ids = {r.run_id for r in runs}
    jobs = [j for j in slurm.jobs() if j["name"][-36:] in ids]
    return Built(proc.returncode, stdout, stderr, runs, jobs)


def test_nodes_without_dagster_stop_the_build_at_once_naming_the_cause_and_the_output_file(slurm, postgres, tmp_path):
    def no_dagster(config: dict) -> None:
        config["run_launcher"]["config"]["python"] = "/usr/bin/python3"  # Debian's: no Dagster installed

    done = subprocess.run(["/usr/bin/python3", "-c", "import dagster"], capture_output=True)
    assert done.returncode != 0, "/usr/bin/python3 has Dagster: this test needs a Python without it"
    built = _build(slurm, postgres, tmp_path, "nodagster", files=4, workers=2, edit=no_dagster)
    assert built.returncode == 2, built.stderr[-3000:]
    errors = [line for line in built.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in built.stderr, built.stderr[-3000:]
    out = re.escape(str(tmp_path / "slurm-out"))
    assert re.search(rf"its output \({out}/\d+\.out\) begins: .*No module named dagster", errors[0]), errors[0]
    assert "fail this way at every start, so the build stops" in errors[0]
    assert len(built.jobs) <= 3, built.jobs  # not 30: two failures alike stop it
    assert not [r.run_id for r in built.runs if r.status in IN_PROGRESS]


SLOW_SBATCH = """#!/bin/sh
sleep 6
exec {sbatch} "$@"
"""


def _cancel_the_publish_job(slurm, seen: dict) -> Callable[[dg.DagsterInstance, subprocess.Popen], None]:
    """scancel the publish run's Slurm job once it is RUNNING; its job id into `seen`."""

    def cancel(instance: dg.DagsterInstance, proc: subprocess.Popen) -> None:
        before = {j["id"] for j in slurm.jobs()}  # the session's earlier builds' jobs stay in squeue (MinJobAge)
        deadline = time.monotonic() + BUILD_SECONDS
        while proc.poll() is None and time.monotonic() < deadline:
            jobs = [j for j in slurm.jobs() if j["id"] not in before]
            job = next((j for j in jobs if j["name"].startswith("publish_job-")), None)
            if job and job["state"] == "RUNNING":
                run_id = job["name"][-36:]  # a job is named <job>-<run id>
                checked = dg.DagsterEventType.ASSET_CHECK_EVALUATION
                while proc.poll() is None and time.monotonic() < deadline:  # a check passes in the attempt cancelled
                    if instance.get_records_for_run(run_id, of_type=checked, limit=1).records:
                        break
                    time.sleep(0.2)  # polling the run's events, bounded above
                slurm.run("scancel", job["id"])
                seen["job"] = job["id"]
                return
            time.sleep(0.5)  # polling squeue for the job to start, bounded above

    return cancel


def test_a_cancelled_publish_is_retried_on_its_own_job_and_the_summary_counts_every_attempt(slurm, postgres, tmp_path):
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    (wrappers / "sbatch").write_text(SLOW_SBATCH.format(sbatch=shutil.which("sbatch")))
    (wrappers / "sbatch").chmod(0o755)  # a busy controller: the retry stays STARTING with its parent's tags a while
    seen: dict[str, str] = {}
    built = _build(
        slurm,
        postgres,
        tmp_path,
        "cancelled",
        files=2,
        workers=1,
        during=_cancel_the_publish_job(slurm, seen),
        env={"PATH": f"{wrappers}:{os.environ['PATH']}"},
    )
    assert seen, "the publish job was never seen RUNNING"
    assert built.returncode == 0, built.stderr[-3000:]
    cancelled = next(r for r in built.runs if r.tags.get(JOB_ID_TAG) == seen["job"] and r.job_name == "publish_job")
    retry = next(r for r in built.runs if r.run_id == cancelled.tags[AUTO_RETRY_RUN_ID_TAG])
    assert retry.status == dg.DagsterRunStatus.SUCCESS and retry.tags[PARENT_RUN_ID_TAG] == cancelled.run_id
    assert retry.tags[JOB_ID_TAG] != seen["job"]  # its own job
    assert not [r for r in built.runs if r.status == dg.DagsterRunStatus.FAILURE and r is not cancelled]
    checks = re.search(r"^checks\s+(\d+) of (\d+) passed", built.stdout, re.M)
    assert checks and checks.group(1) == checks.group(2), built.stdout
    publish = build_definitions().resolve_job_def("publish_job")
    assert int(checks.group(2)) == len(publish.asset_layer.asset_graph.asset_check_keys), built.stdout
    assert f"; {len(built.runs)} Dagster runs)" in built.stdout, built.stdout  # the retry counted


def _outage(postgres, seconds: float, slurm) -> Callable[[dg.DagsterInstance, subprocess.Popen], None]:
    """Once a tokenize job runs: Postgres stopped for `seconds`, then started again on its port."""

    def outage(instance: dg.DagsterInstance, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + BUILD_SECONDS
        before = {j["id"] for j in slurm.jobs()}
        while proc.poll() is None and time.monotonic() < deadline:
            jobs = [j for j in slurm.jobs() if j["id"] not in before]
            if any(j["name"].startswith("tokenize_job-") and j["state"] == "RUNNING" for j in jobs):
                postgres.stop_server()
                time.sleep(seconds)  # the outage's length
                postgres.start_server()
                return
            time.sleep(0.5)  # polling squeue, bounded above

    return outage


def test_a_40_second_postgres_outage_mid_build_is_waited_out_and_leaves_no_run_in_progress(slurm, postgres, tmp_path):
    built = _build(slurm, postgres, tmp_path, "outage", files=2, workers=2, during=_outage(postgres, 40, slurm))
    print(f"exit {built.returncode}; {[line[:160] for line in built.stderr.splitlines() if 'database' in line]}")
    assert "Traceback" not in built.stderr, built.stderr[-3000:]
    assert "the Dagster database does not answer" in built.stderr, built.stderr[-3000:]
    assert not [line for line in built.stderr.splitlines() if line.startswith("WARNING:root:Retrying")]  # one line
    assert "fix the nodes' environment" not in built.stderr  # runs the outage killed are not the nodes' fault
    errors = [line for line in built.stderr.splitlines() if line.startswith("error: ")]
    assert built.returncode == 0 or (built.returncode == 2 and len(errors) == 1), built.stderr[-3000:]
    assert not [(r.run_id, r.status) for r in built.runs if r.status in IN_PROGRESS]


def test_dev_on_the_slurm_instance_does_not_print_this_machines_default_spec_and_store(
    slurm, postgres, tmp_path, demo_spec
):
    postgres.create_database("dev")
    env = {
        **clean_environ(),
        **slurm.env(),
        **postgres.env("dev"),
        "DAGSTER_HOME": str(slurm_home(tmp_path)),
        "SHARD_SLURM_PARTITION": slurm.partition,
        "SHARD_DATASET_SPEC": str(demo_spec),  # a spec that exists whatever other tests left in the repository
    }
    with open(tmp_path / "dev.err", "w+") as err:
        dev = [sys.executable, "-m", "shard_assets.cli", "dev", "--port", str(_free_ports(1)[0])]
        with session(dev, Path(__file__).resolve().parents[2], env, stderr=err) as proc:
            banner = proc.stdout.readline()
        err.seek(0)
        assert banner.startswith("Dagster UI on http://"), banner + err.read()
    assert "SlurmRunLauncher, each with the spec and store its run config names" in banner
    assert "demo.toml" not in banner and "store " not in banner.replace("spec and store", ""), banner
