"""A real Postgres for tests: Debian's server binaries, `initdb` + `pg_ctl` in a temporary folder, listening on a
free loopback port (and a Unix socket in that folder), stopped and removed at the end.

Postgres refuses to run as root, so as root the server runs as the `postgres` user (`su`), which owns the folder.
`env()` gives the DAGSTER_PG_* variables the cluster instance files read.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.seaweedfs import _free_ports

USER, DATABASE, PASSWORD = "dagster", "dagster", "not-a-secret-pg"
START_SECONDS = 120


def server_binaries() -> Path | None:
    """The newest installed Postgres server's bin folder (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    beside = shutil.which("pg_ctl")
    return Path(beside).resolve().parent if beside else None


@dataclass
class Postgres:
    folder: Path
    port: int = 0

    def _as_owner(self, args: list[str]) -> subprocess.CompletedProcess:
        """Run a server command as the folder's owner: `postgres` under root, else this user."""
        if os.geteuid() == 0:
            args = ["su", "-s", "/bin/sh", "postgres", "-c", shlex.join(args)]
        return subprocess.run(args, capture_output=True, text=True, timeout=START_SECONDS)

    def start(self) -> Postgres:
        bins = server_binaries()
        if bins is None:
            raise FileNotFoundError("Postgres server binaries (apt-get install postgresql)")
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self.port = _free_ports(1)[0]
        data = self.folder / "data"
        pwfile = self.folder / "pw"
        pwfile.write_text(PASSWORD)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        done = self._as_owner(
            [
                str(bins / "initdb"),
                "-D",
                str(data),
                "-U",
                USER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")
        self.start_server()
        self.create_database(DATABASE)
        return self

    def start_server(self) -> None:
        """`pg_ctl start` on the folder's data, on the same port: after initdb, or after `stop_server`."""
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        done = self._as_owner(
            [
                str(server_binaries() / "pg_ctl"),
                "-D",
                str(self.folder / "data"),
                "-l",
                str(self.folder / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                str(START_SECONDS),
                "start",
            ]
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr[-1000:]} {self.log_tail()}")

    def stop_server(self) -> None:
        """An outage: `pg_ctl stop -m fast` (every client connection is cut); `start_server` brings it back."""
        done = self._as_owner(
            [str(server_binaries() / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop"]
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl stop failed: {done.stderr[-1000:]} {self.log_tail()}")

    def create_database(self, name: str) -> None:
        done = subprocess.run(
            [str(server_binaries() / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, name],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PGPASSWORD": PASSWORD},
        )
        if done.returncode != 0:
            raise RuntimeError(f"createdb {name} failed: {done.stderr}")

    def env(self, database: str = DATABASE) -> dict[str, str]:
        """The DAGSTER_PG_* variables of deploy/*/dagster.yaml for this server."""
        return {
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USER": USER,
            "DAGSTER_PG_PASSWORD": PASSWORD,
            "DAGSTER_PG_DB": database,
        }

    def log_tail(self, n: int = 2000) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self) -> None:
        bins = server_binaries()
        if (self.folder / "data" / "postmaster.pid").exists():
            self._as_owner([str(bins / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop"])


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One Postgres server for the session; skips with the reason when the server binaries are not installed."""
    if server_binaries() is None:
        pytest.skip("Postgres is not installed: apt-get install postgresql (scripts/setup does with SETUP_APT=1)")
    folder = Path(
        tempfile.mkdtemp(prefix="shard-pg-")
    )  # not under pytest's root-only tmp: the postgres user must reach it
    folder.chmod(0o700)
    server = Postgres(folder).start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
