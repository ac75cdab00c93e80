"""accelerate's `prepare` at 2 processes (torchrun, gloo on CPU) over a TorchTokenDataset, its DataLoader batching the
dataset's rows (as transformers.Trainer does): with its defaults (process 0 dispatches), with dispatch_batches=False and
split_batches, through a user's own wrapper dataset, over a mixture, and through save_state/load_state with
use_stateful_dataloader=True killed and resumed, every rank receives exactly the batches the uninterrupted stream gives
it; batch_size=None (also through a wrapper), another batch size, TokenDataLoader and a StatefulDataLoader with workers
are refused at the first batch with a TrainerError naming what to use."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from shard_loader import TokenDataset
from tests.support.mixture_files import Part, digests_of, write_components, write_mixture
from tests.support.patience import HUNG
from tests.support.positional import positional_dataset
from tests.support.training import torchrun

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
SIZES = [int(n) for n in np.random.default_rng(1).integers(200, 800, size=9)]
OPTIONS = {"seq_len": 16, "batch_size": 2, "seed": 4, "window_shards": 2}
PARTS = [Part("web", (900,) * 6, 0.6, 0), Part("code", (700,) * 6, 0.3, 1), Part("math", (120,), 0.1, 2)]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return positional_dataset(tmp_path_factory, SIZES)


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    root = write_components(tmp_path_factory.mktemp("mixture"), PARTS)
    return write_mixture(root, "blend", PARTS, tokens_per_epoch=4_000)


def run(url: str, out: Path, **settings) -> subprocess.CompletedProcess:
    """tests/support/accelerate_reader.py at 2 processes under torchrun, logging into `out`."""
    out.mkdir(exist_ok=True)
    cmd = [*torchrun(2), str(ROOT / "tests/support/accelerate_reader.py"), url, str(out), json.dumps(settings)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=HUNG)


def reference(url: str, rank: int, options: dict, epochs: int = 1) -> list:
    """Each step's rows (component, digest) of the uninterrupted stream of `rank` of 2, from the numpy path."""
    ds = TokenDataset(url, rank=rank, world_size=2, **options)
    steps = []
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        steps += [json.loads(json.dumps(digests_of(batch))) for batch in ds]
    return steps


def received(out: Path, rank: int) -> list:
    """[step, rows] lines a rank logged, or its {"error": ...} line."""
    return [json.loads(line) for line in (out / f"rank{rank}.log").read_text().splitlines()]


def forget_peer_errors(out: Path) -> None:
    """Take out the error line rank 1 may log when rank 0 SIGKILLs itself mid-collective (gloo's connection closed by
    its peer, or not, as the timing falls): rank 0, killed, logs none, and the resumed run must log none either."""
    assert all(isinstance(entry, list) for entry in received(out, 0)), received(out, 0)[-1]
    log = out / "rank1.log"
    kept = [line for line in log.read_text().splitlines() if isinstance(json.loads(line), list)]
    log.write_text("".join(line + "\n" for line in kept))


def check_exact(url: str, out: Path, options: dict, epochs: int = 1, replayed: bool = False) -> None:
    """Every step of every rank holds the uninterrupted stream's rows for that step, every step was received, and steps
    after the last save were received again (identical) only when the run was killed."""
    for rank in range(2):
        ref, got = reference(url, rank, options, epochs), received(out, rank)
        assert all(isinstance(entry, list) for entry in got), got[-1]
        assert {step for step, _ in got} == set(range(1, len(ref) + 1))
        assert all(rows == ref[step - 1] for step, rows in got)
        assert (len(got) > len(ref)) == replayed


def killed_twice_then_exact(target: str, out: Path, settings: dict, options: dict) -> None:
    """Killed at step 13 (epoch 0) and 7 steps into epoch 1, then run to the end: every step is received as the
    uninterrupted stream has it (the steps after each last save again, identical)."""
    epoch = len(reference(target, 0, options))
    for kill_at in (13, epoch + 7):
        killed = run(target, out, **settings, kill_at=kill_at)
        assert killed.returncode != 0
        forget_peer_errors(out)
    final = run(target, out, **settings)
    assert final.returncode == 0, final.stderr[-3000:]
    check_exact(target, out, options, epochs=2, replayed=True)


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"batch_size": 2}, id="defaults"),  # dispatch_batches=True: process 0 reads for both
        pytest.param({"batch_size": 2, "workers": 2}, id="defaults-2-workers"),
        pytest.param({"batch_size": 2, "wrap": True}, id="user-wrapper"),  # the wrapper hides the dataset from prepare
        pytest.param({"batch_size": 2, "wrap": True, "workers": 2}, id="user-wrapper-2-workers"),
        pytest.param({"batch_size": 2, "accelerate": {"dispatch_batches": False}}, id="dispatch_batches-False"),
        pytest.param(
            {"batch_size": 2, "wrap": True, "workers": 2, "accelerate": {"dispatch_batches": False}},
            id="dispatch_batches-False-user-wrapper-2-workers",
        ),
        pytest.param({"batch_size": 4, "accelerate": {"split_batches": True}}, id="split_batches"),
    ],
)
def test_prepare_serves_every_rank_its_own_stream(url, tmp_path, settings):
    done = run(url, tmp_path, options=OPTIONS, **settings)
    assert done.returncode == 0, done.stderr[-3000:]
    check_exact(url, tmp_path, OPTIONS)


