"""Property test of the sampler: for random shard sizes, seq_len, stride, batch size, world size,
workers and resume points, every sample is served at most once and all but each window's remainder
exactly once, ranks get equal batch counts, and a resume (at the same or another world size)
continues the stream without loss or repetition."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from shard_loader.world import Consumer
from shard_loader.sampler import Cursor, EpochPlan, SampleSpec, make_windows, sample_counts


@st.composite
def setups(draw):
    sizes = draw(st.lists(st.integers(0, 400), min_size=1, max_size=8))
    return dict(
        sizes=sizes,
        seq_len=draw(st.integers(1, 40)),
        stride=draw(st.none() | st.integers(1, 40)),
        batch=draw(st.integers(1, 5)),
        world=draw(st.integers(1, 4)),
        window_shards=draw(st.integers(1, 4)),
        epoch=draw(st.integers(0, 3)),
    )


def _plan(s, rank, world=None, start=Cursor()):
    windows = tuple(make_windows([2] * len(s["sizes"]), s["window_shards"], None))
    spec = SampleSpec(s["seq_len"], 1, s["stride"])
    return EpochPlan(
        *sample_counts(spec, s["sizes"], list(windows)),
        windows,
        spec,
        11,
        s["epoch"],
        s["batch"],
        rank,
        world or s["world"],
        start,
    )


def _batches(plan):
    """The rank's batches, each a list of (shard, token start)."""
    out = []
    for seg in plan.segments:
        ids, starts = plan.rows(seg)
        pairs = list(zip(ids.tolist(), starts.tolist()))
        out += [pairs[b * plan.batch_size : (b + 1) * plan.batch_size] for b in range(seg.batches)]
    return out


def _available(s):
    """Samples in the split, counted here independently of the sampler, and the window count."""
    span, step = s["seq_len"] + 1, s["stride"] or s["seq_len"]
    return sum(len(range(0, n - span + 1, step)) for n in s["sizes"]), len(_plan(s, 0).windows)


@settings(max_examples=150, deadline=None, database=None)
@given(setups())
def test_every_sample_once_over_ranks_minus_window_remainders(s):
    streams = [_batches(_plan(s, r)) for r in range(s["world"])]
    assert len({len(x) for x in streams}) == 1
    served = Counter(p for x in streams for b in x for p in b)
    assert all(len(b) == s["batch"] for x in streams for b in x)
    assert not served or max(served.values()) == 1
    spec = SampleSpec(s["seq_len"], 1, s["stride"])
    assert all(start % spec.step == 0 and start + spec.span <= s["sizes"][shard] for shard, start in served)
    total, windows = _available(s)
    assert 0 <= total - len(served) < max(windows * s["batch"] * s["world"], 1)


@settings(max_examples=150, deadline=None, database=None)
@given(setups(), st.integers(1, 5), st.integers(1, 4), st.data())
def test_workers_split_a_resumed_plan_exactly_and_in_turn(s, workers, group, data):
    plan = _plan(s, 0)
    k = data.draw(st.integers(0, plan.total_batches))
    resumed = _plan(s, 0, start=plan.cursor_after(k))
    total = resumed.total_batches
    first = data.draw(st.integers(0, total))
    runs = {w: list(Consumer(w, workers, group).runs(first, total - first)) for w in range(workers)}
    assert all(
        a < b and a // group == (b - 1) // group for mine in runs.values() for a, b in mine
    )  # a run stays in one group
    owned = {w: [i for a, b in mine for i in range(a, b)] for w, mine in runs.items()}
    assert sorted(i for mine in owned.values() for i in mine) == list(range(first, total))
    assert all(
        (i // group) % workers == w for w, mine in owned.items() for i in mine
    )  # group q, counted from the resume, to worker q % workers
    assert _batches(plan)[k:] == _batches(resumed)


@settings(max_examples=150, deadline=None, database=None)
@given(setups(), st.integers(1, 4), st.data())
def test_a_resume_at_another_world_size_loses_and_repeats_nothing(s, new_world, data):
    first = [_plan(s, r) for r in range(s["world"])]
    k = data.draw(st.integers(0, first[0].total_batches))
    cursor = first[0].cursor_after(k)
    assert all(p.cursor_after(k) == cursor for p in first)  # every rank saves the same position
    served = Counter(p for plan in first for b in _batches(plan)[:k] for p in b)
    rest = [_plan(s, r, new_world, cursor) for r in range(new_world)]
    assert len({p.total_batches for p in rest}) == 1
    served.update(p for plan in rest for b in _batches(plan) for p in b)
    assert not served or max(served.values()) == 1
    total, windows = _available(s)
    assert 0 <= total - len(served) < max(windows * s["batch"] * max(s["world"], new_world), 1)
