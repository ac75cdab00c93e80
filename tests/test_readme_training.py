"""The README's training loop, run verbatim: SIGKILLed at random steps and restarted from its own
checkpoints, every step trains on exactly the batch the uninterrupted run trained on."""

import json
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from tests.support.positional import write_positional  # noqa: E402
from tests.support.patience import HUNG

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[1]
SIZES = [int(n) for n in np.random.default_rng(17).integers(20_000, 60_000, size=16)]

PRELUDE = '''
import json, os, signal, sys
from tests.support.positional import samples_of
url, ckpt, log_path, every, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sizes, epochs, device = json.loads(sys.argv[6]), 2, "cpu"


class Model:
    """Logs what it trains on at each of its steps, and SIGKILLs its own process at step kill_at."""

    def __init__(self):
        self.steps = 0

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["steps"]

    def __call__(self, input_ids, labels):
        self.steps += 1
        with open(log_path, "a") as log:
            log.write(json.dumps([self.steps, samples_of({"input_ids": input_ids, "labels": labels}, sizes)]) + "\\n")
        if self.steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


model = Model()
'''


def readme_loop() -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(r"<!-- training-loop:start -->\n```python\n(.*?)```\n<!-- training-loop:end -->", text, re.S).group(1)


def _train(url, tmp, name, kill_at):
    args = [url, str(tmp / f"{name}.pt"), str(tmp / f"{name}.log"), "7", str(kill_at), json.dumps(SIZES)]
    return subprocess.run([sys.executable, "-c", PRELUDE + readme_loop(), *args], cwd=ROOT, timeout=HUNG, capture_output=True, text=True)


def _log(tmp, name):
    return [json.loads(line) for line in (tmp / f"{name}.log").read_text().splitlines()]


def test_the_readme_loop_survives_sigkill_and_trains_on_the_uninterrupted_stream(tmp_path):
    write_positional(tmp_path / "pub", SIZES)
    url = str(tmp_path / "pub")
    done = _train(url, tmp_path, "whole", kill_at=0)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = {step: rows for step, rows in _log(tmp_path, "whole")}
    steps = len(reference)
    assert sorted(reference) == list(range(1, steps + 1)) and steps > 40
    kills = sorted(random.Random(3).sample(range(2, steps), 3)) + [steps // 2 + 1]  # and the first step of epoch 1
    for kill_at in sorted(set(kills)):
        run = _train(url, tmp_path, "killed", kill_at)
        assert run.returncode == -signal.SIGKILL, run.stderr[-3000:]
    final = _train(url, tmp_path, "killed", kill_at=0)
    assert final.returncode == 0, final.stderr[-3000:]
    trained = _log(tmp_path, "killed")
    assert {step for step, _ in trained} == set(reference)
    assert all(rows == reference[step] for step, rows in trained)  # replayed steps after a restore see the same batch
    assert len(trained) > steps  # the kills really replayed steps after the last checkpoint
