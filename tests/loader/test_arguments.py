"""Every constructor argument is checked at construction, with an error that names it."""

import pickle

import numpy as np
import pytest

from shard_loader import ShardLoaderError, TokenDataset
from shard_loader.arguments import ArgumentError, size_in_bytes
from shard_loader.dataset import EmptyEpochError
from shard_loader.world import World, WorldError, resolve_world
from tests.support.positional import positional_dataset

SIZES = [300, 500, 400, 200]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return positional_dataset(tmp_path_factory, SIZES)


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(batch_size=0), "batch_size must be at least 1, got 0"),
        (dict(batch_size=2.5), "batch_size must be an integer"),
        (dict(seq_len=0), "seq_len must be at least 1"),
        (dict(seq_len="16"), "seq_len must be an integer"),
        (dict(label_shift=0), "label_shift must be at least 1"),
        (dict(stride=0), "stride must be at least 1"),
        (dict(seed=-1), "seed must be at least 0"),
        (dict(seed=True), "seed must be an integer"),
        (dict(disk_budget="lots"), "disk_budget must be a byte count or a size such as '200GB'"),
        (dict(disk_budget=0), "disk_budget must be at least 1"),
        (dict(window_bytes="12 parsecs"), "window_bytes must be a byte count"),
        (dict(window_shards=0), "window_shards must be at least 1"),
        (dict(keep_files="yes"), "keep_files must be True or False"),
        (dict(position_ids=1), "position_ids must be True or False"),
        (dict(cache_dir=3), "cache_dir must be a path"),
        (dict(store_options=[1]), "store_options must be a dict"),
        (dict(split=""), "split must be a non-empty string"),
        (dict(rank=0), "pass both rank and world_size or neither"),
        (dict(rank=2, world_size=2), r"rank 2 is not in \[0, world_size=2\)"),
        (dict(rank=0, world_size=0), "world_size must be at least 1"),
    ],
)
def test_a_bad_argument_is_refused_with_its_name(root, options, message):
    with pytest.raises(ArgumentError, match=message):
        TokenDataset(root, **{"seq_len": 16, "batch_size": 2, **options})


def test_a_sequence_longer_than_every_shard_is_an_error_not_an_empty_epoch(root):
    with pytest.raises(
        EmptyEpochError, match="needs 1001 tokens per sample, but the longest shard of split 'train' has 501"
    ):
        TokenDataset(root, seq_len=1000, batch_size=1)


def test_windows_too_small_for_one_global_batch_are_an_error_that_says_why(root):
    with pytest.raises(
        EmptyEpochError, match="largest window holds 31 samples, fewer than batch_size 16 x world_size 2"
    ):
        TokenDataset(root, seq_len=16, batch_size=16, rank=0, world_size=2)


def test_sizes_parse_with_units():
    assert size_in_bytes("disk_budget", "1.5GB") == 1_500_000_000
    assert size_in_bytes("disk_budget", "512 MiB") == 512 << 20
    assert size_in_bytes("disk_budget", 7) == 7


def test_errors_are_shard_loader_errors():
    assert issubclass(ArgumentError, ShardLoaderError) and issubclass(EmptyEpochError, ShardLoaderError)
    assert issubclass(WorldError, ShardLoaderError)


def test_the_world_comes_from_torchrun_environment_when_not_given(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert resolve_world() == World(2, 3)
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(WorldError, match="pass rank and world_size"):
        resolve_world()
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert resolve_world() == World(0, 1)


def test_a_pickled_dataset_keeps_its_world_and_manifest(root):
    ds = TokenDataset(root, seq_len=16, batch_size=2, rank=1, world_size=2)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.world == World(1, 2) and copy.opened.manifest == ds.opened.manifest
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(ds, copy))
