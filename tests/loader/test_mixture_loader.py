"""A mixture served through TokenDataset: three datasets, one 100x smaller than the others, mixed 0.6 / 0.3 / 0.1.
Every component keeps its own (seed, epoch) order and epoch counter (the small one repeats as its weight requires,
never a sample twice within one of its epochs), every run of 64 global batches holds each component's share within
one sample, a saved state resumes the same stream at other world sizes, a weight change is refused unless opted into
(and then repeats nothing early), and a component is served at its pinned version whatever its live manifest says."""

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from shard_loader import IntegrityError, ManifestError, TokenDataset
from shard_loader.mixture.stream import MixtureStream
from shard_loader.state import StateError
from tests.support.mixture_files import (
    assert_every_block_holds_the_shares,
    Part,
    components_of,
    own_stream,
    samples_of,
    write_component,
    write_components,
    write_mixture,
)
from tests.support.synthetic import random_docs, write_dataset

PARTS = [
    Part("web", (3000,) * 8, 0.6, 0),
    Part("code", (2000,) * 12, 0.3, 1),
    Part("math", (240,), 0.1, 2),
]  # math: 100x smaller
SIZES = {p.index: p.sizes for p in PARTS}
OPTS = dict(seq_len=16, batch_size=2, seed=3, window_shards=2)
TOKENS_PER_EPOCH = 16_000  # 1,000 samples of 16 tokens: web 600 of its 1,496, code 300 of 1,496, math 100 of its 15


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_components(tmp_path_factory.mktemp("mixture-store"), PARTS)


@pytest.fixture(scope="module")
def url(store):
    return write_mixture(store, "blend", PARTS, TOKENS_PER_EPOCH)


def _own_stream(store, part, samples, **options):
    """(shard, start) of the first `samples` samples of a component read alone, and its samples per epoch."""
    return own_stream(store / part.name, samples, lambda b: samples_of(b, SIZES), **{**OPTS, **options})


def _stream(url, world, epochs=(0,), state=None, stop=None, **options):
    """The global stream (component, shard, start) the ranks of `world` serve, in stream order, and the states saved
    at the end."""
    per_rank, states = [], []
    for rank in range(world):
        ds = TokenDataset(url, rank=rank, world_size=world, **{**OPTS, **options})
        if state is not None:
            ds.load_state_dict(state)
        batches = []
        for epoch in epochs:
            ds.set_epoch(epoch)
            for batch in ds:
                rows = samples_of(batch, SIZES)
                assert components_of(batch) == [c for c, _, _ in rows]  # `component` names each row's component
                batches.append(rows)
                if stop is not None and len(batches) == stop:
                    break
            if stop is not None and len(batches) == stop:
                break
        per_rank.append(batches)
        states.append(ds.state_dict())
    assert len({len(b) for b in per_rank}) == 1 and all(s == states[0] for s in states)
    stream = [
        row for step in zip(*per_rank) for rows in step for row in rows
    ]  # rank r's rows follow rank r-1's in each global batch
    return stream, states[0]


def test_a_mixture_url_gives_a_mixture_dataset(url, store):
    ds = TokenDataset(url, **OPTS)
    assert isinstance(ds.stream, MixtureStream) and isinstance(ds, TokenDataset)
    assert type(TokenDataset(str(store / "web"), **OPTS)) is TokenDataset
    plain = next(iter(TokenDataset(str(store / "web"), **OPTS)))
    assert plain["component"].dtype == np.int64 and plain["component"].tolist() == [0, 0]


