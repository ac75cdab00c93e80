"""`shard-assets build` reports progress per run: in a pipe (CI logs) one plain line each, in a terminal one
line redrawn in place; the summary stays on stdout either way."""

import os
import pty
import re
import subprocess
import sys

import pytest

from tests.support.dagster_helpers import tiny_dataset
from tests.support.patience import HUNG

pytestmark = pytest.mark.integration


def _build_command(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path, files=3, docs=80)
    (tmp_path / "home").mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "SHARD_PARTITION_BYTES": "0"}  # one partition per file
    return [sys.executable, "-m", "shard_assets.cli", "build", "--spec", str(spec), "--store", str(store), "--workers", "1"], env


def test_progress_in_a_pipe_is_one_plain_line_per_update(tmp_path):
    command, env = _build_command(tmp_path)
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=HUNG)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if "partitions," in line]
    assert lines and all("\r" not in line for line in lines)
    assert any(re.fullmatch(r"tokenize_job \(tokenized_shards\): 3/3 partitions, \d+ s elapsed, ETA 0 s", line) for line in lines), lines
    assert "partitions," not in out.stdout and "checks        6 of 6 passed" in out.stdout


def test_progress_in_a_terminal_redraws_one_line(tmp_path):
    command, env = _build_command(tmp_path)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closes once the build exits
            break
        if not data:
            break
        chunks.append(data)
    stdout = proc.stdout.read().decode()
    assert proc.wait(timeout=HUNG) == 0
    os.close(leader)
    terminal = b"".join(chunks).decode(errors="replace")
    assert "\rtokenize_job (tokenized_shards): 3/3 partitions" in terminal
    assert "checks        6 of 6 passed" in stdout
