"""Processes a test starts in a session of their own (a command and the daemons it leaves), and their stopping."""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def stop_group(proc: subprocess.Popen, grace: float) -> None:
    """Stop the process group `proc` leads (started with `start_new_session`), whatever it left running included:
    SIGTERM, then SIGKILL to what is left after `grace` seconds."""
    with contextlib.suppress(ProcessLookupError):  # raised once no process of the group is left
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()  # reaps the leader: a group of it alone is then gone
            os.killpg(proc.pid, 0)
            time.sleep(0.05)  # polling processes that are stopping, bounded by `grace`
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def session(
    args: list[str], cwd: Path, env: dict[str, str], stderr: int | IO[str] = subprocess.PIPE, grace: float = 0.0
) -> Iterator[subprocess.Popen[str]]:
    """`args` run in a session of their own, text output piped (stderr to `stderr`); on leaving, `stop_group`."""
    proc = subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True
    )
    try:
        yield proc
    finally:
        stop_group(proc, grace)
