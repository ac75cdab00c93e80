"""One envelope for every saved state: `version` 3 and the `kind` of stream beside the stream's own fields. The states
users' checkpoints hold from before it (version 2: a dataset's without a kind, a mixture's of kind "shard-mixture"),
copied below as the previous release wrote them, restore the stream they were saved in; another stream's is refused."""

import numpy as np
import pytest

from shard_loader import TokenDataset
from shard_loader.state import StateError
from tests.support.mixture_files import Part, write_components, write_mixture
from tests.support.mixture_files import samples_of as mixture_samples_of
from tests.support.positional import samples_of, write_positional

SIZES = [int(n) for n in np.random.default_rng(5).integers(150, 900, size=10)]
OPTS = dict(seq_len=16, batch_size=3, seed=2, window_shards=3, rank=1, world_size=2)
PARTS = [Part("web", (3000,) * 8, 0.6, 0), Part("code", (2000,) * 12, 0.3, 1), Part("math", (240,), 0.1, 2)]
MIX_OPTS = dict(seq_len=16, batch_size=2, seed=3, window_shards=2)

# TokenDataset(dataset, **OPTS) after 4 batches, as the release before the envelope saved it
V2_DATASET = {
    "version": 2, "dataset": "synthetic", "dataset_version": "v1", "split": "train", "seq_len": 16, "batch_size": 3,
    "stride": 16, "label_shift": 1, "seed": 2, "windows": "f1f79aeb8f841000", "window_shards": 3, "window_bytes": None,
    "disk_budget": None, "world_size": 2, "epoch": 0, "window": 1, "sample": 18, "batches": 4,
}  # fmt: skip
# TokenDataset(mixture, **MIX_OPTS) after 10 batches, likewise
V2_MIXTURE = {
    "version": 2, "kind": "shard-mixture", "mixture": "blend", "split": "train", "seq_len": 16, "batch_size": 2,
    "stride": 16, "label_shift": 1, "seed": 3, "components": ["web", "code", "math"],
    "datasets": ["web-v1", "code-v1", "math-v1"],
    "windows": ["777791e764c8e26c", "1f6786823a30030d", "db407f11d7ede59a"],
    "mixture_version": "blend-6e1a532e8aaf773a", "weights": [0.6, 0.3, 0.1], "tokens_per_epoch": 16000,
    "block_samples": 128, "series": [0, 0, 1000, 0, 0, 0], "world_size": 1, "epoch": 0, "epoch_start": 0, "served": 20,
    "batches": 10, "consumed": [12, 6, 2], "component_epochs": [0, 0, 0], "block": [0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1],
}  # fmt: skip


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    root = tmp_path_factory.mktemp("envelope")
    write_positional(root / "dataset", SIZES)
    write_components(root / "mix", PARTS)
    return str(root / "dataset"), write_mixture(root / "mix", "blend", PARTS, 16_000)


def _saved(url, stop, **options):
    """The state a dataset saves after serving `stop` batches."""
    ds = TokenDataset(url, **options)
    for _, _ in zip(range(stop), ds):
        pass
    return ds.state_dict()


@pytest.mark.parametrize(
    "which,old,stop,kind,rows",
    [
        (0, V2_DATASET, 4, "shard-dataset", lambda b: samples_of(b, SIZES)),
        (1, V2_MIXTURE, 10, "shard-mixture", lambda b: mixture_samples_of(b, {p.index: p.sizes for p in PARTS})),
    ],
)
def test_a_version_2_state_restores_the_stream_it_was_saved_in(urls, which, old, stop, kind, rows):
    options = OPTS if which == 0 else MIX_OPTS
    if which == 1:  # the mixture's version is its file's content hash, which follows the fixture's files
        old = {**old, "mixture_version": TokenDataset(urls[1], **options).mixture.version}
    state = _saved(urls[which], stop, **options)
    assert state == {**old, "version": 3, "kind": kind}  # the envelope changed, the stream's own fields did not
    rests = []
    for saved in (state, old):
        ds = TokenDataset(urls[which], **options)
        ds.load_state_dict(saved)
        rests.append([rows(b) for b in ds])
    assert rests[0] == rests[1] and rests[0]
    with pytest.raises(StateError, match=f"state_dict was saved by a {'dataset' if which == 0 else 'mixture'}, not"):
        TokenDataset(urls[1 - which], **(MIX_OPTS if which == 0 else OPTS)).load_state_dict(old)
