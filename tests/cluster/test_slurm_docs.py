"""docs/deploy.md's lost-node time names the Slurm setting it depends on (issue 34, case 12): the tests' cluster
sets SlurmdTimeout to 30 s, Slurm's default is 300 s, and the minutes the docs quote must say which is which."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.slurm import SLURMD_TIMEOUT

DOCS = Path(__file__).resolve().parents[2] / "docs/deploy.md"


def test_the_lost_node_time_is_given_with_the_slurmd_timeout_it_depends_on():
    text = " ".join(DOCS.read_text().split())
    assert re.search(r"`SlurmdTimeout` \(slurm\.conf; default 300 s\)", text)
    assert "With `SlurmdTimeout=300` a lost node costs the build about 7.5 minutes" in text
    assert f"the tests set `SlurmdTimeout={SLURMD_TIMEOUT}` (`tests/support/slurm.py`) and lose about 2.5" in text
    for minutes in re.finditer(r"about 2\.5 minutes[^.]*", text):  # every 2.5-minute claim names the setting
        assert f"SlurmdTimeout={SLURMD_TIMEOUT}" in text[minutes.start() : minutes.end() + 200], minutes.group(0)
