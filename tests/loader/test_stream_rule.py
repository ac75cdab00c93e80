"""The one rule where a dataset's stream and a mixture's differ (docs/loader.md): a dataset drops each window's
remainder (the samples past the window's last whole global batch), a mixture serves them. Elsewhere a mixture of one
component serves the dataset's rows: the same samples, in the same order, dealt to the same ranks, epoch after epoch."""

import tempfile
from itertools import groupby
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_loader import TokenDataset
from shard_loader.state import StateError
from tests.support.mixture_files import STRIDE, Part, write_component, write_mixture

EPOCHS = 3


@st.composite
def setups(draw):
    seq_len, batch_size, world_size = draw(st.integers(2, 12)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    enough = seq_len * batch_size * world_size + 1  # every shard holds a global batch: no epoch is empty
    return dict(
        sizes=tuple(draw(st.lists(st.integers(enough, enough + 200), min_size=1, max_size=6))),
        seq_len=seq_len,
        batch_size=batch_size,
        world_size=world_size,
        window_shards=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 1 << 16)),
    )


def _epochs(url: str, s: dict) -> list[list[tuple[int, ...]]]:
    """Each epoch's global stream of rows: step by step, rank 0's rows, then rank 1's, and so on."""
    options = {k: s[k] for k in ("seq_len", "batch_size", "window_shards", "seed", "world_size")}
    ranks = [TokenDataset(url, rank=r, **options) for r in range(s["world_size"])]
    epochs = []
    try:
        for epoch in range(EPOCHS):
            steps = []
            for ds in ranks:
                ds.set_epoch(epoch)
                steps.append([[tuple(row) for row in b["input_ids"].tolist()] for b in ds])
            assert len({len(rank) for rank in steps}) == 1  # every rank serves as many batches
            epochs.append([row for step in zip(*steps) for batch in step for row in batch])
    finally:
        for ds in ranks:
            ds.close()
    return epochs


@settings(max_examples=30, deadline=None)
@given(setups())
def test_a_one_component_mixture_serves_the_datasets_rows_plus_each_windows_remainder(s):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_component(root, Part("web", s["sizes"], 1.0, 0))
        span = s["seq_len"] + 1
        samples = sum(len(range(0, n + 1 - span + 1, s["seq_len"])) for n in s["sizes"])  # an epoch (+1: the EOD)
        mixture = write_mixture(root, "one", [Part("web", s["sizes"], 1.0, 0)], samples * s["seq_len"])
        dataset = _epochs(str(root / "web"), s)
        component = [row for epoch in _epochs(mixture, s) for row in epoch]  # the mixture's epochs follow on
        with TokenDataset(
            str(root / "web"), seq_len=s["seq_len"], batch_size=1, window_shards=s["window_shards"]
        ) as ds:
            window_of = {shard: w.index for w in ds.windows for shard in w.shards}
    g = s["batch_size"] * s["world_size"]
    for epoch, served in enumerate(dataset):
        mine = component[epoch * samples : (epoch + 1) * samples]
        assert sorted(mine) == sorted(set(mine)) and len(mine) == samples  # the mixture serves every sample once
        runs = [list(run) for _, run in groupby(mine, key=lambda row: window_of[(row[0] - 1) // STRIDE % 100])]
        assert served == [row for run in runs for row in run[: len(run) - len(run) % g]], (epoch, s)


def test_a_stream_takes_back_only_its_own_positions_plans_and_keys(tmp_path):
    part = Part("web", (400, 300), 1.0, 0)
    write_component(tmp_path, part)
    mixture = write_mixture(tmp_path, "one", [part], 1_000)
    options = {"seq_len": 8, "batch_size": 2}
    with TokenDataset(str(tmp_path / "web"), **options) as ds, TokenDataset(mixture, **options) as mix:
        with pytest.raises(StateError, match="its own Position, not another stream's MixturePosition"):
            ds.plan(mix.position)
        with pytest.raises(StateError, match="its own MixturePlan, not another stream's EpochPlan"):
            mix.advanced(ds.plan(), mix.position, 1)
        with pytest.raises(StateError, match="a mixture takes back only its own StreamKey"):
            mix.parse_state(mix.state_dict()).check(ds.stream_key())
