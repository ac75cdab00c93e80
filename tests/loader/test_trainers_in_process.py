"""What a TorchTokenDataset learns of the trainer reading it, in one process: Lightning's mid-epoch restart warning is
an error once per process (not a filter per dataset, moved ahead of the user's own)."""

import warnings

import pytest

from shard_loader.torch_dataset import TorchTokenDataset
from tests.support.positional import positional_dataset

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
