"""The saved state: what must match is checked and named, a world-size change deals the rest of the
interrupted window to the new ranks (nothing lost or repeated), and set_epoch keeps a restored position."""

from collections import Counter

import numpy as np
import pytest

from shard_loader import ShardLoaderError, TokenDataset
from shard_loader.state import StateError
from tests.support.positional import positional_dataset, samples_of, write_positional

SIZES = [int(n) for n in np.random.default_rng(5).integers(150, 900, size=10)]
OPTS = dict(seq_len=16, batch_size=3, seed=2, window_shards=3)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return positional_dataset(tmp_path_factory, SIZES)


def _rank_stream(root, rank, world, state=None, stop=None):
    ds = TokenDataset(root, rank=rank, world_size=world, **OPTS)
    if state is not None:
        ds.load_state_dict(state)
    out = []
    for batch in ds:
        out.append(samples_of(batch, SIZES))
        if len(out) == stop:
            break
    return out, ds.state_dict()


@pytest.mark.parametrize("before,after,stop", [(2, 3, 7), (3, 2, 5), (2, 1, 11), (1, 3, 2), (3, 2, 0), (2, 3, 10**6)])
def test_a_world_size_change_loses_and_repeats_nothing(root, before, after, stop):
    served, states = Counter(), []
    for rank in range(before):
        head, state = _rank_stream(root, rank, before, stop=stop)
        served.update(s for batch in head for s in batch)
        states.append(state)
    assert all(s == states[0] for s in states)  # every rank saves the same global position
    for rank in range(after):
        tail, _ = _rank_stream(root, rank, after, state=states[0])
        served.update(s for batch in tail for s in batch)
    assert max(served.values()) == 1
    ds = TokenDataset(root, **OPTS)
    total = sum(ds.plan().window_samples(w) for w in ds.windows)
    # each window drops less than one global batch of the world size that served its end
    assert 0 <= total - len(served) < len(ds.windows) * OPTS["batch_size"] * max(before, after)


def test_same_world_size_resume_is_the_same_stream_in_order(root):
    full, _ = _rank_stream(root, 1, 3)
    head, state = _rank_stream(root, 1, 3, stop=4)
    tail, _ = _rank_stream(root, 1, 3, state=state)
    assert head + tail == full


def test_set_epoch_keeps_a_position_just_restored_for_that_epoch(root):
    ds = TokenDataset(root, **OPTS)
    ds.set_epoch(3)
    full = [samples_of(b, SIZES) for b in ds]
    ds.set_epoch(3)
    assert list(ds) == []  # epoch 3 is finished; set_epoch(3) does not rewind it
    restored = TokenDataset(root, **OPTS)
    first = TokenDataset(root, **OPTS)
    first.set_epoch(3)
    head = [samples_of(b, SIZES) for _, b in zip(range(5), first)]
    restored.load_state_dict(first.state_dict())
    restored.set_epoch(3)
    assert head + [samples_of(b, SIZES) for b in restored] == full
    restored.set_epoch(4)
    assert restored.state_dict()["batches"] == 0 and restored.state_dict()["epoch"] == 4


@pytest.mark.parametrize(
    "field,change",
    [
        ("seq_len", dict(seq_len=8)),
        ("batch_size", dict(batch_size=2)),
        ("stride", dict(stride=4)),
        ("label_shift", dict(label_shift=2)),
        ("seed", dict(seed=9)),
        ("other windows", dict(window_shards=2)),
    ],
)
def test_a_state_for_another_stream_is_refused_naming_the_field(root, field, change):
    state = TokenDataset(root, **OPTS).state_dict()
    other = TokenDataset(root, **{**OPTS, **change})
    with pytest.raises(StateError, match=f"saved with {field} "):
        other.load_state_dict(state)


def test_a_state_from_another_dataset_version_or_split_is_refused(root, tmp_path):
    state = TokenDataset(root, **OPTS).state_dict()
    write_positional(tmp_path, SIZES, version="v2")
    with pytest.raises(StateError, match="saved with dataset_version 'v1', this dataset has dataset_version 'v2'"):
        TokenDataset(str(tmp_path), **OPTS).load_state_dict(state)
    with pytest.raises(StateError, match="saved with split 'val'"):
        TokenDataset(root, **OPTS).load_state_dict({**state, "split": "val"})


