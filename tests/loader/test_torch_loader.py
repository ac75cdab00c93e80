"""The torch path: DataLoader workers, pinned memory, persistent workers, exactly once, resume with other worker
counts."""

from itertools import islice

import numpy as np
import pytest
import torch

from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.synthetic import write_dataset

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    rng = np.random.default_rng(3)
    ids = iter(range(1, 10**6))
    shards = [[np.array([next(ids) for _ in range(rng.integers(50, 300))]) for _ in range(10)] for _ in range(6)]
    write_dataset(root, {"train": shards}, vocab_size=1 << 20)
    return str(root)


def _keys(batch):
    return [tuple(r[:2]) for r in batch["input_ids"].tolist()]


def test_two_ranks_three_workers_serve_every_sample_once(dataset):
    seen, lengths = [], []
    for rank in range(2):
        ds = TorchTokenDataset(dataset, seq_len=32, batch_size=4, seed=9, rank=rank, world_size=2, window_shards=2)
        loader = TokenDataLoader(ds, num_workers=3, pin_memory=True, persistent_workers=True)
        batches = list(loader)
        assert all(b["input_ids"].dtype == torch.int64 and b["input_ids"].shape == (4, 32) for b in batches)
        assert all(torch.equal(b["input_ids"][:, 1:], b["labels"][:, :-1]) for b in batches)
        lengths.append(len(batches))
        assert len(batches) == len(ds)
        seen += [k for b in batches for k in _keys(b)]
    assert lengths[0] == lengths[1]
    assert len(seen) == len(set(seen))


def test_the_dataloader_stream_equals_the_numpy_stream(dataset):
    from shard_loader import TokenDataset

    expected = [b["input_ids"] for b in TokenDataset(dataset, seq_len=32, batch_size=4, seed=2, window_shards=2)]
    got = [
        b["input_ids"].numpy()
        for b in TokenDataLoader(
            TorchTokenDataset(dataset, seq_len=32, batch_size=4, seed=2, window_shards=2), num_workers=2
        )
    ]
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))


def test_resume_with_a_different_number_of_workers(dataset):
    opts = dict(seq_len=32, batch_size=4, seed=4, window_shards=2)
    full = [_keys(b) for b in TokenDataLoader(TorchTokenDataset(dataset, **opts), num_workers=3)]
    ds = TorchTokenDataset(dataset, **opts)
    loader = TokenDataLoader(ds, num_workers=3, persistent_workers=True)
    head = [_keys(b) for b in islice(loader, 7)]
    state = loader.state_dict()
    assert state["batches"] == 7
    resumed = TokenDataLoader(TorchTokenDataset(dataset, **opts), num_workers=1)
    resumed.load_state_dict(state)
    assert head + [_keys(b) for b in resumed] == full


def test_set_epoch_reaches_persistent_workers(dataset):
    ds = TorchTokenDataset(dataset, seq_len=32, batch_size=4, seed=4)
    loader = TokenDataLoader(ds, num_workers=2, persistent_workers=True)
    first = [_keys(b) for b in loader]
    ds.set_epoch(1)
    second = [_keys(b) for b in loader]
    assert first != second and len(first) == len(second)


def test_batches_the_trainer_keeps_are_never_overwritten_by_workers(dataset):
    """Workers hand over groups in reused shared slots: a batch still held (here, every batch) must keep its tokens."""
    from shard_loader import TokenDataset

    opts = dict(seq_len=32, batch_size=4, seed=5, window_shards=2)
    expected = [b["input_ids"] for b in TokenDataset(dataset, **opts)]
    ds = TorchTokenDataset(dataset, batches_per_transfer=1, **opts)
    loader = TokenDataLoader(ds, num_workers=2, prefetch_factor=1, persistent_workers=True)
    kept = []
    for batch in loader:
        kept.append(batch["input_ids"])
        if len(kept) == 5:
            break
    kept += [b["input_ids"] for b in loader]  # again, on the same workers, from the position reached
    assert len(kept) == len(expected) and all(np.array_equal(a.numpy(), b) for a, b in zip(kept, expected))