@pytest.mark.parametrize(
    "window_shards", [2, 1]
)  # with one-shard windows a chunk of batches spans several windows of web
def test_each_component_keeps_its_own_order_and_epochs_and_every_64_global_batches_hold_the_shares(
    url, store, window_shards
):
    world = 2
    stream, state = _stream(url, world, epochs=(0, 1, 2), window_shards=window_shards)
    global_batch = OPTS["batch_size"] * world
    assert (
        len(stream) == 3 * TOKENS_PER_EPOCH // OPTS["seq_len"]
    )  # three epochs of 1,000 samples: whole global batches, none dropped
    for part in PARTS:
        mine = [(s, t) for c, s, t in stream if c == part.index]
        own, per_epoch = _own_stream(store, part, len(mine), window_shards=window_shards)
        assert mine == own  # the component's own (seed, epoch) stream, in order
        for e in range(0, len(mine), per_epoch):
            assert len(set(mine[e : e + per_epoch])) == len(
                mine[e : e + per_epoch]
            )  # no repeat within one of its epochs
    math_epochs = Counter(stream.count(s) for s in set(x for x in stream if x[0] == 2))
    assert min(math_epochs) >= 19  # 300 samples of a 15-sample component: 20 passes (the first and last partial)
    assert state["component_epochs"] == [1, 0, 20]
    comps = np.array([c for c, _, _ in stream])
    epoch = TOKENS_PER_EPOCH // OPTS["seq_len"]
    assert_every_block_holds_the_shares(comps, [p.weight for p in PARTS], 64 * global_batch, epoch, global_batch)


@pytest.mark.parametrize("before,after,stop", [(2, 3, 37), (2, 1, 100), (3, 2, 5), (1, 4, 251)])
def test_a_resume_at_another_world_size_continues_the_same_stream(url, before, after, stop):
    full, _ = _stream(url, before, epochs=(0, 1))  # uninterrupted, at the world size the stream started at (its block)
    head, state = _stream(url, before, epochs=(0, 1), stop=stop)
    tail, end = _stream(url, after, epochs=(state["epoch"], 1), state=state)
    assert state["world_size"] == before and state["block_samples"] == 64 * 2 * before
    resumed = head + tail
    n = min(len(full), len(resumed))
    assert resumed[:n] == full[:n]  # the stream is the same sample by sample
    assert abs(len(full) - len(resumed)) < 2 * max(
        before, after, 2
    )  # epochs end on the whole global batch of their world size


def test_state_dict_names_where_each_component_stands(url):
    ds = TokenDataset(url, **OPTS)
    for i, _ in zip(range(10), ds):
        pass
    state = ds.state_dict()
    assert state["served"] == 20 and sum(state["consumed"]) == 20
    assert state["components"] == ["web", "code", "math"] and state["datasets"] == ["web-v1", "code-v1", "math-v1"]
    assert json.loads(json.dumps(state)) == state  # plain values only
    other = TokenDataset(url, **{**OPTS, "seed": 4})
    with pytest.raises(StateError, match="seed 3"):
        other.load_state_dict(state)
    with pytest.raises(StateError, match="dataset, not a mixture"):
        TokenDataset(url, **OPTS).load_state_dict(TokenDataset(str(Path(url).parents[1] / "web"), **OPTS).state_dict())
    edited = {**state, "consumed": [state["consumed"][0] + 1, *state["consumed"][1:]]}
    with pytest.raises(StateError, match="consumed"):
        TokenDataset(url, **OPTS).load_state_dict(edited)
    with pytest.raises(StateError, match="state_dict was saved by a mixture, not a dataset"):
        TokenDataset(str(Path(url).parents[1] / "web"), **OPTS).load_state_dict(state)
    with pytest.raises(StateError, match="version 1 is not 3 or 2: it was saved by another shard_loader release"):
        TokenDataset(url, **OPTS).load_state_dict({**state, "version": 1})  # its stream had no epoch series
    for series, said in (
        ([0, 0, 1000, 0, 0], "series must hold 6 integers"),
        ([0, 0, 0, 0, 0, 0], "series must give epochs of at least 1 sample"),
        ([3, 0, 1000, 0, 0, 0], "block does not lie on its stream"),
        ([0, 0, 1000, 1, 0, 0], "do not follow from its epoch.s start"),
    ):
        with pytest.raises(StateError, match=said):
            TokenDataset(url, **OPTS).load_state_dict({**state, "series": series})


