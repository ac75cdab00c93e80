"""Trainer loops as users write them before reading "With your trainer", at 2 processes (torchrun or Lightning's own
launcher, gloo on CPU), every trained row checked against the uninterrupted stream: a loop started again after a
finished epoch without set_epoch trains the next epoch (by hand through TokenDataLoader and a DataLoader, and through
Lightning's fit), Lightning's `python train.py` trains each rank's stream, and what cannot be exact is refused with the
setting to change in the user's own terms."""

import numpy as np
import pytest

from tests.loader.test_trainers import FOR_TRANSFORMERS
from tests.support.positional import write_positional
from tests.support.training import check_exact, read_log, snippet, train, uninterrupted

pytestmark = pytest.mark.system

SIZES = [int(n) for n in np.random.default_rng(23).integers(20_000, 40_000, size=10)]  # 7 steps of 2 x 8 an epoch
BY_HAND = """
from torch.utils.data import DataLoader
from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset

ds = TorchTokenDataset(url, split="train", seq_len=2048, batch_size=8, seed=1234)
loader = LOADER
for epoch in range(epochs):
    for batch in loader:  # no set_epoch
        model(batch["input_ids"], batch["labels"])
"""


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    root = tmp_path_factory.mktemp("positional")
    write_positional(root, SIZES)
    return str(root)


def references(url: str) -> list[dict[int, list]]:
    return [uninterrupted(url, SIZES, rank, 2) for rank in range(2)]


@pytest.mark.parametrize(
    "loader",
    [
        "TokenDataLoader(ds)",
        "TokenDataLoader(ds, num_workers=2)",
        "DataLoader(ds, batch_size=None)",
    ],
)
def test_a_loop_started_again_without_set_epoch_trains_the_next_epoch(url, tmp_path, loader):
    run = train(BY_HAND.replace("LOADER", loader), url, SIZES, tmp_path, "by-hand", world=2)
    assert run.returncode == 0, run.stderr[-3000:]
    for rank, reference in enumerate(references(url)):
        check_exact(read_log(tmp_path, "by-hand", rank), reference)


def test_a_dataloader_with_workers_started_again_without_set_epoch_is_refused(url, tmp_path):
    """Its workers cannot know that the last loop finished: the second loop is refused at its first batch."""
    code = BY_HAND.replace("LOADER", "DataLoader(ds, batch_size=None, num_workers=2)")
    run = train(code, url, SIZES, tmp_path, "by-hand", world=2)
    assert run.returncode != 0
    assert "StateError" in run.stderr and "call dataset.set_epoch(epoch) before each loop" in run.stderr
    for rank, reference in enumerate(references(url)):
        epoch = dict(list(reference.items())[: len(reference) // 2])
        check_exact(read_log(tmp_path, "by-hand", rank), epoch)


@pytest.mark.parametrize("loader", ["TokenDataLoader(ds, num_workers=2)", "DataLoader(ds, batch_size=None)"])
def test_lightning_fit_without_a_set_epoch_hook_trains_two_whole_epochs(url, tmp_path, loader):
    hook = "    def on_train_epoch_start(self):\n        ds.set_epoch(self.current_epoch)  # Lightning moves samplers"
    hook += " only\n"
    code = snippet("docs/loader.md", "lightning")
    assert hook in code
    code = code.replace(hook, "").replace("TokenDataLoader(ds, num_workers=2)", loader)
    code = "from torch.utils.data import DataLoader\n" + code
    run = train(code, url, SIZES, tmp_path, "run-lightning", world=2, init=False, every=1000)
    assert run.returncode == 0, run.stderr[-3000:]
    for rank, reference in enumerate(references(url)):
        check_exact(read_log(tmp_path, "run-lightning", rank), reference)


def test_the_lightning_snippet_under_lightnings_own_launcher_trains_each_ranks_stream(url, tmp_path):
    """`python train.py` with devices=2: process 0 builds the dataset before Lightning starts process 1 (which sees
    LOCAL_RANK, NODE_RANK and WORLD_SIZE, no RANK); each trains its own rank's stream."""
    run = train(snippet("docs/loader.md", "lightning"), url, SIZES, tmp_path, "own-launcher", every=1000)
    assert run.returncode == 0, run.stderr[-3000:]
    for rank, reference in enumerate(references(url)):
        check_exact(read_log(tmp_path, "own-launcher", rank), reference)


def test_the_hf_trainer_with_another_batch_size_is_refused_in_its_own_terms(url, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    code = snippet("docs/loader.md", "hf-trainer").replace(
        "per_device_train_batch_size=8", "per_device_train_batch_size=4"
    )
    run = train(FOR_TRANSFORMERS + code, url, SIZES, tmp_path, "hf-trainer", world=2, init=False)
    assert run.returncode != 0
    assert "TrainerError: per_device_train_batch_size is 4, but the dataset's batch_size is 8" in run.stderr
    assert read_log(tmp_path, "hf-trainer", 0) == read_log(tmp_path, "hf-trainer", 1) == []


def test_lightning_resumed_mid_epoch_over_a_plain_dataloader_is_refused(url, tmp_path):
    """Lightning saves no state of a DataLoader without state_dict() and would restart the interrupted epoch from its
    first batch with a warning; the dataset makes that warning an error: no row is trained twice."""
    plain = "DataLoader(ds, batch_size=None)"
    code = snippet("docs/loader.md", "lightning").replace("TokenDataLoader(ds, num_workers=2)", plain)
    code = "from torch.utils.data import DataLoader\n" + code
    killed = train(code, url, SIZES, tmp_path, "run-lightning", kill_at=5, kill_rank=1, world=2, init=False, every=2)
    assert killed.returncode != 0
    resumed = train(code, url, SIZES, tmp_path, "run-lightning", world=2, init=False, every=2)
    assert resumed.returncode != 0
    assert "You're resuming from a checkpoint that ended before the epoch ended" in resumed.stderr
    for rank, reference in enumerate(references(url)):
        trained = read_log(tmp_path, "run-lightning", rank)
        assert trained and len({step for step, _ in trained}) == len(trained)
        assert all(rows == reference[step] for step, rows in trained)
