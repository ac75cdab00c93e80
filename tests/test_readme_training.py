"""The README's training loop, run verbatim: SIGKILLed at given steps and restarted from its own checkpoints, every
step trains on exactly the batch the uninterrupted run trained on, in one process and under torchrun with 2 ranks."""

import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from shard_loader import TokenDataset  # noqa: E402
from tests.support.positional import samples_of, write_positional  # noqa: E402

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[1]
SIZES = [int(n) for n in np.random.default_rng(17).integers(20_000, 60_000, size=16)]
EPOCHS = 2

PRELUDE = f'''
import json, os, signal, sys
import torch
import torch.distributed as dist
from tests.support.positional import samples_of
url, ckpt, log_path, every, kill_at, kill_rank = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
sizes, epochs, device = json.loads(sys.argv[7]), {EPOCHS}, "cpu"
rank = int(os.environ.get("RANK", 0))
if "WORLD_SIZE" in os.environ:  # under torchrun, as a DDP trainer starts
    dist.init_process_group("gloo")
_save = torch.save


def _recorded_save(obj, path, *args, **kwargs):
    """torch.save, recording which rank wrote which path: two ranks writing one path race (the .tmp vanishes)."""
    with open(log_path.format(rank=rank) + ".writes", "a") as writes:
        writes.write(json.dumps([rank, str(path)]) + "\\n")
    return _save(obj, path, *args, **kwargs)


torch.save = _recorded_save


class Model:
    """Logs what it trains on at each of its steps, all-reduces as DDP does (no rank runs ahead of another), and
    SIGKILLs its own process at step kill_at on rank kill_rank."""

    def __init__(self):
        self.steps = 0

    def state_dict(self):
        return {{"steps": self.steps}}

    def load_state_dict(self, state):
        self.steps = state["steps"]

    def __call__(self, input_ids, labels):
        self.steps += 1
        with open(log_path.format(rank=rank), "a") as log:
            log.write(json.dumps([self.steps, samples_of({{"input_ids": input_ids, "labels": labels}}, sizes)]) + "\\n")
        if dist.is_initialized():
            dist.all_reduce(torch.zeros(1))
        if self.steps == kill_at and rank == kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)


model = Model()
'''


def readme_loop() -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(r"<!-- training-loop:start -->\n```python\n(.*?)```\n<!-- training-loop:end -->", text, re.S).group(1)


def _train(url, tmp, name, kill_at, kill_rank=0, world=0):
    """One run of the README loop: in this process's interpreter, or under torchrun with `world` ranks."""
    args = [url, str(tmp / f"{name}.pt"), str(tmp / f"{name}-{{rank}}.log"), "7", str(kill_at), str(kill_rank), json.dumps(SIZES)]
    script = tmp / "train.py"
    script.write_text(PRELUDE + readme_loop())
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"] if world else [sys.executable]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*launch, str(script), *args], cwd=ROOT, env=env, timeout=600, capture_output=True, text=True)


def _log(tmp, name, rank=0):
    return [json.loads(line) for line in (tmp / f"{name}-{rank}.log").read_text().splitlines()]


def _check(trained, reference):
    """Every step trained on the uninterrupted run's batch for that step, every step was trained, and kills replayed some."""
    assert {step for step, _ in trained} == set(reference)
    assert all(rows == reference[step] for step, rows in trained)  # replayed steps after a restore see the same batch
    assert len(trained) > len(reference)  # the kills really replayed steps after the last checkpoint


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
    _check(_log(tmp_path, "killed"), reference)


def _uninterrupted(url, rank, world):
    """{step: samples} of one rank over the README's epochs, from the numpy path with the README's options."""
    ds = TokenDataset(url, seq_len=2048, batch_size=8, seed=1234, rank=rank, world_size=world, disk_budget="200GB")
    steps = []
    for epoch in range(EPOCHS):
        ds.set_epoch(epoch)
        steps += [[list(s) for s in samples_of(b, SIZES)] for b in ds]
    return {n: rows for n, rows in enumerate(steps, 1)}


def test_the_readme_loop_under_torchrun_with_two_ranks_survives_sigkill(tmp_path):
    """Rank 1 killed in epoch 0, then rank 0 (which saves) at the first step of epoch 1; torchrun stops the other rank
    each time; the restarted runs train every rank on exactly its uninterrupted stream."""
    write_positional(tmp_path / "pub", SIZES)
    url = str(tmp_path / "pub")
    references = [_uninterrupted(url, rank, 2) for rank in range(2)]
    steps = len(references[0])
    assert steps == len(references[1]) and steps > 20
    for kill_at, kill_rank in [(random.Random(5).randrange(8, steps // 2), 1), (steps // 2 + 1, 0)]:
        run = _train(url, tmp_path, "ranks", kill_at, kill_rank, world=2)
        assert run.returncode != 0, run.stderr[-3000:]
    final = _train(url, tmp_path, "ranks", kill_at=0, world=2)
    assert final.returncode == 0, final.stderr[-3000:]
    for rank in range(2):
        _check(_log(tmp_path, "ranks", rank), references[rank])
    writers = {}
    for rank in range(2):
        path = tmp_path / f"ranks-{rank}.log.writes"
        for writer, written in (json.loads(line) for line in (path.read_text().splitlines() if path.exists() else [])):
            writers.setdefault(written, set()).add(writer)
    assert writers and all(len(ranks) == 1 for ranks in writers.values()), writers  # one writer per checkpoint path