def test_a_weight_change_is_refused_by_name_unless_opted_into_and_then_repeats_nothing_early(tmp_path):
    write_components(tmp_path, PARTS)
    first = write_mixture(tmp_path, "curriculum", PARTS, TOKENS_PER_EPOCH)
    head, state = _stream(first, 2, epochs=(0,), stop=130)
    shifted = [
        Part("web", PARTS[0].sizes, 0.2, 0),
        Part("code", PARTS[1].sizes, 0.3, 1),
        Part("math", PARTS[2].sizes, 0.5, 2),
    ]
    second = write_mixture(tmp_path, "curriculum", shifted, TOKENS_PER_EPOCH)
    assert second == first  # the live mixture moved to the new weights
    with pytest.raises(
        StateError, match=r"components\[0\]\.weight \('web'\) 0\.6, this mixture has 0\.2.*allow_weight_change=True"
    ):
        TokenDataset(second, **OPTS).load_state_dict(state)
    tail, end = _stream(second, 2, epochs=(0, 1, 2), state=state, allow_weight_change=True)
    stream = head + tail
    for part in PARTS:  # each component went on from its own position: its own stream, no sample served twice early
        mine = [(s, t) for c, s, t in stream if c == part.index]
        own, per_epoch = _own_stream(tmp_path, part, len(mine))
        assert mine == own
    later = np.array([c for c, _, _ in tail[-640:]])
    assert np.all(
        np.abs(np.bincount(later, minlength=3)[:3] - np.array([0.2, 0.3, 0.5]) * 640) <= 2
    )  # the new weights rule


def test_a_component_is_served_at_its_pinned_version_after_its_live_manifest_moves_on(tmp_path):
    write_components(tmp_path, PARTS)
    url = write_mixture(tmp_path, "pinned", PARTS, TOKENS_PER_EPOCH)
    before, _ = _stream(url, 1, stop=50)
    moved = Part("web", (5000,) * 3, 0.6, 0)
    write_component(tmp_path, moved, version="v2")  # the live web/manifest.json now names another version
    assert json.loads((tmp_path / "web/manifest.json").read_text())["dataset"]["version"] == "web-v2"
    ds = TokenDataset(url, **OPTS)
    assert ds.stream_key().datasets[0] == "web-v1"
    after, _ = _stream(url, 1, stop=50)
    assert after == before  # v1's shards, token for token (samples_of checks them against v1's sizes)


def _pinned(doc, i):
    return doc["components"][i]["manifest"]


def test_a_component_whose_manifest_bytes_differ_is_refused_naming_it(tmp_path):
    write_components(tmp_path, PARTS)
    url = write_mixture(tmp_path, "tampered", PARTS, TOKENS_PER_EPOCH)
    key = tmp_path / "code/manifests/code-v1.json"
    key.write_text(key.read_text().replace('"code-v1"', '"code-v9"'))
    with pytest.raises(IntegrityError, match=r"component 'code' \(.*code/manifests/code-v1\.json\).*pinned as"):
        TokenDataset(url, **OPTS)


