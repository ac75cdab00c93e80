"""`shard-assets build` reports progress per job: in a pipe (CI logs) plain lines, one when the job is done and
at most one per interval before; in a terminal one line redrawn in place; failed partitions counted as failed
and each failure printed as it happens; the summary stays on stdout either way."""

import io
import math
import os
import pty
import re
import subprocess

import pytest

from shard_assets.runner import Progress
from shard_assets.execution.batches import RunBatch, RunOutcome
from tests.support.build_helpers import build_command
from tests.support.dagster_helpers import publish_checks, tiny_dataset
from tests.support.patience import HUNG

RUNS = [
    RunOutcome(RunBatch("ingest_job", ("web.a", "web.b")), ("run-1",), {}),
    RunOutcome(
        RunBatch("ingest_job", ("web.c",)),
        (),
        {"web.c": "ingest_job [web.c] failed (run run-2): SourceError: c.jsonl:3: not a JSON object"},
    ),
    RunOutcome(RunBatch("ingest_job", ("web.d", "web.e")), ("run-3",), {}),
]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _progress(stream, interval: float) -> str:
    progress = Progress("ingest_job", 5, stream, interval)
    for outcome in RUNS:
        progress.update(outcome)
    return stream.getvalue()


def test_a_pipe_gets_one_line_per_job_and_each_failure_as_it_happens():
    lines = _progress(io.StringIO(), math.inf).splitlines()
    assert lines[0] == f"warning: {RUNS[1].failures['web.c']}"
    assert len(lines) == 2 and re.fullmatch(
        r"ingest_job: 5/5 partitions \(1 failed\), \d+ s elapsed, ETA 0 s", lines[1]
    ), lines
    assert len(_progress(io.StringIO(), 0).splitlines()) == 4  # with no interval: a line per run, and the warning


def test_a_terminal_redraws_one_line_and_clears_it_for_a_warning():
    text = _progress(Terminal(), math.inf)
    assert text.count("\n") == 2 and text.endswith("\n") and "\r\x1b[Kwarning: ingest_job [web.c]" in text
    assert re.search(r"\ringest_job: 5/5 partitions \(1 failed\), \d+ s elapsed, ETA 0 s\n$", text)


def _build_command(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path, files=3, docs=80)
    (tmp_path / "home").mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "home"),
        "HF_HUB_OFFLINE": "1",
        "SHARD_PARTITION_BYTES": "0",
    }  # one partition per file
    return build_command(spec, store), env


@pytest.mark.integration
def test_progress_in_a_pipe_is_one_plain_line_per_job(tmp_path):
    command, env = _build_command(tmp_path)
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=HUNG)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if re.search(r": \d+/\d+ (partitions|run)\b", line)]
    assert lines and all("\r" not in line for line in lines)
    assert any(
        re.fullmatch(r"tokenize_job \(tokenized_shards\): 3/3 partitions, \d+ s elapsed, ETA 0 s", line)
        for line in lines
    ), lines
    assert [line.split(":")[0] for line in lines] == [
        "ingest_job (raw_documents)",
        "ingest_job (dedup)",
        "tokenizer_job",
        "tokenize_job (tokenized_shards)",
        "publish_job",
    ], lines  # every job of the build has its line; the unpartitioned ones count their run
    assert re.fullmatch(r"publish_job: 1/1 run, \d+ s elapsed, ETA 0 s", lines[-1]), lines
    n = publish_checks()
    assert "partitions," not in out.stdout and f"checks        {n} of {n} passed" in out.stdout


@pytest.mark.integration
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
    assert f"checks        {publish_checks()} of {publish_checks()} passed" in stdout
