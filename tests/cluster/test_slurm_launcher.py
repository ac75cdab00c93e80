"""The Slurm run launcher's pieces without a cluster: what a run's job asks for, the batch script (run by bash),
job states read from squeue and sacct (stand-ins on PATH), health as the monitoring daemon sees it, and the run
config a cluster run carries. The real cluster is tests/cluster/test_slurm.py's."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.launcher.base import WorkerStatus

from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.execution import sbatch
from shard_assets.execution.sbatch import JobRequest, JobState, SlurmError, batch_script, job_states
from shard_assets.execution.slurm import JOB_ID_TAG, JOB_RUN_TAG, JobResources, SlurmRunLauncher, _environment
from shard_assets.execution.run_queue import launches_elsewhere, portable_config


def test_a_runs_tags_override_the_launcher_config_and_a_bad_tag_is_named():
    base = JobResources(partition="cpu", cpus_per_task=1, mem="4G", time_limit="4:00:00")
    tags = {
        "slurm/partition": "big",
        "slurm/cpus_per_task": "8",
        "slurm/mem": "32G",
        "slurm/sbatch_args": "--qos=high --account 'data team'",
    }
    assert base.with_tags(tags) == JobResources("big", 8, "32G", "4:00:00", ("--qos=high", "--account", "data team"))
    assert base.with_tags({"dagster/partition": "x"}) == base
    with pytest.raises(SlurmError, match="run tag slurm/cpus_per_task: expected a positive integer, got 'eight'"):
        base.with_tags({"slurm/cpus_per_task": "eight"})
    with pytest.raises(SlurmError, match="run tag slurm/sbatch_args: not valid shell words"):
        base.with_tags({"slurm/sbatch_args": "--comment 'unclosed"})


def test_env_vars_are_names_passed_on_or_values_set_and_nothing_else():
    assert _environment(["DAGSTER_PG_PASSWORD", "HF_HUB_OFFLINE=1", "DAGSTER_PG_PASSWORD"]) == (
        ("DAGSTER_PG_PASSWORD", "HF_HUB_OFFLINE"),
        {"HF_HUB_OFFLINE": "1"},
    )
    with pytest.raises(SlurmError, match="env_vars: 'not a name' is not NAME or NAME=value"):
        _environment(["not a name"])


def test_a_job_exports_only_the_named_variables_and_is_never_requeued():
    args = JobRequest(
        "tokenize_job-r1",
        "dagster run r1: tokenize_job",
        partition="cpu",
        mem="4G",
        export=("DAGSTER_PG_PASSWORD",),
        extra_args=("--qos=low",),
    ).sbatch_args()
    assert (
        "--export=DAGSTER_PG_PASSWORD" in args
        and "--no-requeue" in args
        and "--partition=cpu" in args
        and args[-1] == "--qos=low"
    )
    assert "--export=NONE" in JobRequest("j", "c").sbatch_args()
    assert not any(
        a.startswith(("--time", "--partition", "--output")) for a in JobRequest("j", "c").sbatch_args()
    )  # the cluster's defaults


def test_the_batch_script_runs_the_command_in_a_scratch_dir_of_its_own_and_removes_it(tmp_path):
    probe = "import os, tempfile; print(os.getcwd(), tempfile.gettempdir(), os.environ['SHARD_SCRATCH'], sep='|')"
    script = batch_script(
        [sys.executable, "-c", probe], setup=["export SETUP_RAN=1"], scratch_dir=f"{tmp_path}/scratch/%n"
    )
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "n7"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    banner, line = done.stdout.splitlines()
    cwd, tmp, scratch = line.split("|")
    assert (
        cwd == tmp == scratch
        and Path(scratch).parent == tmp_path / "scratch" / "n7"
        and Path(scratch).name.startswith("dagster-run-42.")
    )
    assert banner == f"Slurm job 42 on n7: scratch {scratch}"
    assert list((tmp_path / "scratch" / "n7").iterdir()) == []  # removed when the job ended
    failed = subprocess.run(
        ["bash", "-c", batch_script(["false"], scratch_dir=str(tmp_path / "s2"))],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert failed.returncode == 1 and list((tmp_path / "s2").iterdir()) == []  # removed however the job ends


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """squeue knowing jobs 7 (running) and 8 (out of memory); sacct remembering job 5 (a node failure)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake(bin_dir, "squeue", "printf '7|RUNNING|n1|None\\n8|OUT_OF_MEMORY|n2|OutOfMemory\\n99|RUNNING|n2|None\\n'")
    _fake(bin_dir, "sacct", "printf '5|NODE_FAIL|n2\\n5.batch|CANCELLED by 0|n2\\n'")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def test_job_states_come_from_squeue_then_sacct(fake_slurm):
    assert job_states(["7", "5", "6"]) == {
        "7": JobState("7", "RUNNING", "n1", "None"),
        "8": JobState("8", "OUT_OF_MEMORY", "n2", "OutOfMemory"),
        "99": JobState("99", "RUNNING", "n2", "None"),
        "5": JobState("5", "NODE_FAIL", "n2"),
    }
    _fake(fake_slurm, "sacct", "echo 'Slurm accounting storage is disabled' >&2; exit 1")
    assert "6" not in job_states(["6"])  # no accounting: Slurm knows nothing of the job any more
    _fake(fake_slurm, "squeue", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1")
    with pytest.raises(
        SlurmError, match="`squeue` failed \\(exit 1\\): slurm_load_jobs error: Unable to contact slurm controller"
    ):
        job_states(["7"])


def _run(status: dg.DagsterRunStatus, job_id: str | None, submitted_for: str = "r-1") -> dg.DagsterRun:
    """Run r-1 with the tags launch_run writes: the job's id and the run it was submitted for (a retry's parent's)."""
    tags = {JOB_ID_TAG: job_id, JOB_RUN_TAG: submitted_for} if job_id else {}
    return dg.DagsterRun(job_name="tokenize_job", run_id="r-1", status=status, tags=tags)


def test_the_health_check_fails_a_started_run_whose_job_ended(fake_slurm, monkeypatch, tmp_path):
    """Its jobs' output is named in this test's own folder: Slurm's default, /tmp/slurm-<job>.out, is a path any
    process on the host may have left (a stray /tmp/slurm-8.out failed this test on a shared machine)."""
    monkeypatch.setattr(sbatch, "COMMAND_SECONDS", 30)
    launcher = SlurmRunLauncher(output=f"{tmp_path}/slurm-%j.out")
    started = dg.DagsterRunStatus.STARTED
    assert launcher.check_run_worker_health(_run(started, "7")).status == WorkerStatus.RUNNING
    oom = launcher.check_run_worker_health(_run(started, "8"))
    assert (
        oom.status == WorkerStatus.FAILED
        and oom.msg
        == "Slurm job 8 OUT_OF_MEMORY on n2 (OutOfMemory) while the run was STARTED; "
        f"its output: {tmp_path}/slurm-8.out"
    )
    (tmp_path / "slurm-8.out").write_text("Slurm job 8 on n2\n" + "2026-11-29 - dagster - DEBUG - loading\n" * 30)
    assert oom.msg in launcher.check_run_worker_health(_run(started, "8")).msg  # a started run's output: in its log
    before = launcher.check_run_worker_health(_run(dg.DagsterRunStatus.STARTING, "8"))  # died before the run began
    assert f"its output ({tmp_path}/slurm-8.out) begins: 2026-11-29 - dagster - DEBUG - loading" in before.msg
    assert "Slurm job 5 NODE_FAIL on n2" in launcher.check_run_worker_health(_run(started, "5")).msg
    gone = launcher.check_run_worker_health(_run(started, "6"))
    assert gone.status == WorkerStatus.FAILED and "no longer knows job 6" in gone.msg
    assert launcher.check_run_worker_health(_run(started, None)).status == WorkerStatus.UNKNOWN
    inherited = launcher.check_run_worker_health(_run(dg.DagsterRunStatus.STARTING, "5", submitted_for="parent"))
    assert inherited.status == WorkerStatus.UNKNOWN  # a retry is never judged by its parent's (NODE_FAIL) job
    _fake(fake_slurm, "squeue", "printf '7|COMPLETED|n1|None\\n'")
    launcher = SlurmRunLauncher(output=f"{tmp_path}/slurm-%j.out")
    assert (
        launcher.check_run_worker_health(_run(started, "7")).status == WorkerStatus.FAILED
    )  # the job ended, the run never said so
    assert launcher.check_run_worker_health(_run(dg.DagsterRunStatus.SUCCESS, "7")).status == WorkerStatus.SUCCESS


def test_one_squeue_serves_a_pass_of_health_checks(fake_slurm, tmp_path):
    log = tmp_path / "calls"
    _fake(fake_slurm, "squeue", f"echo call >> {log}; printf '7|RUNNING|n1|None\\n99|RUNNING|n2|None\\n'")
    launcher = SlurmRunLauncher()
    for job in ("7", "99", "7", "99"):
        assert launcher.check_run_worker_health(_run(dg.DagsterRunStatus.STARTED, job)).status == WorkerStatus.RUNNING
    assert log.read_text().count("call") == 1


def test_a_cluster_run_carries_the_spec_text_and_the_store_with_keys_only_by_name(tmp_path, monkeypatch):
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "x"\n[[sources]]\nname = "web"\nuri = "src/*.jsonl"\nformat = "jsonl"\n')
    monkeypatch.chdir(tmp_path)
    store = StoreResource(
        root="s3://bucket/prefix",
        endpoint_url="http://s3",
        access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID"),
        secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY"),
    )
    config = portable_config({"dataset": DatasetResource(spec_path="spec.toml"), "store": store})["resources"]
    assert config["dataset"]["config"] == {"spec_path": str(spec), "spec_toml": spec.read_text()}
    assert (
        config["store"]["config"]["access_key_id"] == {"env": "AWS_ACCESS_KEY_ID"}
        and config["store"]["config"]["root"] == "s3://bucket/prefix"
    )
    # a node that cannot see the file reads the text it was given; relative uris stay anchored at the spec's folder
    spec.unlink()
    rebuilt = DatasetResource(**config["dataset"]["config"]).spec()
    assert rebuilt.sources[0].uri == str(tmp_path / "src/*.jsonl")
    local = portable_config({"store": StoreResource(root="data/store")})["resources"]["store"]["config"]
    assert local["root"] == str(tmp_path / "data/store")  # a folder every node sees, by its absolute path
    with pytest.raises(Exception, match="secret_access_key must be a dg.EnvVar"):
        portable_config({"store": StoreResource(root="s3://b/p", secret_access_key="plain-secret")})


def test_only_the_default_launchers_run_the_build_in_process(tmp_path, monkeypatch):
    assert not launches_elsewhere(dg.DagsterInstance.ephemeral())
    (tmp_path / "dagster.yaml").write_text(
        "run_launcher:\n  module: shard_assets.execution.slurm\n  class: SlurmRunLauncher\n"
        "  config:\n    partition: cpu\n"
    )
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert launches_elsewhere(instance) and instance.run_launcher.resources.partition == "cpu"
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert not launches_elsewhere(instance)
