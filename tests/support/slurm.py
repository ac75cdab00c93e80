"""A real Slurm cluster for tests: a controller and two nodes (n1, n2: two slurmd daemons on this host, each with
its own port, spool, log and pid file), authenticated by a munged of their own, all configured in one temporary
folder and torn down at the end. Nothing under /etc is read or written: the daemons get `-f slurm.conf`, clients
`SLURM_CONF` (from `env()`), and munged its key, socket, pid, log and seed files in the folder.

As root (as CI runs): Debian's slurm-wlm and munge. Jobs run as root too. Finished jobs stay in `squeue` for an
hour (MinJobAge) and in `sacct -c` (job completion records), since there is no accounting database.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.seaweedfs import _free_ports

NODES = ("n1", "n2")
CPUS_PER_NODE = 2
MEMORY_MB = 16000
START_SECONDS = 120
SLURMD_TIMEOUT = 30  # a node silent this long is DOWN and its jobs NODE_FAIL


def installed() -> str | None:
    """None when every daemon and client this fixture needs is on PATH, else what is missing."""
    missing = [
        c
        for c in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "sacct", "srun")
        if shutil.which(c) is None
    ]
    return ", ".join(missing) or None


@dataclass
class SlurmCluster:
    folder: Path
    partition: str = "shard"
    conf: Path = field(init=False)

    def __post_init__(self):
        self.conf = self.folder / "slurm.conf"

    def env(self) -> dict[str, str]:
        """What a Slurm client needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        done = subprocess.run(
            list(args), capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env()}
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def _munge(self) -> None:
        munge = self.folder / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run(
            [
                "munged",
                f"--key-file={key}",
                f"--socket={munge / 'munge.sock'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={munge / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def _write_conf(self) -> None:
        ctld, *node_ports = _free_ports(1 + len(NODES))
        host = socket.gethostname().split(".")[0]
        d = self.folder
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} "
            f"CPUs={CPUS_PER_NODE} RealMemory={MEMORY_MB} State=UNKNOWN"
            for n, p in zip(NODES, node_ports)
        )
        self.conf.write_text(f"""ClusterName=shardtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
DefMemPerCPU=1000
SlurmdTimeout={SLURMD_TIMEOUT}
MessageTimeout=30
MinJobAge=3600
KillWait=5
{nodes}
PartitionName={self.partition} Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP LLN=YES
""")

    def start(self) -> SlurmCluster:
        for sub in ("state", "spool", "log"):
            (self.folder / sub).mkdir()
        self._munge()
        self._write_conf()
        subprocess.run(["slurmctld", "-f", str(self.conf)], check=True, capture_output=True, timeout=60)
        for node in NODES:
            self.start_node(node)
        self.wait_nodes("idle")
        return self

    def start_node(self, node: str) -> None:
        subprocess.run(
            ["slurmd", "-f", str(self.conf), "-N", node],
            check=True,
            capture_output=True,
            timeout=60,
            env={**os.environ, **self.env()},
        )

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "--noheader", "--Node", "--format=%N %T").stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def wait_nodes(self, state: str, nodes: tuple[str, ...] = NODES, seconds: float = START_SECONDS) -> None:
        """Until every node in `nodes` is in `state` (idle, down, ...), polling sinfo; bounded."""
        deadline = time.monotonic() + seconds
        while True:
            states = self.node_states()
            if all(states.get(n, "").rstrip("*~#") == state for n in nodes):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not {state} after {seconds:.0f} s: {states}; {self.log_tail()}")
            time.sleep(0.5)  # polling the controller for an external state change, bounded above

    def slurmd_pid(self, node: str) -> int:
        return int((self.folder / f"slurmd-{node}.pid").read_text().split()[0])

    def jobs(self) -> list[dict[str, str]]:
        """Every job the controller knows (finished ones included), as {id, name, state, nodes, comment}."""
        out = self.run("squeue", "--noheader", "--states=all", "--format=%i|%j|%T|%N|%k").stdout
        keys = ("id", "name", "state", "nodes", "comment")
        return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]

    def completed(self) -> list[dict[str, str]]:
        """`sacct -c`: the job completion records (id, name, nodes, state) of every finished job."""
        out = self.run(
            "sacct", "--completion", "--noheader", "--parsable2", "--format=JobID,JobName,NodeList,State"
        ).stdout
        keys = ("id", "name", "nodes", "state")
        return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]

    def lose_node(self, node: str, job_id: str) -> list[int]:
        """A node lost mid-job: SIGKILL its slurmd, then every process of the job (its slurmstepd, the batch script
        and what it started), so nothing reports the job's end; returns the killed job processes. The controller
        marks the node DOWN and the job NODE_FAIL once the node has been silent for SlurmdTimeout."""
        import psutil

        _signal(self.slurmd_pid(node), signal.SIGKILL)
        killed = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                stepd = any(f"[{job_id}." in part for part in proc.info["cmdline"] or []) and "slurmstepd" in " ".join(
                    proc.info["cmdline"]
                )
                if stepd or proc.environ().get("SLURM_JOB_ID") == job_id:
                    proc.kill()
                    killed.append(proc.info["pid"])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return killed

    def log_tail(self, n: int = 1500) -> str:
        path = self.folder / "log" / "slurmctld.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self) -> None:
        """`scontrol shutdown` (controller and nodes), then SIGKILL to any daemon still alive, then munged."""
        subprocess.run(["scontrol", "shutdown"], capture_output=True, timeout=60, env={**os.environ, **self.env()})
        pids = [
            self.folder / "slurmctld.pid",
            *(self.folder / f"slurmd-{n}.pid" for n in NODES),
            self.folder / "munge" / "munged.pid",
        ]
        # imported here, not at the top: conftest imports this module, and a Dagster upgrade that moves a private name
        # must fail tests/builder/test_execution.py by name, not the whole session at import
        from shard_assets.execution.local import process_alive

        deadline = time.monotonic() + 30
        for path in pids:
            pid = _pid(path)
            if pid is None:
                continue
            if path.name == "munged.pid":
                _signal(pid, signal.SIGTERM)
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)  # waiting for a daemon's orderly exit, bounded above
            _signal(pid, signal.SIGKILL)


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    """A two-node Slurm cluster for the session; skips with the reason when Slurm or munge is missing or this is not
    root (slurmd must run as root to start jobs)."""
    if missing := installed():
        pytest.skip(
            f"Slurm is not installed ({missing} missing): apt-get install slurm-wlm munge "
            "(scripts/setup does with SETUP_APT=1)"
        )
    if os.geteuid() != 0:
        pytest.skip("a Slurm cluster on this host needs root (slurmd starts jobs as their user)")
    folder = Path(
        tempfile.mkdtemp(prefix="shard-slurm-")
    )  # munged wants every folder above its socket searchable by all
    folder.chmod(0o755)
    cluster = SlurmCluster(folder)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
