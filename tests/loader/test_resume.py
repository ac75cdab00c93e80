"""Stream position belongs to the rank's stream: any resume point, worker count, start method or
re-iteration of the same loader delivers exactly the uninterrupted stream, checked token by token."""

import numpy as np
import pytest
import torch

from shard_loader import TokenDataset
from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.positional import positional_dataset, samples_of, take

pytestmark = pytest.mark.integration

SIZES = [int(n) for n in np.random.default_rng(21).integers(200, 1200, size=12)]
OPTS = dict(seq_len=16, batch_size=2, seed=6, window_shards=3, rank=1, world_size=2)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return positional_dataset(tmp_path_factory, SIZES)


@pytest.fixture(scope="module")
def full(root):
    """The uninterrupted stream of rank 1 of 2, from the numpy path."""
    return [samples_of(b, SIZES) for b in TokenDataset(root, **OPTS)]


def _loader(root, workers, **kw):
    return TokenDataLoader(TorchTokenDataset(root, batches_per_transfer=2, **OPTS), num_workers=workers, **kw)


@pytest.mark.parametrize("before,after,stop", [(2, 2, 3), (2, 3, 5), (3, 2, 7), (4, 1, 9), (0, 2, 1), (3, 4, 26)])
def test_resume_at_any_batch_with_another_worker_count(root, full, before, after, stop):
    loader = _loader(root, before)
    head = take(loader, stop, SIZES)
    state = loader.state_dict()
    assert state["batches"] == stop
    resumed = _loader(root, after)
    resumed.load_state_dict(state)
    assert head + [samples_of(b, SIZES) for b in resumed] == full


@pytest.mark.parametrize("persistent", [True, False])
def test_breaking_out_and_iterating_the_same_loader_again_continues_the_stream(root, full, persistent):
    loader = _loader(root, 2, persistent_workers=persistent)
    got = []
    for n in (1, 3, 2, 5):  # breaks at 1, 4, 6, 11: never a multiple of workers x batches_per_transfer
        got += take(loader, n, SIZES)
    got += [samples_of(b, SIZES) for b in loader]
    assert got == full


def test_two_successive_resumes_with_the_readme_settings_shape(root, full):
    state, got = None, []
    for workers, n in ((4, 5), (2, 7), (3, 10**6)):
        loader = _loader(root, workers, persistent_workers=True)
        if state is not None:
            loader.load_state_dict(state)
        got += take(loader, n, SIZES)
        state = loader.state_dict()
    assert got == full


@pytest.mark.parametrize(
    "method",
    ["fork", pytest.param("spawn", marks=pytest.mark.system), pytest.param("forkserver", marks=pytest.mark.system)],
)
def test_every_start_method_serves_the_rank_stream_it_was_built_for(root, full, method):
    loader = _loader(root, 2, multiprocessing_context=method)
    assert [samples_of(b, SIZES) for b in loader] == full


class _ResolvesInWorker(torch.utils.data.IterableDataset):
    def __iter__(self):
        from shard_loader.world import WorldError, resolve_world

        try:
            yield str(resolve_world())
        except WorldError as e:
            yield str(e)


def test_the_world_cannot_be_guessed_inside_a_worker(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    (message,) = list(torch.utils.data.DataLoader(_ResolvesInWorker(), batch_size=None, num_workers=1))
    assert message.startswith("rank and world_size cannot be known inside a DataLoader worker")


def _numpy(root, workers):
    return TokenDataset(root, **OPTS)


@pytest.mark.parametrize(
    "make,workers", [(_numpy, 0), (_loader, 0), (_loader, 2), pytest.param(_loader, 3, marks=pytest.mark.system)]
)
def test_load_state_dict_inside_a_running_loop_applies_at_its_next_batch(root, full, make, workers):
    """A rollback inside the loop: the loop's next batch is the loaded state's, and state_dict() counts from there."""
    loader = make(root, workers)
    got, saved = [], None
    for batch in loader:
        got.append(samples_of(batch, SIZES))
        if len(got) == 5:
            saved = loader.state_dict()
        if len(got) == 12:
            loader.load_state_dict(saved)
            assert loader.state_dict() == saved
        if len(got) == 20:
            break
    assert got == full[:12] + full[5:13]
    state = loader.state_dict()
    assert state["batches"] == 13
    resumed = make(root, 1)
    resumed.load_state_dict(state)
    assert [samples_of(b, SIZES) for b in resumed] == full[13:]


@pytest.mark.parametrize("workers", [0, 2])
def test_set_epoch_inside_a_running_loop_applies_at_its_next_batch(root, workers):
    loader = _loader(root, workers)
    epoch1 = TokenDataset(root, **OPTS)
    epoch1.set_epoch(1)
    expected = [samples_of(b, SIZES) for b in epoch1]
    got = []
    for batch in loader:
        got.append(samples_of(batch, SIZES))
        if len(got) == 3:
            loader.dataset.set_epoch(1)
    assert got[3:] == expected and len(got) == 3 + len(expected)
