"""`shard-assets dev` stops on SIGTERM (issue 47, item 13): started as a script's background job (`shard-assets dev &`),
it inherits SIGINT ignored, and Dagster maps SIGTERM to SIGINT's handler, so it ignored SIGTERM until killed."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import urllib.request

import pytest

from tests.support.clone import ROOT, new_user_env
from tests.support.patience import HUNG, wait_for

pytestmark = pytest.mark.system


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except OSError:
        return False


def _ignore_interrupts() -> None:
    """What a non-interactive shell does to a job it starts with `&`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_dev_started_as_a_background_job_stops_on_sigterm(tmp_path):
    for name in ("workspace.yaml", "dagster.yaml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text('{"text": "a document long enough to keep around"}\n')
    spec = tmp_path / "spec.toml"
    spec.write_text(f'name = "sig"\n[[sources]]\nname = "web"\nuri = "{tmp_path}/src/*.jsonl"\nformat = "jsonl"\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = new_user_env() | {"SHARD_DATASET_SPEC": str(spec), "DATASET_STORE_ROOT": str(tmp_path / "store")}
    with open(tmp_path / "dev.log", "w") as log:
        proc = subprocess.Popen(
            [str(ROOT / ".venv/bin/shard-assets"), "dev", "--project", str(tmp_path), "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_ignore_interrupts,
            start_new_session=True,
        )
        try:
            wait_for(lambda: _serving(f"http://127.0.0.1:{port}/server_info"), "shard-assets dev to serve")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=HUNG) == 0, (tmp_path / "dev.log").read_text()
            assert "Dagster services shut down" in (tmp_path / "dev.log").read_text()
        finally:
            with contextlib.suppress(ProcessLookupError):  # dev, or the code server it leaves to its heartbeat
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
