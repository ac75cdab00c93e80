"""torchrun with the gloo backend on CPU: ranks resolved from torch.distributed serve every sample of
the epoch exactly once (minus each window's remainder), in the same stream for any worker count and
start method, with equal batch counts; SIGKILLed runs restore at other worker counts and world sizes."""

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from shard_loader import TokenDataset
from tests.support.dist_reader import OPTIONS
from tests.support.positional import positional_dataset, samples_of
from tests.support.patience import HUNG
from tests.support.training import torchrun

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
SIZES = [int(n) for n in np.random.default_rng(1).integers(200, 800, size=9)]
NUMPY_OPTIONS = {k: v for k, v in OPTIONS.items() if k != "batches_per_transfer"}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return positional_dataset(tmp_path_factory, SIZES)


def _torchrun(url, out, world, workers, method, run, every=0, kill_at=0):
    cmd = [
        *torchrun(world),
        str(ROOT / "tests/support/dist_reader.py"),
        url,
        str(out),
        json.dumps(SIZES),
        str(workers),
        method,
        str(every),
        str(kill_at),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUN": str(run)}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=HUNG)


def _logs(out, run, world):
    """Per rank: (header or None, [(step, samples)]) of one run."""
    logs = []
    for rank in range(world):
        path = out / f"run{run}-rank{rank}.log"  # absent or empty: torchrun stopped the rank (another was killed) early
        lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        header, batches = (lines[0], lines[1:]) if lines else (None, [])
        logs.append((header, [(step, [tuple(s) for s in samples]) for step, samples in batches]))
    return logs


def _numpy_stream(url, rank, world):
    return [
        [tuple(s) for s in samples_of(b, SIZES)]
        for b in TokenDataset(url, rank=rank, world_size=world, **NUMPY_OPTIONS)
    ]


def _all_samples(url):
    ds = TokenDataset(url, **NUMPY_OPTIONS)
    return sum(ds.plan().window_samples(w) for w in ds.windows), len(ds.windows)


@pytest.mark.parametrize(
    "world,workers,method", [(1, 0, "fork"), (2, 2, "fork"), (3, 2, "spawn"), (2, 4, "forkserver"), (3, 0, "fork")]
)
def test_every_sample_once_over_ranks_workers_and_start_methods(url, tmp_path, world, workers, method):
    run = _torchrun(url, tmp_path, world, workers, method, run=0)
    assert run.returncode == 0, run.stderr[-3000:]
    logs = _logs(tmp_path, 0, world)
    counts = {len(batches) for _, batches in logs}
    assert len(counts) == 1 and {h["batches"] for h, _ in logs} == counts  # equal batch counts, as len() promised
    for rank, (header, batches) in enumerate(logs):
        assert header["world_size"] == world
        assert [b for _, b in batches] == _numpy_stream(url, rank, world)  # the rank's own stream, in order
    served = Counter(s for _, batches in logs for _, b in batches for s in b)
    total, windows = _all_samples(url)
    assert max(served.values()) == 1
    assert 0 <= total - len(served) < windows * OPTIONS["batch_size"] * world


def test_sigkilled_runs_restore_with_other_worker_counts_and_world_sizes(url, tmp_path):
    boundary = int(TokenDataset(url, rank=0, world_size=2, **NUMPY_OPTIONS).plan().batches_per_window[0])
    # (world, workers, method, checkpoint every, kill at step): at a window boundary, mid-window, at the epoch's end
    plan = [
        (2, 2, "fork", 1, boundary),
        (3, 1, "spawn", 4, boundary + 7),
        (2, 0, "fork", 1, -1),
        (3, 2, "fork", 1, 0),
    ]
    served = Counter()
    for run, (world, workers, method, every, kill_at) in enumerate(plan):
        result = _torchrun(url, tmp_path, world, workers, method, run, every=every, kill_at=kill_at)
        assert (result.returncode != 0) == bool(kill_at), result.stderr[-3000:]
        kept = json.loads((tmp_path / "checkpoint.json").read_text())["step"] if kill_at else 10**9
        logs = _logs(tmp_path, run, world)
        for _, batches in logs:  # batches after the last checkpoint are served again
            served.update(s for step, b in batches if step <= kept for s in b)
    assert all(not batches for _, batches in logs)  # restored at the epoch's end: nothing left to serve
    total, windows = _all_samples(url)
    assert max(served.values()) == 1
    assert 0 <= total - len(served) < windows * OPTIONS["batch_size"] * 3
