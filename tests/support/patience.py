"""How long a test waits for a process, a thread or a server before calling it hung. Generous on purpose: at a
load average of 20-30 on 2 cores a 5 s subprocess takes minutes, and a correct run must not fail for that. A
healthy run never waits this long; only a hang does, and then the test fails naming what it waited for."""

import time
from collections.abc import Callable

HUNG = 900.0  # seconds


def wait_for(condition: Callable[[], object], what: str, timeout: float = HUNG) -> None:
    """Return once `condition()` holds, polling; fail naming `what` if it does not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f} s"
        time.sleep(0.01)  # polling for an event, not a race: the condition decides, the clock only bounds a hang
