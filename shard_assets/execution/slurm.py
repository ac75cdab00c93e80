"""A Dagster run launcher for Slurm: each run is one batch job (`sbatch`) running `dagster api execute_run`
on a node, in a scratch folder of its own; `terminate` is `scancel`; the run monitoring daemon reads the
job's state (`squeue`, `sacct`), so a job that dies (node lost, out of memory, time limit, cancelled from
outside) fails its run, and the instance's run retries relaunch it. Glue, like dagster-k8s's
K8sRunLauncher: Slurm schedules, Dagster records.

The job gets only the variables named in `env_vars` (Postgres, store keys: their values never reach a
command line or the run config) and the instance's reference (where Postgres is, with `{env: ...}` left
unresolved), so a node needs no copy of DAGSTER_HOME and nothing from the submitting machine's disk.
Per-run overrides are the tags `slurm/partition`, `slurm/cpus_per_task`, `slurm/mem`, `slurm/time_limit`
and `slurm/sbatch_args` (shell words).
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dagster import Array, Field, IntSource, StringSource
from .dagster_private import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
    CheckRunHealthResult,
    ConfigurableClass,
    ConfigurableClassData,
    DagsterRun,
    DagsterRunStatus,
    EngineEventData,
    ExecuteRunArgs,
    LaunchRunContext,
    RunLauncher,
    WorkerStatus,
    check,
)

from .sbatch import JobRequest, JobState, SlurmError, batch_script, cancel, job_states, submit

JOB_ID_TAG = "slurm/job_id"
JOB_RUN_TAG = "slurm/job_run_id"  # the run the job was submitted for: a retry inherits its parent's tags, not its job
OUTPUT_LINES = 3  # lines of a failed job's output quoted in its run's failure
TAG_PREFIX = "slurm/"
STATES_SECONDS = 5.0  # one squeue serves every health check of a monitoring pass made within this long


@dataclass(frozen=True)
class JobResources:
    """What one run's job asks Slurm for: the launcher's config, then the run's `slurm/...` tags over it."""

    partition: str = ""
    cpus_per_task: int = 1
    mem: str = ""
    time_limit: str = ""
    sbatch_args: tuple[str, ...] = ()

    def with_tags(self, tags: Mapping[str, str]) -> JobResources:
        """These resources with a run's `slurm/<field>` tags applied; a bad value names its tag."""
        changes: dict[str, Any] = {}
        for name in ("partition", "mem", "time_limit"):
            if (value := tags.get(TAG_PREFIX + name)) is not None:
                changes[name] = value.strip()
        if (cpus := tags.get(TAG_PREFIX + "cpus_per_task")) is not None:
            if not cpus.strip().isdigit() or int(cpus) < 1:
                raise SlurmError(f"run tag {TAG_PREFIX}cpus_per_task: expected a positive integer, got {cpus!r}")
            changes["cpus_per_task"] = int(cpus)
        if (extra := tags.get(TAG_PREFIX + "sbatch_args")) is not None:
            try:
                changes["sbatch_args"] = tuple(shlex.split(extra))
            except ValueError as exc:
                raise SlurmError(f"run tag {TAG_PREFIX}sbatch_args: not valid shell words ({exc}): {extra!r}") from None
        return replace(self, **changes)


def job_of(run: DagsterRun) -> str | None:
    """The Slurm job submitted for this run, or None: a retry carries its parent's job id until its own is submitted
    (Dagster copies a run's tags onto its retry), and must never be judged, or cancelled, by the parent's job."""
    job_id = run.tags.get(JOB_ID_TAG)
    return job_id if job_id and run.tags.get(JOB_RUN_TAG) == run.run_id else None


