"""A mixture through the torch path: DataLoader workers hand over groups in the same shared slots, each batch gains
`component`, the delivered stream is the numpy stream for any worker count, persistent workers follow set_epoch, and a
state saved mid-epoch resumes with another worker count; a kept batch (tokens and components) is never overwritten."""

from itertools import islice

import pytest
import torch

from shard_loader import TokenDataset
from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.mixture_files import Part, samples_of, write_components, write_mixture

pytestmark = pytest.mark.integration

PARTS = [Part("web", (900,) * 6, 0.6, 0), Part("code", (700,) * 6, 0.3, 1), Part("math", (120,), 0.1, 2)]
SIZES = {p.index: p.sizes for p in PARTS}
OPTS = dict(seq_len=16, batch_size=2, seed=5, window_shards=2)


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    root = write_components(tmp_path_factory.mktemp("mixture"), PARTS)
    return write_mixture(root, "blend", PARTS, tokens_per_epoch=4_000)


def _rows(batch):
    rows = samples_of(batch, SIZES)
    assert batch["component"].dtype == torch.int64 and batch["component"].tolist() == [c for c, _, _ in rows]
    return rows


def _numpy(url, epoch=0):
    ds = TokenDataset(url, **OPTS)
    ds.set_epoch(epoch)
    return [samples_of(b, SIZES) for b in ds]


@pytest.mark.parametrize("workers,method", [(0, None), (2, "fork"), (3, "spawn")])
def test_the_dataloader_stream_is_the_numpy_stream_with_components(url, workers, method):
    ds = TorchTokenDataset(url, batches_per_transfer=3, **OPTS)
    loader = TokenDataLoader(ds, num_workers=workers, multiprocessing_context=method, persistent_workers=bool(workers))
    assert [_rows(b) for b in loader] == _numpy(url) and len(loader) == 125
    ds.set_epoch(1)
    assert [_rows(b) for b in loader] == _numpy(url, 1)


def test_a_state_saved_mid_epoch_resumes_with_another_worker_count(url):
    ds = TorchTokenDataset(url, batches_per_transfer=4, **OPTS)
    loader = TokenDataLoader(ds, num_workers=3, persistent_workers=True)
    head = [_rows(b) for b in islice(loader, 41)]
    state = loader.state_dict()
    assert state["served"] == 82
    resumed = TokenDataLoader(TorchTokenDataset(url, batches_per_transfer=2, **OPTS), num_workers=1)
    resumed.load_state_dict(state)
    assert head + [_rows(b) for b in resumed] == _numpy(url)


def test_kept_batches_keep_their_tokens_and_components(url):
    loader = TokenDataLoader(TorchTokenDataset(url, batches_per_transfer=2, **OPTS), num_workers=2, prefetch_factor=1)
    kept = list(loader)  # every batch held: workers must not write into their slots again
    assert [samples_of(b, SIZES) for b in kept] == _numpy(url)
    assert [b["component"].tolist() for b in kept] == [[c for c, _, _ in rows] for rows in _numpy(url)]
    only = [
        b["component"]
        for b in TokenDataLoader(
            TorchTokenDataset(url, batches_per_transfer=2, **OPTS), num_workers=2, prefetch_factor=1
        )
    ]
    assert [c.tolist() for c in only] == [
        [c for c, _, _ in rows] for rows in _numpy(url)
    ]  # a component view alone holds its slot
