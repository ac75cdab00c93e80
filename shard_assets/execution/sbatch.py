"""The Slurm commands a run launcher needs, as plain functions: submit a batch script (`sbatch`), read job
states (`squeue`, then `sacct` for jobs squeue has forgotten), cancel a job (`scancel`). No Dagster here."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..lib.errors import BuildError

# a busy controller answers slowly; past this a command is reported as failed, never waited on forever
COMMAND_SECONDS = 120
SCRATCH_DEFAULT = "${TMPDIR:-/tmp}"  # a per-job TMPDIR where the cluster makes one (job_container/tmpfs), else /tmp
# Job states in which the job may still run its batch script (a requeue is refused with --no-requeue, but an
# administrator may hold or suspend a job).
ALIVE_STATES = frozenset(
    "PENDING CONFIGURING RUNNING COMPLETING SUSPENDED STOPPED RESIZING SIGNALING STAGE_OUT REQUEUED REQUEUE_HOLD "
    "REQUEUE_FED RESV_DEL_HOLD SPECIAL_EXIT".split()
)


class SlurmError(BuildError):
    """A Slurm command failed or refused a job; the message quotes the command and Slurm's own words."""


@dataclass(frozen=True)
class JobRequest:
    """One batch job: what sbatch is asked for. `export` names the variables the job gets from the submitting
    environment (their values never appear on a command line); nothing else of that environment reaches it."""

    name: str
    comment: str
    partition: str = ""
    cpus_per_task: int = 1
    mem: str = ""
    time_limit: str = ""
    output: str = ""
    extra_args: tuple[str, ...] = ()
    export: tuple[str, ...] = ()

    def sbatch_args(self) -> list[str]:
        args = [
            "--parsable",
            f"--job-name={self.name}",
            f"--comment={self.comment}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={self.cpus_per_task}",
            # a lost job fails its run and Dagster's run retries relaunch it: Slurm must not run it twice
            "--no-requeue",
            # the submitting process's folder may not exist on the node; the script moves to its scratch dir
            "--chdir=/tmp",
            f"--export={','.join(self.export) or 'NONE'}",
        ]
        optional = {
            "--partition": self.partition,
            "--mem": self.mem,
            "--time": self.time_limit,
            "--output": self.output,
        }
        args += [f"{flag}={value}" for flag, value in optional.items() if value]
        return args + list(self.extra_args)


@dataclass(frozen=True)
class JobState:
    """What Slurm says of one job: its state name (PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, OUT_OF_MEMORY,
    TIMEOUT, CANCELLED, ...), the nodes it ran on and the reason Slurm gives."""

    job_id: str
    state: str
    nodes: str = ""
    reason: str = ""
    name: str = ""  # the job's name: `<job>-<run id>` for a run's job

    @property
    def alive(self) -> bool:
        return self.state in ALIVE_STATES

    def describe(self) -> str:
        where = f" on {self.nodes}" if self.nodes and self.nodes not in ("None assigned", "(null)") else ""
        why = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        return f"Slurm job {self.job_id} {self.state}{where}{why}"


def batch_script(command: list[str], setup: Iterable[str] = (), scratch_dir: str = "", banner: str = "") -> str:
    """A batch script that runs `command` in a scratch folder of its own, made for this job under `scratch_dir`
    (`%n` becomes the node's name; shell variables expand on the node), exported as TMPDIR and SHARD_SCRATCH so
    every temporary and work folder of the run lands there, and removed when the job ends however it ends.
    `setup` lines run first (`module load ...`, `source /shared/venv/bin/activate`)."""
    template = (scratch_dir or SCRATCH_DEFAULT).replace("%n", "${SLURMD_NODENAME:-$(hostname -s)}")
    quoted = template.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    lines = [
        "#!/bin/bash",
        f"# {banner}" if banner else "# a Dagster run as a Slurm job",
        "set -e",
        *setup,
        f'scratch_root="{quoted}"',
        'mkdir -p "$scratch_root"',
        'SHARD_SCRATCH=$(mktemp -d "$scratch_root/dagster-run-$SLURM_JOB_ID.XXXXXX")',
        'export SHARD_SCRATCH TMPDIR="$SHARD_SCRATCH"',
        "trap 'rm -rf \"$SHARD_SCRATCH\"' EXIT",
        'cd "$SHARD_SCRATCH"',
        'echo "Slurm job $SLURM_JOB_ID on ${SLURMD_NODENAME:-$(hostname -s)}: scratch $SHARD_SCRATCH"',
        shlex.join(command),
    ]
    return "\n".join(lines) + "\n"


def _run(
    args: list[str], stdin: str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            args,
            input=stdin,
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
        )
    except FileNotFoundError:
        raise SlurmError(
            f"`{args[0]}` is not on PATH: run the Dagster daemon on a machine with the Slurm client commands (sbatch, "
            "squeue, scancel)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"`{shlex.join(args[:3])} ...` gave no answer in {COMMAND_SECONDS} s: is slurmctld reachable?"
        ) from None


def _failed(args: list[str], done: subprocess.CompletedProcess[str]) -> SlurmError:
    said = " ".join((done.stderr or done.stdout or "").split())
    return SlurmError(f"`{args[0]}` failed (exit {done.returncode}): {said or 'no message'}")


def submit(request: JobRequest, script: str, values: Mapping[str, str] | None = None) -> str:
    """Submit `script` (sent on stdin: nothing is written to a disk the node may not see); returns the job id.
    `values` are variables set for sbatch only (exported to the job by name), on top of this process's environment."""
    args = ["sbatch", *request.sbatch_args()]
    done = _run(args, stdin=script, env={**os.environ, **(values or {})})
    job_id = done.stdout.strip().split(";")[0]
    if done.returncode != 0 or not job_id.isdigit():
        raise _failed(args, done)
    return job_id


def job_states(job_ids: Iterable[str]) -> dict[str, JobState]:
    """The states of every job of this user that `squeue` knows (finished jobs stay there for MinJobAge, 300 s by
    default), and of those of `job_ids` it has forgotten that `sacct` remembers, where accounting is on."""
    wanted = set(job_ids)
    args = ["squeue", "--me", "--states=all", "--noheader", "--format=%i|%T|%N|%r|%j"]
    done = _run(args)
    if done.returncode != 0:
        raise _failed(args, done)
    states = {}
    for line in done.stdout.splitlines():
        job_id, state, nodes, reason, name = (part.strip() for part in (line.split("|", 4) + ["", "", "", ""])[:5])
        if job_id:
            states[job_id] = JobState(job_id, state, nodes, reason, name)
    if missing := sorted(wanted - states.keys()):
        states.update(_accounted(missing))
    return states


def _accounted(job_ids: list[str]) -> dict[str, JobState]:
    """What accounting (`sacct`) remembers of jobs squeue has forgotten; nothing where accounting is off."""
    jobs = f"--jobs={','.join(job_ids)}"
    done = _run(["sacct", "--noheader", "--parsable2", "--allocations", jobs, "--format=JobID,State,NodeList"])
    if done.returncode != 0:
        return {}
    states = {}
    for line in done.stdout.splitlines():
        job_id, state, nodes = (line.split("|") + ["", ""])[:3]
        if job_id in job_ids and state:
            states[job_id] = JobState(job_id, state.split()[0], nodes)  # "CANCELLED by 0" -> CANCELLED
    return states


def cancel(job_id: str) -> None:
    """`scancel`: Slurm sends the job SIGTERM, then SIGKILL after KillWait."""
    args = ["scancel", job_id]
    done = _run(args)
    if done.returncode != 0:
        raise _failed(args, done)