def test_a_mixture_through_prepare_is_exact(mixture, tmp_path):
    options = {"seq_len": 16, "batch_size": 2, "seed": 4}
    done = run(mixture, tmp_path, options=options, workers=2, batch_size=2)
    assert done.returncode == 0, done.stderr[-3000:]
    check_exact(mixture, tmp_path, options)


@pytest.mark.parametrize("source", ["dataset", "mixture"])
def test_save_state_and_load_state_resume_exactly_after_sigkill(url, mixture, tmp_path, source):
    """Saved every 5 steps, killed at step 13 (epoch 0) and 48 (epoch 1), resumed: steps 11-13 and 46-48 are received
    again, identical, and nothing is lost or received twice otherwise."""
    target = url if source == "dataset" else mixture
    options = OPTIONS if source == "dataset" else {"seq_len": 16, "batch_size": 2, "seed": 4}
    settings = {"options": options, "accelerate": {"use_stateful_dataloader": True}, "every": 5, "epochs": 2}
    settings["batch_size"] = 2
    killed_twice_then_exact(target, tmp_path, settings, options)


@pytest.mark.parametrize("workers", [0, 2])
def test_accelerates_own_resume_recipe_with_set_epoch_is_exact(url, tmp_path, workers):
    """load_state, then skip_first_batches over the steps done in the epoch (no use_stateful_dataloader): killed at
    step 13 (epoch 0) and in epoch 1, resumed, every step is received as the uninterrupted stream has it."""
    settings = {"options": OPTIONS, "batch_size": 2, "workers": workers, "every": 5, "epochs": 2, "skip": True}
    killed_twice_then_exact(url, tmp_path, settings, OPTIONS)


@pytest.mark.parametrize("workers", [0, 2])
def test_accelerates_own_resume_recipe_without_set_epoch_is_refused(url, tmp_path, workers):
    """Resumed in epoch 1, accelerate's loader would tell the dataset epoch 0 (its own count of loops starts again):
    nothing tells the dataset which epoch it resumes, so skip_first_batches is refused at the first batch."""
    settings = {"options": OPTIONS, "batch_size": 2, "workers": workers, "every": 5, "epochs": 2, "skip": True}
    settings["set_epoch"] = False
    killed = run(url, tmp_path, **settings, kill_at=len(reference(url, 0, OPTIONS)) + 7)
    assert killed.returncode != 0
    forget_peer_errors(tmp_path)
    steps = [received(tmp_path, rank) for rank in range(2)]
    resumed = run(url, tmp_path, **settings)
    assert resumed.returncode != 0
    for rank in range(2):
        entries = received(tmp_path, rank)
        assert entries[: len(steps[rank])] == steps[rank]
        assert [entry["error"] for entry in entries[len(steps[rank]) :]] == [
            "TrainerError: accelerate's skip_first_batches drops the first batches of a pass, but nothing told the "
            "dataset which epoch this resumed run is in: call loader.set_epoch(epoch) before each loop (see 'With "
            "your trainer' in docs/loader.md)"
        ]


@pytest.mark.parametrize(
    "settings, refusal",
    [
        pytest.param({"loader": "token"}, "prepare DataLoader(dataset, batch_size=2)", id="TokenDataLoader"),
        pytest.param(
            {"batch_size": 2, "workers": 2, "accelerate": {"use_stateful_dataloader": True}},
            "prepare the DataLoader with num_workers=0",
            id="stateful-with-workers",
        ),
        pytest.param({}, "give the DataLoader batch_size=2", id="batch_size-None"),
        pytest.param({"wrap": True, "workers": 2}, "give the DataLoader batch_size=2", id="batch_size-None-wrapper"),
        pytest.param({"batch_size": 3}, "give the DataLoader batch_size=2", id="another-batch-size"),
        pytest.param(
            {"batch_size": 2, "accelerate": {"split_batches": True}},
            "batch_size=2 with split_batches=True, which splits each of its batches across the 2 processes: give the "
            "DataLoader batch_size=4",
            id="split_batches-another-batch-size",
        ),
        pytest.param(
            {"batch_size": 2, "accelerate": {"split_batches": True, "dispatch_batches": False}},
            "batch_size=2 with split_batches=True, which splits each of its batches across the 2 processes: give the "
            "DataLoader batch_size=4",
            id="split_batches-dispatch_batches-False-another-batch-size",
        ),
        pytest.param({"batch_size": 2, "cpu": False}, "accelerate runs 1 process(es)", id="accelerate-not-distributed"),
    ],
)
def test_what_cannot_be_exact_is_refused_at_the_first_batch(url, tmp_path, settings, refusal):
    done = run(url, tmp_path, options=OPTIONS, **settings)
    assert done.returncode != 0
    entries = received(tmp_path, 0)  # both processes log here when accelerate makes each process 0
    assert entries and all(isinstance(entry, dict) for entry in entries), entries  # nothing read before it
    errors = [entry["error"] for entry in entries]
    assert all(error.startswith("TrainerError") and refusal in error for error in errors), errors


def test_split_batches_without_a_batch_size_is_refused_by_accelerate_at_prepare(url, tmp_path):
    done = run(url, tmp_path, options=OPTIONS, accelerate={"split_batches": True})
    assert done.returncode != 0
    error = received(tmp_path, 0)[0]["error"]
    assert error.startswith("ValueError") and "split_batches" in error