@pytest.mark.parametrize(
    "state,message",
    [
        ({}, "state_dict: missing field 'version'"),
        ({"version": 2}, "state_dict: missing field 'dataset'"),
        ({"version": 3}, "state_dict was saved by kind None, not a dataset"),
        ({"version": 1, "kind": "shard-dataset"}, "state_dict version 1 is not 3 or 2: it was saved by another"),
        ("x", "must be a dict"),
    ],
)
def test_a_malformed_state_is_refused(root, state, message):
    with pytest.raises(StateError, match=message):
        TokenDataset(root, **OPTS).load_state_dict(state)


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(epoch="1"), r"^state_dict\.epoch: expected int, got '1'$"),
        (dict(seq_len=16.0), r"^state_dict\.seq_len: expected int, got 16\.0$"),
        (dict(batches=True), r"^state_dict\.batches: expected int, got True$"),
        (dict(window_bytes="1MB"), r"^state_dict\.window_bytes: expected int, got '1MB'$"),
    ],
)
def test_a_state_field_of_the_wrong_type_is_refused_naming_it(root, change, message):
    """Every field goes through the one codec: a hand-edited value is one line naming the field, not a failure later."""
    state = TokenDataset(root, **OPTS).state_dict()
    with pytest.raises(StateError, match=message):
        TokenDataset(root, **OPTS).load_state_dict({**state, **change})


def test_a_state_holding_numpy_integers_restores_the_same_stream(root):
    """A state built or edited with numpy's integers (never JSON) restores as the plain one does."""
    head, state = _rank_stream(root, 0, 1, stop=3)
    as_numpy = {k: np.int64(v) if type(v) is int else v for k, v in state.items()}
    assert _rank_stream(root, 0, 1, state=as_numpy) == _rank_stream(root, 0, 1, state=state)


@pytest.mark.parametrize("change", [dict(window=-1), dict(window=99), dict(sample=10**6), dict(batches=-3)])
def test_a_position_outside_the_epoch_is_refused(root, change):
    state = TokenDataset(root, **OPTS).state_dict()
    with pytest.raises(StateError, match="is outside the epoch"):
        TokenDataset(root, **OPTS).load_state_dict({**state, **change})


def test_state_errors_are_shard_loader_errors():
    assert issubclass(StateError, ShardLoaderError)


def test_a_state_saved_under_another_disk_budget_names_the_window_options_that_make_its_windows(root):
    opts = {k: v for k, v in OPTS.items() if k != "window_shards"}
    saved_ds = TokenDataset(root, disk_budget=12_000, **opts)  # windows of up to 6,000 bytes: half the budget
    batches = iter(saved_ds)
    head = [samples_of(next(batches), SIZES) for _ in range(4)]
    state = saved_ds.state_dict()
    with pytest.raises(StateError) as refused:
        TokenDataset(root, disk_budget=8_000, **opts).load_state_dict(state)
    assert str(refused.value) == (
        "state_dict was saved with other windows (window_shards=None, window_bytes=6_000 (from disk_budget=12_000)); "
        "this dataset makes windows with window_shards=None, window_bytes=4_000 (from disk_budget=8_000): "
        "pass window_bytes=6000 to make the saved windows again "
        "(without window_bytes, windows are half the disk_budget)"
    )
    kept = TokenDataset(root, disk_budget=8_000, window_bytes=6000, **opts)  # as the message says
    kept.load_state_dict(state)
    full = [samples_of(b, SIZES) for b in TokenDataset(root, disk_budget=12_000, **opts)]
    assert head + [samples_of(b, SIZES) for b in kept] == full


def test_a_state_saved_before_window_options_were_recorded_still_restores(root):
    state = TokenDataset(root, **OPTS).state_dict()
    for name in ("window_shards", "window_bytes", "disk_budget"):
        del state[name]
    TokenDataset(root, **OPTS).load_state_dict(state)
    with pytest.raises(
        StateError, match="saved with other windows .a state saved before its window options were recorded."
    ):
        TokenDataset(root, **{**OPTS, "window_shards": 2}).load_state_dict(state)
