"""What a TorchTokenDataset learns of the trainer reading it, in one process: Lightning's mid-epoch restart warning is
an error once per process (not a filter per dataset, moved ahead of the user's own); a dataset that learns its world
late (Lightning's own launcher) goes on in the version it opened, though the live dataset or mixture moved on, and
serves what its rank serves in a world of that size from the start (a state loaded before is carried whole); len()
counts a plain DataLoader's batches in a process where accelerate is initialized, once a pass showed such a loader
reading the dataset, and accelerate's loader reading it after that answer is refused."""

import warnings

import numpy as np
import pytest
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from torch.utils.data import DataLoader

from shard_loader import TokenDataset
from shard_loader.torch_dataset import TorchTokenDataset
from shard_loader.trainers import TrainerError
from tests.loader.test_world import LAUNCHERS
from tests.support.mixture_files import Part, write_components, write_mixture
from tests.support.positional import positional_dataset, write_positional
from tests.support.synthetic import write_dataset

SIZES = [3_000, 2_000, 2_500, 1_800]
OPTIONS = {"seq_len": 64, "batch_size": 2, "seed": 3}
RESTART = "You're resuming from a checkpoint that ended before the epoch ended"  # Lightning's warning


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return positional_dataset(tmp_path_factory, SIZES)


def test_lightnings_restart_warning_is_an_error_once_per_process(url):
    with warnings.catch_warnings():
        TorchTokenDataset(url, **OPTIONS).data.close()
        with pytest.raises(UserWarning, match="resuming from a checkpoint"):
            warnings.warn(f"{RESTART} and your dataloader is not resumable.", UserWarning)
        warnings.filterwarnings("ignore", message="You're resuming")  # the user's own choice, after the first dataset
        for _ in range(3):
            TorchTokenDataset(url, **OPTIONS).data.close()
        warnings.warn(f"{RESTART} and your dataloader is not resumable.", UserWarning)
        assert sum(f[1] is not None and RESTART in f[1].pattern for f in warnings.filters) == 1


@pytest.mark.parametrize("source", ["dataset", "mixture"])
def test_a_dataset_taking_its_world_late_goes_on_in_the_version_it_opened(tmp_path, monkeypatch, source):
    for name in LAUNCHERS:
        monkeypatch.delenv(name, raising=False)
    if source == "dataset":
        write_positional(tmp_path, SIZES, version="v1")
        url = str(tmp_path)
    else:
        parts = [Part("web", (3_000, 2_000), 0.7, 0), Part("code", (2_500, 1_800), 0.3, 1)]
        url = write_mixture(write_components(tmp_path, parts), "blend", parts, tokens_per_epoch=6_000)
    ds = TorchTokenDataset(url, **OPTIONS)  # rank 0 of 1: nothing says more yet
    opened = ds.data.version_url
    if source == "dataset":  # the live manifest moves on to another version
        write_dataset(tmp_path, {"train": [[np.arange(1, 4_000)]]}, vocab_size=1 << 23, version="v2", tag="v2")
    else:
        write_mixture(tmp_path, "blend", parts, tokens_per_epoch=9_000)
    monkeypatch.setenv("RANK", "0")  # the process group Lightning's launcher starts, process 0 its rank 0
    monkeypatch.setenv("WORLD_SIZE", "2")
    late = [batch["input_ids"].numpy() for batch in ds]
    assert (ds.rank, ds.world_size, ds.data.version_url) == (0, 2, opened)
    with TokenDataset(opened, rank=1, world_size=2, **OPTIONS) as other:  # rank 1, started at world size 2
        served = [late, [batch["input_ids"] for batch in other]]
    expected = []
    for rank in (0, 1):  # the ranks of a world of 2 from the start (a mixture's blocks are of that world size)
        with TokenDataset(opened, rank=rank, world_size=2, **OPTIONS) as reference:
            expected.append([batch["input_ids"] for batch in reference])
    for got, want in zip(served, expected):
        assert len(got) == len(want) > 0 and all(np.array_equal(a, b) for a, b in zip(got, want))
    ds.data.close()


def test_a_mixture_taking_its_world_late_carries_a_loaded_state_whole(tmp_path, monkeypatch):
    for name in LAUNCHERS:
        monkeypatch.delenv(name, raising=False)
    parts = [Part("web", (3_000, 2_000), 0.7, 0), Part("code", (2_500, 1_800), 0.3, 1)]
    # 90 samples an epoch: 96 served at 4 ranks, 92 at 2
    url = write_mixture(write_components(tmp_path, parts), "blend", parts, tokens_per_epoch=5_760)
    options = {**OPTIONS, "block_batches": 2}  # blocks of 16 samples at 4 ranks, 8 at 2
    with TokenDataset(url, rank=0, world_size=4, **options) as saved:  # a checkpoint of 4 ranks, at an epoch's start
        saved.set_epoch(1)
        state = saved.state_dict()
    ds = TorchTokenDataset(url, **options)  # rank 0 of 1 when Lightning restores the checkpoint into it
    ds.load_state_dict(state)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    served = [batch["input_ids"].numpy() for batch in ds]
    with TokenDataset(url, rank=0, world_size=2, **options) as reference:  # blocks of the checkpoint's world size
        reference.load_state_dict(state)
        expected = [batch["input_ids"] for batch in reference]
    assert len(served) == len(expected) > 0 and all(np.array_equal(a, b) for a, b in zip(served, expected))
    ds.data.close()


@pytest.fixture
def accelerate_cpu():
    """accelerate initialized in this process (an Accelerator, one process on CPU), forgotten afterwards."""
    Accelerator(cpu=True)
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.mark.parametrize("workers", [0, 2])
def test_len_counts_a_plain_dataloaders_batches_where_accelerate_is_initialized(url, accelerate_cpu, workers):
    ds = TorchTokenDataset(url, **OPTIONS)
    loader = DataLoader(ds, batch_size=None, num_workers=workers)
    served = len(list(loader))
    assert len(loader) == len(ds) == served > 0
    ds.set_epoch(1)
    assert len(ds) == served
    with pytest.raises(TrainerError, match="give accelerate's DataLoader a dataset of its own"):
        next(iter(Accelerator(cpu=True).prepare(DataLoader(ds, batch_size=OPTIONS["batch_size"]))))
    ds.data.close()
    fresh = TorchTokenDataset(url, **OPTIONS)  # its own dataset: len() counts rows, which accelerate's loader batches
    prepared = Accelerator(cpu=True).prepare(DataLoader(fresh, batch_size=OPTIONS["batch_size"]))
    assert len(prepared) == served == len(list(prepared))
    fresh.data.close()
