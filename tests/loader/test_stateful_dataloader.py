"""torchdata's StatefulDataLoader around TorchTokenDataset: batches as a user expects them, a state_dict() taken at
seeded random points restores exactly the uninterrupted stream at the same worker count, and restores exactly at any
worker count or world size when loaded into the dataset; what its protocol cannot honour is refused, never bent."""

import random

import numpy as np
import pytest
import torch

from torchdata.stateful_dataloader import StatefulDataLoader

from shard_loader import StateError, TokenDataset
from shard_loader.torch_dataset import TorchTokenDataset
from tests.support.positional import samples_of, take, write_positional

pytestmark = pytest.mark.integration

SIZES = [int(n) for n in np.random.default_rng(21).integers(200, 1200, size=12)]
OPTS = dict(seq_len=16, batch_size=2, seed=6, window_shards=3)
WORKERS = [0, pytest.param(1, marks=pytest.mark.system), pytest.param(2, marks=pytest.mark.system)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("positional")
    write_positional(root, SIZES)
    return str(root)


def _stream(root, rank=1, world=2, epoch=0):
    ds = TokenDataset(root, rank=rank, world_size=world, **OPTS)
    ds.set_epoch(epoch)
    return [samples_of(b, SIZES) for b in ds]


@pytest.fixture(scope="module")
def full(root):
    """The uninterrupted stream of rank 1 of 2 in epoch 0, from the numpy path."""
    return _stream(root)


def _dataset(root, rank=1, world=2):
    return TorchTokenDataset(root, rank=rank, world_size=world, **OPTS)


def _loader(ds, workers, **kw):
    return StatefulDataLoader(ds, batch_size=None, num_workers=workers, **kw)


def _points(full, seed, k):
    """k seeded save points in (0, len(full)]: never the wall clock."""
    return sorted(random.Random(seed).sample(range(1, len(full) + 1), k))


def test_a_plain_loader_yields_whole_int64_batches(root, full):
    batches = list(_loader(_dataset(root), 0))
    assert all(set(b) == {"input_ids", "labels", "component"} for b in batches)  # component: 0 for a plain dataset
    assert all(b["component"].dtype == torch.int64 and not b["component"].any() for b in batches)
    assert all(b["input_ids"].dtype == torch.int64 and b["input_ids"].shape == (2, 16) for b in batches)
    assert [samples_of(b, SIZES) for b in batches] == full


@pytest.mark.parametrize("workers", WORKERS)
def test_save_and_restore_at_seeded_points_equals_the_uninterrupted_stream(root, full, workers):
    for stop in _points(full, seed=workers, k=3):
        loader = _loader(_dataset(root), workers)
        head = take(loader, stop, SIZES)
        state = loader.state_dict()
        resumed = _loader(_dataset(root), workers)
        resumed.load_state_dict(state)
        assert head + [samples_of(b, SIZES) for b in resumed] == full, f"saved after {stop} batches"


def _version_2(value):
    """`value` with every dataset state in it as the release before the state envelope wrote it (version 2, no kind)."""
    if isinstance(value, dict) and value.get("kind") == "shard-dataset":
        return {**{k: v for k, v in value.items() if k != "kind"}, "version": 2}
    return {k: _version_2(v) for k, v in value.items()} if isinstance(value, dict) else value


@pytest.mark.parametrize("workers", WORKERS)
def test_a_loader_state_saved_before_the_state_envelope_restores_exactly(root, full, workers):
    """Each worker's anchor (or, with 0 workers, the dataset's own state) in version 2's format, as checkpoints hold
    them: restored through the loader and through the dataset, the stream goes on as from today's state."""
    loader = _loader(_dataset(root), workers)
    head = take(loader, 9, SIZES)
    state = loader.state_dict()
    old = _version_2(state)
    assert old != state
    resumed = _loader(_dataset(root), workers)
    resumed.load_state_dict(old)
    assert head + [samples_of(b, SIZES) for b in resumed] == full
    ds = _dataset(root)
    ds.load_state_dict(old)
    assert head + [samples_of(b, SIZES) for b in _loader(ds, workers)] == full


@pytest.mark.system
@pytest.mark.parametrize("method,workers", [("fork", 2), ("spawn", 1)])  # a spawned worker imports torch: seconds each
def test_every_start_method_restores_exactly(root, full, method, workers):
    loader = _loader(_dataset(root), workers, multiprocessing_context=method)
    head = take(loader, 47, SIZES)
    resumed = _loader(_dataset(root), workers, multiprocessing_context=method)
    resumed.load_state_dict(loader.state_dict())
    assert head + [samples_of(b, SIZES) for b in resumed] == full


@pytest.mark.system
def test_a_snapshot_every_n_steps_restores_exactly_between_snapshots(root, full):
    loader = _loader(_dataset(root), 2, snapshot_every_n_steps=5)
    head = take(loader, 23, SIZES)  # 3 steps after the last snapshot: the loader replays them on restore
    state = loader.state_dict()
    resumed = _loader(_dataset(root), 2, snapshot_every_n_steps=5)
    resumed.load_state_dict(state)
    assert head + [samples_of(b, SIZES) for b in resumed] == full
    ds = _dataset(root)
    ds.load_state_dict(state)  # the dataset counts the steps since the snapshot instead
    assert head + [samples_of(b, SIZES) for b in _loader(ds, 1)] == full


@pytest.mark.system
@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_another_worker_count_is_refused_by_the_loader_and_exact_through_the_dataset(root, full, before, after):
    loader = _loader(_dataset(root), before)
    head = take(loader, 31, SIZES)
    state = loader.state_dict()
    refused = _loader(_dataset(root), after)
    refused.load_state_dict(state)
    with pytest.raises(
        StateError, match=rf"saved with num_workers={before}.*has num_workers={after}.*dataset.load_state_dict"
    ):
        next(iter(refused))
    ds = _dataset(root)
    ds.load_state_dict(state)  # the whole StatefulDataLoader state: the dataset finds the exact position in it
    assert head + [samples_of(b, SIZES) for b in _loader(ds, after)] == full


@pytest.mark.parametrize("workers", WORKERS)
def test_a_loader_state_restores_at_another_world_size_through_the_dataset(root, workers):
    """Saved by both ranks of 2 at the same step, restored into 3 ranks: every sample of the epoch once."""
    served, state = [], None
    for rank in range(2):
        loader = _loader(_dataset(root, rank, 2), workers)
        served += [s for b in take(loader, 29, SIZES) for s in b]
        state = loader.state_dict() if rank == 0 else state
    for rank in range(3):
        ds = _dataset(root, rank, 3)
        ds.load_state_dict(state)
        served += [s for b in _loader(ds, workers) for s in samples_of(b, SIZES)]
    ds = TokenDataset(root, **OPTS)
    total = sum(ds.plan().window_samples(w) for w in ds.windows)
    assert len(served) == len(set(served))  # nothing twice
    assert 0 <= total - len(served) < len(ds.windows) * OPTS["batch_size"] * 3  # only the windows' remainders lost


@pytest.mark.system
def test_the_same_worker_count_at_another_world_size_is_refused_by_the_loader(root):
    loader = _loader(_dataset(root, 0, 2), 2)
    take(loader, 9, SIZES)
    refused = _loader(_dataset(root, 0, 3), 2)
    refused.load_state_dict(loader.state_dict())
    with pytest.raises(StateError, match=r"world_size=2.*world_size=3.*dataset.load_state_dict"):
        next(iter(refused))


def test_zero_workers_restores_at_another_world_size_through_the_loader(root):
    loader = _loader(_dataset(root, 0, 2), 0)
    take(loader, 12, SIZES)
    state = loader.state_dict()
    resumed = _loader(_dataset(root, 0, 1), 0)
    resumed.load_state_dict(state)
    expected = TokenDataset(root, rank=0, world_size=1, **OPTS)
    expected.load_state_dict(state["dataset_state"])  # with 0 workers the loader keeps the dataset's own state
    assert [samples_of(b, SIZES) for b in resumed] == [samples_of(b, SIZES) for b in expected]


@pytest.mark.system
@pytest.mark.parametrize("before,after", [(0, 2), (2, 0)])
def test_between_zero_and_some_workers_the_loader_itself_refuses(root, before, after):
    loader = _loader(_dataset(root), before)
    take(loader, 5, SIZES)
    refused = _loader(_dataset(root), after)
    refused.load_state_dict(loader.state_dict())
    with pytest.raises(AssertionError, match="_snapshot" if after else "_num_yielded"):
        next(iter(refused))


@pytest.mark.parametrize("workers", WORKERS)
def test_epochs_follow_set_epoch_and_a_restored_epoch_continues(root, workers):
    loader = _loader(_dataset(root), workers, persistent_workers=bool(workers))
    ds = loader.dataset
    epochs = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        epochs.append([samples_of(b, SIZES) for b in loader])
    assert epochs == [_stream(root, epoch=0), _stream(root, epoch=1)]
    ds.set_epoch(2)
    head = take(loader, 7, SIZES)
    resumed = _loader(_dataset(root), workers, persistent_workers=bool(workers))
    resumed.load_state_dict(loader.state_dict())
    resumed.dataset.set_epoch(2)
    assert head + [samples_of(b, SIZES) for b in resumed] == _stream(root, epoch=2)


@pytest.mark.system
def test_a_plain_torch_dataloader_serves_the_rank_stream(root, full):
    """Its workers start their passes in any order (a worker may serve before another has begun): none is refused."""
    loader = torch.utils.data.DataLoader(_dataset(root), batch_size=None, num_workers=3)
    assert [samples_of(b, SIZES) for b in loader] == full


@pytest.mark.system
@pytest.mark.parametrize("persistent", [False, True])
def test_iterating_again_without_set_epoch_is_refused_with_workers(root, persistent):
    """Workers cannot know where the last loop stopped: a second pass over the same position would repeat batches."""
    loader = _loader(_dataset(root), 2, persistent_workers=persistent)
    take(loader, 3, SIZES)
    with pytest.raises(StateError, match="set_epoch"):
        next(iter(loader))


@pytest.mark.system
def test_the_dataset_state_is_refused_in_the_trainer_while_workers_serve_it(root):
    loader = _loader(_dataset(root), 2)
    take(loader, 3, SIZES)
    with pytest.raises(StateError, match=r"StatefulDataLoader's state_dict\(\)"):
        loader.dataset.state_dict()


@pytest.mark.parametrize("workers", WORKERS)
def test_loading_the_loader_inside_a_loop_applies_at_the_next_loop(root, full, workers):
    """torchdata's own rule: load_state_dict() replaces the loader's iterator; the next `for` serves the loaded
    stream."""
    loader = _loader(_dataset(root), workers)
    head, saved = [], None
    for n, batch in enumerate(loader):
        if saved is None:
            head.append(samples_of(batch, SIZES))
            saved = loader.state_dict() if len(head) == 12 else None
        if n == 16:
            loader.load_state_dict(saved)
            break
    assert head + [samples_of(b, SIZES) for b in loader] == full


def _refused_once_loaded(root, workers: int, saved_at: int, loaded_at: int, load) -> None:
    """A loop whose loader or dataset `load(loader, state)` loads at batch `loaded_at` (a state saved after `saved_at`
    batches) is refused, after at most the batches in flight (prefetch_factor 2 per worker)."""
    saver = _loader(_dataset(root), workers)
    take(saver, saved_at, SIZES)
    saved = saver.state_dict()
    loader = _loader(_dataset(root), workers)
    with pytest.raises(StateError, match="loop"):
        for n, _ in enumerate(loader):
            if n == loaded_at:
                load(loader, saved)
            assert n <= loaded_at + 2 * workers


@pytest.mark.parametrize("workers", WORKERS)
def test_a_loop_that_goes_on_after_its_loader_was_loaded_is_refused(root, workers):
    """load_state_dict() then state_dict() inside a loop: the old loop may not serve the old stream while the state
    says the loaded one; it is refused once the new iterator has started (with workers, after the batches in flight)."""

    def load(loader, saved):
        loader.load_state_dict(saved)
        loader.state_dict()  # starts the loaded iterator

    _refused_once_loaded(root, workers, 4, 2, load)


@pytest.mark.parametrize("workers", WORKERS)
def test_loading_the_dataset_inside_a_loader_loop_is_refused(root, workers):
    _refused_once_loaded(root, workers, 6, 3, lambda loader, saved: loader.dataset.load_state_dict(saved))
