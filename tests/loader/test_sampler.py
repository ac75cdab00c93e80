"""Sampling: exactly once over ranks and workers, deterministic per (seed, epoch), resumable in a new process."""

import json
import subprocess
import sys

import numpy as np
import pytest

import shard_loader
from shard_loader.dataset import TokenDataset
from shard_loader.world import Consumer
from tests.support.synthetic import write_dataset


@pytest.fixture(scope="module")
def unique_dataset(tmp_path_factory):
    """Six shards whose token ids (but EOD) are all distinct, so a sample's first two tokens name it."""
    root = tmp_path_factory.mktemp("ds")
    rng = np.random.default_rng(7)
    ids = iter(range(1, 10**6))
    shards = [
        [np.array([next(ids) for _ in range(rng.integers(50, 400))]) for _ in range(rng.integers(5, 15))]
        for _ in range(6)
    ]
    write_dataset(root, {"train": shards}, vocab_size=1 << 20)
    return root


def _stream(root, **kw):
    ds = TokenDataset(str(root), seq_len=32, batch_size=4, **kw)
    return [b["input_ids"][:, :2].tolist() for b in ds]


def test_every_sample_once_per_epoch_over_two_ranks_and_three_workers(unique_dataset):
    seen = []
    for rank in range(2):
        for worker in range(3):
            ds = TokenDataset(
                str(unique_dataset), seq_len=32, batch_size=4, seed=3, rank=rank, world_size=2, window_shards=2
            )
            for _, shards, ids, starts in ds.serve(ds.plan(), Consumer(worker, 3)):
                seen += [
                    tuple(shards[i].tokens[s : s + 2].tolist()) for i, s in zip(ids, starts)
                ]  # EOD (0) repeats; two tokens do not
    assert len(seen) == len(set(seen))
    ds = TokenDataset(str(unique_dataset), seq_len=32, batch_size=4, seed=3, rank=0, world_size=2, window_shards=2)
    plan = ds.plan()
    available = sum(plan.window_samples(w) for w in ds.windows)
    assert len(seen) == 2 * 4 * plan.total_batches
    assert 0 <= available - len(seen) < len(ds.windows) * 4 * 2  # only each window's remainder is dropped


def test_same_seed_and_epoch_give_the_same_stream_other_epochs_differ(unique_dataset):
    a = _stream(unique_dataset, seed=1)
    assert a == _stream(unique_dataset, seed=1)
    ds = TokenDataset(str(unique_dataset), seq_len=32, batch_size=4, seed=1)
    ds.set_epoch(1)
    b = [x["input_ids"][:, :2].tolist() for x in ds]
    sa, sb = {tuple(x) for x in sum(a, [])}, {tuple(x) for x in sum(b, [])}
    assert len(a) == len(b) and a != b
    assert len(sa ^ sb) <= 2 * len(ds.windows) * 4  # only the dropped remainders differ


def test_label_shift_stride_and_position_ids(tmp_path):
    docs = [np.arange(1, 41), np.arange(101, 161)]
    write_dataset(tmp_path, {"train": [docs]}, vocab_size=1000)
    tokens = np.concatenate([docs[0], [0], docs[1], [0]])
    ds = TokenDataset(str(tmp_path), seq_len=8, batch_size=1, label_shift=2, stride=4, position_ids=True)
    rows = list(ds)
    assert len(rows) == (len(tokens) - 10) // 4 + 1
    for b in rows:
        start = int(np.flatnonzero(tokens == b["input_ids"][0, 0])[0])
        assert start % 4 == 0
        np.testing.assert_array_equal(b["labels"][0], tokens[start + 2 : start + 10])
        doc_start = 0 if start < 41 else 41
        expected = np.arange(start, start + 8) - np.where(np.arange(start, start + 8) < 41, 0, 41)
        assert doc_start in (0, 41)
        np.testing.assert_array_equal(b["position_ids"][0], expected)


RESUME = """
import json, sys
from shard_loader import TokenDataset
root, state = sys.argv[1], json.loads(sys.argv[2])
ds = TokenDataset(root, seq_len=32, batch_size=4, seed=5, window_shards=2, rank=1, world_size=2)
ds.load_state_dict(state)
print(json.dumps([b["input_ids"][:, :2].tolist() for b in ds]))
"""


def test_resume_in_a_new_process_continues_exactly(unique_dataset):
    full = _stream(unique_dataset, seed=5, window_shards=2, rank=1, world_size=2)
    ds = TokenDataset(str(unique_dataset), seq_len=32, batch_size=4, seed=5, window_shards=2, rank=1, world_size=2)
    it = iter(ds)
    k = len(full) // 2 + 1
    head = [next(it)["input_ids"][:, :2].tolist() for _ in range(k)]
    state = ds.state_dict()
    out = subprocess.run(
        [sys.executable, "-c", RESUME, str(unique_dataset), json.dumps(state)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert head + json.loads(out.stdout) == full


def test_state_from_another_seed_is_refused(unique_dataset):
    ds = TokenDataset(str(unique_dataset), seq_len=32, batch_size=4, seed=1)
    with pytest.raises(shard_loader.ShardLoaderError, match="seed 2"):
        ds.load_state_dict({**ds.state_dict(), "seed": 2})


def test_next_window_skips_the_rest_of_the_window_and_state_follows(unique_dataset):
    full = _stream(unique_dataset, seed=3, window_shards=2)
    ds = TokenDataset(str(unique_dataset), seq_len=32, batch_size=4, seed=3, window_shards=2)
    ends = np.cumsum(ds.plan().batches_per_window).tolist()
    firsts = [0] + ends[:-1]
    assert len(firsts) == 3 and len(full) > 3
    served, states = [], []
    for batch in ds:
        served.append(batch["input_ids"][:, :2].tolist())
        ds.next_window()
        states.append(ds.state_dict()["batches"])
    assert served == [full[i] for i in firsts]
    assert states == ends
