"""torchdata's StatefulDataLoader with workers over a mixture and over a plain dataset, the same way (#30): a state
saved mid-epoch by a loader with 2 workers restores exactly into a new loader with 2 workers, and through the
dataset under a loader with 3; the rest of the stream equals the uninterrupted one batch by batch (tokens and
`component`)."""

import numpy as np
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from shard_loader import TokenDataset
from shard_loader.torch_dataset import TorchTokenDataset
from tests.support.mixture_files import Part, samples_of, write_components, write_mixture

pytestmark = [pytest.mark.integration, pytest.mark.system]

PARTS = [Part("web", (900,) * 6, 0.6, 0), Part("code", (700,) * 6, 0.3, 1), Part("math", (120,), 0.1, 2)]
SIZES = {p.index: p.sizes for p in PARTS}
OPTS = dict(seq_len=16, batch_size=2, seed=5, window_shards=2)
STOP = 37  # batches served before the save: mid-epoch, mid-window, not a multiple of either worker count


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    """A mixture of three positional components, and one of them alone as a plain dataset."""
    root = write_components(tmp_path_factory.mktemp("mixture"), PARTS)
    return {"mixture": write_mixture(root, "blend", PARTS, tokens_per_epoch=4_000), "dataset": str(root / "web")}


def _rows(batch):
    """Each row's (component, shard, start), checked token by token, with the batch's `component` column."""
    rows = samples_of(batch, SIZES)
    component = np.asarray(batch["component"])
    assert component.dtype == np.int64
    return rows, component.tolist()


def _loader(url, workers, method):
    return StatefulDataLoader(
        TorchTokenDataset(url, **OPTS), batch_size=None, num_workers=workers, multiprocessing_context=method
    )


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("source", ["mixture", "dataset"])
def test_a_state_saved_with_2_workers_restores_exactly_at_2_and_at_3_workers(urls, source, method):
    url = urls[source]
    full = [_rows(b) for b in TokenDataset(url, **OPTS)]  # the uninterrupted stream, from the numpy path
    assert len(full) > STOP + 10
    if source == "mixture":
        assert {c for _, comps in full for c in comps} == {0, 1, 2}
    else:
        assert np.all([comps == [0, 0] for _, comps in full])
    loader = _loader(url, 2, method)
    head = []
    for batch in loader:
        head.append(_rows(batch))
        if len(head) == STOP:
            break
    state = loader.state_dict()
    assert head == full[:STOP]

    same = _loader(url, 2, method)
    same.load_state_dict(state)  # a StatefulDataLoader restores each worker's own place
    assert head + [_rows(b) for b in same] == full

    ds = TorchTokenDataset(url, **OPTS)
    ds.load_state_dict(state)  # the whole loader state, at another worker count: through the dataset
    more = StatefulDataLoader(ds, batch_size=None, num_workers=3, multiprocessing_context=method)
    assert head + [_rows(b) for b in more] == full