@pytest.mark.parametrize(
    "edit,error,match",
    [
        (
            lambda d: d["tokenizer"].update(fingerprint="other"),
            ManifestError,
            r"component 'web'.*tokenizer fingerprint 'synthetic' is not the mixture's 'other'",
        ),
        (
            lambda d: _pinned(d, 1).update(url="../code/manifests/code-v1.json"),
            ManifestError,
            r"components\[1\]\.manifest\.url.*'\.\.'",
        ),
        (lambda d: d["tokens_per_epoch"].pop("train"), ManifestError, r"tokens_per_epoch has no split 'train'"),
        (lambda d: d["components"][2].update(weight=0.2), ManifestError, r"weights sum to 1\.1"),
        (
            lambda d: d["components"][2].update(weight=-0.1),
            ManifestError,
            r"components\[2\]\.weight: must be a positive number",
        ),
        (
            lambda d: d["components"][1].update(name="web"),
            ManifestError,
            r"components\[1\]\.name: 'web' is also components\[0\]",
        ),
        (
            lambda d: d["components"][0].update(version="web-v7"),
            ManifestError,
            r"component 'web'.*the manifest is web@web-v1, the mixture names web@web-v7",
        ),
        (lambda d: d.update(format_version=2), ManifestError, r"format_version 2 is not supported"),
    ],
)
def test_a_bad_mixture_file_is_refused_naming_the_field(tmp_path, edit, error, match):
    write_components(tmp_path, PARTS)
    url = write_mixture(tmp_path, "bad", PARTS, TOKENS_PER_EPOCH, edit=edit)
    with pytest.raises(error, match=match):
        TokenDataset(url, **OPTS)


def test_a_pinned_mixture_url_and_absolute_component_urls_are_read(tmp_path, url, store):
    pinned = next((store / "mixtures/blend").glob("*.json"))
    assert TokenDataset(str(pinned), **OPTS).mixture.version == pinned.stem
    absolute = write_mixture(
        tmp_path,
        "elsewhere",
        PARTS,
        TOKENS_PER_EPOCH,
        pinned={p.name: str(store / p.name / f"manifests/{p.name}-v1.json") for p in PARTS},
    )
    assert _stream(absolute, 1, stop=30)[0] == _stream(url, 1, stop=30)[0]


def test_set_epoch_goes_on_where_the_last_epoch_ended_and_len_counts_whole_global_batches(url):
    ds = TokenDataset(url, **OPTS)
    assert len(ds) == 500  # 1,000 samples in global batches of 2
    assert sum(1 for _ in ds) == 500 and len(ds) == 500
    ds.set_epoch(1)
    assert ds.state_dict()["served"] == 1000 and ds.state_dict()["epoch_start"] == 1000
    ds.set_epoch(3)
    assert ds.state_dict()["served"] == 3000
    ds.set_epoch(0)
    assert ds.state_dict()["served"] == 0
    odd = TokenDataset(url, **{**OPTS, "batch_size": 3})
    assert (
        len(odd) == 334 and sum(1 for _ in odd) == 334
    )  # ceil(1,000 / 3): the last batch reaches into the next epoch's samples
    odd.set_epoch(1)
    assert odd.state_dict()["served"] == 1002


def test_a_mixture_of_real_documents_with_position_ids(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        write_dataset(
            tmp_path / name, {"train": [random_docs(rng, 30) for _ in range(3)]}, name=name, version=f"{name}-v1"
        )
    parts = [Part("a", (), 0.75, 0), Part("b", (), 0.25, 1)]
    url = write_mixture(tmp_path, "docs", parts, 20_000)
    ds = TokenDataset(url, seq_len=32, batch_size=4, position_ids=True)
    batch = next(iter(ds))
    assert batch["position_ids"].shape == (4, 32) and batch["component"].shape == (4,)
    raw = (tmp_path / "mixtures/docs.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest()  # written per the contract


def test_the_next_epoch_goes_on_with_the_windows_open_and_a_stopped_one_closes_them(url):
    ds = TokenDataset(url, **OPTS)
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        assert sum(1 for _ in ds) == 500
    assert (
        ds.stats["math"].windows_fetched == 1
    )  # math's one window stayed open through 20 of its epochs and 3 mixture epochs
    fetched = {name: s.windows_fetched for name, s in ds.stats.items()}
    ds.set_epoch(3)
    for i, _ in zip(range(5), ds):
        pass
    ds.set_epoch(5)  # the stream moved: the plan stopped early, so its windows were closed
    assert next(iter(ds))["component"].shape == (2,)
    assert ds.stats["math"].windows_fetched == fetched["math"] + 1