def _environment(entries: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """`env_vars` entries (`NAME`: passed from the launcher's environment; `NAME=value`: set) as the names to
    export and the values to set for sbatch."""
    names, values = [], {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not name.isidentifier():
            raise SlurmError(f"run launcher config env_vars: {entry!r} is not NAME or NAME=value")
        names.append(name)
        if sep:
            values[name] = value
    return tuple(dict.fromkeys(names)), values


def _option(source: Any, default: Any, description: str) -> Field:
    """An optional setting of the launcher's config (dagster.yaml's run_launcher.config)."""
    return Field(source, is_required=False, default_value=default, description=description)


class SlurmRunLauncher(RunLauncher, ConfigurableClass):
    """Launches each run as a Slurm batch job; see the module docstring and deploy/slurm/dagster.yaml."""

    def __init__(
        self,
        inst_data: ConfigurableClassData | None = None,
        partition: str = "",
        cpus_per_task: int = 1,
        mem: str = "",
        time_limit: str = "",
        sbatch_args: Sequence[str] = (),
        env_vars: Sequence[str] = (),
        job_setup: Sequence[str] = (),
        python: str = "",
        scratch_dir: str = "",
        output: str = "",
    ):
        self._inst_data = check.opt_inst_param(inst_data, "inst_data", ConfigurableClassData)
        self.resources = JobResources(partition, cpus_per_task, mem, time_limit, tuple(sbatch_args))
        self.export, self.values = _environment(env_vars)
        self.job_setup, self.python, self.scratch_dir, self.output = tuple(job_setup), python, scratch_dir, output
        self._states: tuple[float, dict[str, JobState]] = (0.0, {})
        self._states_lock = threading.Lock()
        super().__init__()  # type: ignore[no-untyped-call]  # Dagster leaves RunLauncher's base __init__ unannotated

    @classmethod
    def config_type(cls) -> dict[str, Field]:
        return {
            "partition": _option(StringSource, "", "sbatch --partition; empty: the cluster's default partition"),
            "cpus_per_task": _option(IntSource, 1, "sbatch --cpus-per-task: a run tokenizes on one core"),
            "mem": _option(StringSource, "", "sbatch --mem (per node), e.g. 4G; empty: the partition's default"),
            "time_limit": _option(StringSource, "", "sbatch --time, e.g. 4:00:00; empty: the partition's default"),
            "sbatch_args": _option(Array(StringSource), [], "more sbatch flags, e.g. --account=data or --qos=low"),
            "env_vars": _option(
                Array(StringSource),
                [],
                "variables the job gets: NAME (its value in the launcher's environment) or NAME=value; no other "
                "variable reaches the job",
            ),
            "job_setup": _option(
                Array(StringSource), [], "shell lines the job runs first, e.g. `module load python/3.11`"
            ),
            "python": _option(
                StringSource, "", "the Python on the nodes with this project installed; empty: the code location's own"
            ),
            "scratch_dir": _option(
                StringSource,
                "",
                "node-local folder under which each job makes and removes its scratch dir (%n: the node's name); "
                "empty: $TMPDIR, else /tmp",
            ),
            "output": _option(
                StringSource, "", "sbatch --output (%j: the job id); empty: Slurm's slurm-%j.out in /tmp"
            ),
        }

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]) -> SlurmRunLauncher:
        return cls(inst_data=inst_data, **config_value)

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @staticmethod
    def request_name(run: DagsterRun) -> str:
        """The run's job name, `<job>-<run id>`: squeue finds a run's job by it when its tag is missing."""
        return f"{run.job_name}-{run.run_id}"

    def request_for(self, run: DagsterRun) -> JobRequest:
        """The batch job of `run`: named and commented with its run id (and job, and partitions)."""
        resources = self.resources.with_tags(run.tags)
        start, end = run.tags.get(ASSET_PARTITION_RANGE_START_TAG), run.tags.get(ASSET_PARTITION_RANGE_END_TAG)
        single = run.tags.get(PARTITION_NAME_TAG)
        partitions = f" {start}..{end}" if start else (f" {single}" if single else "")
        return JobRequest(
            name=self.request_name(run),
            comment=f"dagster run {run.run_id}: {run.job_name}{partitions}",
            partition=resources.partition,
            cpus_per_task=resources.cpus_per_task,
            mem=resources.mem,
            time_limit=resources.time_limit,
            output=self.output,
            extra_args=resources.sbatch_args,
            export=self.export,
        )

    def script_for(self, run: DagsterRun) -> str:
        """The batch script: `<python> -m dagster api execute_run <args>` in the job's scratch dir."""
        origin = check.not_none(run.job_code_origin, "a run launched on Slurm needs its code origin")
        args = ExecuteRunArgs(
            job_origin=origin, run_id=run.run_id, instance_ref=self._instance.get_ref(), set_exit_code_on_failure=True
        )
        # <python> -m dagster api execute_run <json>
        command = [self.python or origin.executable_path, "-m", "dagster", *args.get_command_args()[-3:]]
        return batch_script(
            command,
            self.job_setup,
            self.scratch_dir,
            banner=f"Dagster run {run.run_id} ({run.job_name}), launched by shard_assets.execution.slurm",
        )

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        request = self.request_for(run)
        job_id = submit(request, self.script_for(run), self.values)
        self._instance.add_run_tags(run.run_id, {JOB_ID_TAG: job_id, JOB_RUN_TAG: run.run_id})
        self._instance.report_engine_event(
            f"Submitted Slurm job {job_id}",
            run,
            EngineEventData(
                {
                    "Slurm job id": job_id,
                    "job name": request.name,
                    "partition": request.partition or "(default)",
                    "cpus per task": str(request.cpus_per_task),
                    "memory": request.mem or "(default)",
                    "time limit": request.time_limit or "(default)",
                    "output": request.output or "slurm-%j.out in /tmp",
                }
            ),
            cls=self.__class__,
        )

    def _job_named(self, run: DagsterRun) -> str | None:
        """The job squeue lists under this run's job name: a job submitted while the database was down has no tag."""
        with self._states_lock:
            if time.monotonic() - self._states[0] > STATES_SECONDS:
                self._states = (time.monotonic(), job_states([]))
            name = self.request_name(run)
            return next((s.job_id for s in self._states[1].values() if s.name == name), None)

    def _state(self, job_id: str) -> JobState | None:
        """The job's state from one squeue of this user's jobs, reused for STATES_SECONDS across runs."""
        with self._states_lock:
            taken, states = self._states
            if job_id not in states or time.monotonic() - taken > STATES_SECONDS:
                self._states = (time.monotonic(), job_states([job_id]))
            return self._states[1].get(job_id)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        """RUNNING while the job is pending or running; FAILED once it ended while the run had not, or Slurm
        forgot it; a Slurm command that fails raises, so the monitoring daemon retries instead of failing runs."""
        job_id = job_of(run) or self._job_named(run)
        if not job_id:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, f"run {run.run_id}: its Slurm job is not submitted yet")
        state = self._state(job_id)
        if state is None:
            return CheckRunHealthResult(
                WorkerStatus.FAILED, f"Slurm no longer knows job {job_id} (ended over MinJobAge ago, and no accounting)"
            )
        if state.alive:
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        if state.state == "COMPLETED" and run.status not in (DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING):
            return CheckRunHealthResult(WorkerStatus.SUCCESS)
        started = run.status != DagsterRunStatus.STARTING  # its own log is the run's: the line names the node
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            f"{state.describe()} while the run was {run.status.value}; {self.output_of(job_id, quote=not started)}",
        )

    def output_of(self, job_id: str, quote: bool) -> str:
        """Where the job's output is, and with `quote` its first lines past the script's own banner when this machine
        sees the file (a shared filesystem): the cause of a job that failed before its run started (`No module named
        dagster`) is there; a started run's own output is in its log, not in its failure line."""
        path = (self.output or "/tmp/slurm-%j.out").replace("%j", job_id)
        if not quote:
            return f"its output: {path}"
        try:
            with open(path, errors="replace") as f:
                lines = [line.strip() for line, _ in zip(f, range(50)) if line.strip()]
        except OSError:
            return f"its output: {path} on the node"
        said = [line for line in lines if not line.startswith(f"Slurm job {job_id} on ")][:OUTPUT_LINES]
        return f"its output ({path}) begins: {' | '.join(said)[:500]}" if said else f"its output ({path}) is empty"

    def get_run_worker_debug_info(self, run: DagsterRun, include_container_logs: bool | None = True) -> str | None:
        job_id = job_of(run)
        if not job_id:
            return None
        state = self._state(job_id)
        return (
            f"{state.describe() if state else f'Slurm job {job_id}: unknown to squeue and sacct'}; "
            f"{self.output_of(job_id, quote=False)}; `scontrol show job {job_id}` says more"
        )

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        job_id = job_of(run) if run else None
        if not run or run.is_finished or not job_id:
            return False
        self._instance.report_run_canceling(run)
        try:
            cancel(job_id)
        except SlurmError as exc:
            self._instance.report_engine_event(f"Could not cancel Slurm job {job_id}: {exc}", run, cls=self.__class__)
            return False
        self._instance.report_engine_event(f"Cancelled Slurm job {job_id} (scancel)", run, cls=self.__class__)
        return True
