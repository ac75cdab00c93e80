"""A dagster-daemon for the length of one `shard-assets build`, when none serves the instance: runs queued on a
cluster instance wait for a daemon to launch them, check their workers' health and retry them. A team runs its
own (`dagster-daemon run` on a service node); a build finding it alive uses it and starts nothing."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import yaml  # type: ignore[import-untyped]  # PyYAML ships no annotations; types-PyYAML is not installed

from ..lib.errors import BuildError
from .dagster_private import DAEMON_MODULE

LOCATION_NAME = "shard_assets"  # the code location's name in workspace.yaml: retries and the UI find runs' code by it
HEARTBEAT_FRESH_SECONDS = 60  # a daemon writes one every 30 s; older than this, none is taken to be running
HEARTBEAT = "QUEUED_RUN_COORDINATOR"  # the daemon whose heartbeat says runs are dequeued
STOP_SECONDS = 60


class DaemonError(BuildError):
    """The daemon a build started exited: runs would wait in the queue forever."""


def daemon_alive(instance: dg.DagsterInstance) -> bool:
    """Whether a daemon dequeues this instance's runs: a recent heartbeat of its run coordinator."""
    beat = instance.get_daemon_heartbeats().get(HEARTBEAT)
    return beat is not None and time.time() - beat.timestamp < HEARTBEAT_FRESH_SECONDS


def workspace_yaml(folder: Path) -> Path:
    """A workspace file naming the installed code location, as workspace.yaml does from a checkout."""
    path = folder / "workspace.yaml"
    target = {"module_name": "shard_assets.definitions", "attribute": "defs", "location_name": LOCATION_NAME}
    path.write_text(yaml.safe_dump({"load_from": [{"python_module": target}]}))
    return path


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the build dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG)."""
    # not Linux: the daemon then outlives a killed build, and stops with its own SIGTERM
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


@dataclass
class DaemonsSeen:
    """The daemons whose heartbeats came since `since` (when a build started its own)."""

    since: float
    ids: set[str] = field(default_factory=set)

    def two(self, instance: dg.DagsterInstance) -> bool:
        """Whether another daemon serves the instance beside the build's (a team's, restarted while the build ran):
        the heartbeats of two since `since`. Each overwrites the other's, so both are seen within a few polls."""
        beat = instance.get_daemon_heartbeats().get(HEARTBEAT)
        if beat is not None and beat.daemon_id and beat.timestamp >= self.since:
            self.ids.add(beat.daemon_id)
        return len(self.ids) > 1


class BuildDaemon:
    """`dagster-daemon run` in its own process group, on this environment (DAGSTER_HOME, DAGSTER_PG_*, the
    launcher's variables), logging to a temporary folder; `stop()` ends the group."""

    def __init__(self) -> None:
        self.seen = DaemonsSeen(time.time())
        self.folder = Path(tempfile.mkdtemp(prefix="shard-daemon-"))
        self.log_path = self.folder / "daemon.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", DAEMON_MODULE, "run", "-w", str(workspace_yaml(self.folder))],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def check(self) -> None:
        """Raise if the daemon has exited, with the end of its log."""
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise DaemonError(
                f"the dagster-daemon this build started exited with {self.process.returncode}; its log ends: "
                f"{' '.join(tail.split())}"
            )

    def stop(self) -> None:
        """SIGTERM to the group (the daemon and its code server); SIGKILL to whatever is left after STOP_SECONDS."""
        self._signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_SECONDS)
        self._signal(signal.SIGKILL)  # a daemon that hung, or a code server that outlived it
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
