"""A mixture under torchrun (gloo, CPU): three datasets, one 100x smaller, mixed 0.6 / 0.3 / 0.1, read by 2 ranks x 2
DataLoader workers with fork and with spawn. In every run of 64 global batches each component's count is within one
of its share; each component serves its own (seed, epoch) order, no sample twice within one of its epochs, and the
small one repeats as its weight requires. A run SIGKILLed at a step (told by a handshake) and resumed with another
worker count, then at world size 3, serves the stream of the uninterrupted run. The same shares and per-component
streams hold over three datasets the project built from JSONL, text and parquet sources and `shard-assets mix`
published."""

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.mix_reader import EPOCHS, OPTIONS
from tests.support.mixture_files import (
    assert_every_block_holds_the_shares,
    Part,
    digests_of,
    own_stream,
    samples_of,
    write_components,
    write_mixture,
)
from tests.support.mixtures import WEIGHTS as BUILT_WEIGHTS
from tests.support.mixtures import blend_spec, build_corpus, mix
from tests.support.training import torchrun

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
PARTS = [Part("web", (3000,) * 8, 0.6, 0), Part("code", (2000,) * 12, 0.3, 1), Part("math", (240,), 0.1, 2)]
SIZES = {p.index: p.sizes for p in PARTS}
BUILT = tuple(BUILT_WEIGHTS)  # in the spec's order, so their component ids; sources: JSONL, text, 6 lemmas in parquet
NUMPY_OPTIONS = {k: v for k, v in OPTIONS.items() if k != "batches_per_transfer"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = write_components(tmp_path_factory.mktemp("mixture-store"), PARTS)
    write_mixture(root, "blend", PARTS, tokens_per_epoch=16_000)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """web, code and math built by the project's runner with one tokenizer file, mixed 0.6 / 0.3 / 0.1 by `shard-assets
    mix`; returns the store that holds them and mixtures/blend.json."""
    root = tmp_path_factory.mktemp("built")
    build_corpus(root, names=BUILT)
    done = mix(root, blend_spec(16_000))  # web by its manifest.json, code by its folder, math by a pinned version
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "store"


def _torchrun(store, out, world, workers, method, run, every=0, kill_at=0, sizes=SIZES):
    """Run the reader; with kill_at, wait for rank 0's handshake at that step and SIGKILL it. With sizes {}, rows are
    logged as (component, digest of the sample's tokens)."""
    cmd = [
        *torchrun(world),
        str(ROOT / "tests/support/mix_reader.py"),
        str(store / "mixtures/blend.json"),
        str(out),
        json.dumps(sizes),
        str(workers),
        method,
        str(every),
        str(kill_at),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUN": str(run)}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    if kill_at:
        handshake, deadline = out / "kill-me", time.monotonic() + 300
        while not handshake.exists():
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "no handshake from rank 0"
            time.sleep(0.05)
        os.kill(int(handshake.read_text()), signal.SIGKILL)
        handshake.unlink()
    output, _ = proc.communicate(timeout=300)
    return proc.returncode, output


def _global_stream(out, run, world, until=None):
    """The run's rows in stream order: step by step, rank 0's rows then rank 1's (steps up to `until`)."""
    steps = {}
    for rank in range(world):
        path = out / f"run{run}-rank{rank}.log"
        for line in path.read_text().splitlines() if path.exists() else []:
            step, _, rows = json.loads(line)
            if until is None or step <= until:
                steps.setdefault(step, [None] * world)[rank] = [tuple(r) for r in rows]
    complete = [s for s in sorted(steps) if None not in steps[s]]  # a killed rank may have logged fewer steps
    assert complete, f"run {run}: no step was logged by all {world} ranks"
    assert complete == list(range(complete[0], complete[0] + len(complete))), complete
    return [row for s in complete for rows in steps[s] for row in rows]


def _assert_every_64_global_batches_hold_the_shares(stream, weights):
    global_batch = OPTIONS["batch_size"] * 2
    comps = np.array([row[0] for row in stream])
    assert_every_block_holds_the_shares(comps, weights, 64 * global_batch, 16_000 // OPTIONS["seq_len"], global_batch)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_two_ranks_two_workers_hold_every_share_in_every_64_global_batches(store, tmp_path, method):
    code, output = _torchrun(store, tmp_path, 2, 2, method, run=0)
    assert code == 0, output[-3000:]
    stream = _global_stream(tmp_path, 0, 2)
    assert len(stream) == EPOCHS * 1000
    _assert_every_64_global_batches_hold_the_shares(stream, [p.weight for p in PARTS])
    for part in PARTS:
        mine = [(s, t) for c, s, t in stream if c == part.index]
        own, per_epoch = own_stream(store / part.name, len(mine), lambda b: samples_of(b, SIZES), **NUMPY_OPTIONS)
        assert mine == own
        for e in range(0, len(mine), per_epoch):
            assert len(set(mine[e : e + per_epoch])) == len(mine[e : e + per_epoch])
    assert len([1 for c, _, _ in stream if c == 2]) // 15 >= 13  # math (15 samples) passes 13 times in 2 mixture epochs


def test_sigkilled_runs_resume_with_other_worker_counts_and_world_sizes(store, tmp_path):
    full_out = tmp_path / "full"
    full_out.mkdir()
    code, output = _torchrun(store, full_out, 2, 2, "fork", run=0)
    assert code == 0, output[-3000:]
    full = _global_stream(full_out, 0, 2)
    rng = random.Random(os.environ.get("MIX_KILL_SEED", "22"))
    first, second = rng.randrange(20, 240), rng.randrange(260, 440)  # the second kill lands in the second epoch
    plan = [(2, 2, "fork", first), (2, 1, "spawn", second), (3, 2, "fork", 0)]  # (world, workers, method, kill at step)
    resumed, out = [], tmp_path / "resumed"
    out.mkdir()
    for run, (world, workers, method, kill_at) in enumerate(plan):
        code, output = _torchrun(store, out, world, workers, method, run, every=1, kill_at=kill_at)
        assert (code != 0) == bool(kill_at), output[-3000:]
        kept = json.loads((out / "checkpoint.json").read_text())["step"] if kill_at else None
        resumed += _global_stream(out, run, world, until=kept)
    n = min(len(full), len(resumed))
    assert n > 1800 and resumed[:n] == full[:n], (first, second)
    assert abs(len(full) - len(resumed)) < OPTIONS["batch_size"] * 3


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_mixture_of_three_built_datasets_holds_its_shares_on_two_ranks_with_two_workers(built, tmp_path, method):
    code, output = _torchrun(built, tmp_path, 2, 2, method, run=0, sizes={})
    assert code == 0, output[-3000:]
    stream = _global_stream(tmp_path, 0, 2)
    assert len(stream) == EPOCHS * 16_000 // OPTIONS["seq_len"]
    _assert_every_64_global_batches_hold_the_shares(stream, list(BUILT_WEIGHTS.values()))
    passes = {}
    for index, name in enumerate(BUILT):
        mine = [(digest,) for c, digest in stream if c == index]
        own, per_epoch = own_stream(built / name, len(mine), digests_of, **NUMPY_OPTIONS)
        assert mine == own, name  # its own (seed, epoch) order: nothing twice within one of its epochs
        passes[name] = len(mine) / per_epoch
    assert passes["math"] >= 10  # math (6 lemmas, 100x smaller) repeats its own epoch as its weight asks
