"""Property tests of the mixture interleave: for random weights and block sizes, every block holds floor or ceil of
each component's share, so does every run of one block's length at any offset, each component's count at a block
boundary is within one sample of its share of everything before (Pfair), any window at all is within 4, each
component's samples are numbered 0, 1, 2, ... in stream order. Cut into mixture epochs (Segments), every epoch holds
its exact quotas, every epoch boundary is within one sample of each share, the state at an epoch's start is the one a
walk reaches, windows keep their bounds within an epoch's full blocks (within 3 across its end), and the walk is the
same from any block it passes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_loader.mixture.interleave import UNIT, BlockState, Interleave, Segments, Walker, edf_layout, units

EPS = 1e-6  # weights are exact to 2**-40 of a block; the bounds below are strict up to that


@st.composite
def mixtures(draw):
    n = draw(st.integers(1, 6))
    raw = draw(st.lists(st.floats(0.001, 1.0), min_size=n, max_size=n))
    weights = [w / sum(raw) for w in raw]
    return weights, draw(st.integers(1, 120)), draw(st.integers(1, 40))


def _locate(il, state, picks):
    """(component, component sample index) of every sample of one block."""
    return il.locate_blocks([state], [picks], np.zeros(il.block, dtype=np.int64), np.arange(il.block))


def _stream(weights, block, blocks):
    """(component of each sample, its component sample index, the states at block starts) over `blocks` blocks."""
    il = Interleave(units(weights), block)
    state, comps, ks, states = BlockState.origin(0, [0] * len(weights)), [], [], []
    for _ in range(blocks):
        states.append(state)
        picks = il.picks(state)
        c, k = _locate(il, state, picks)
        assert np.array_equal(np.bincount(c, minlength=len(weights)), il.counts(picks))
        comps.append(c)
        ks.append(k)
        state = il.following(state, picks)
    states.append(state)
    return il, np.concatenate(comps), np.concatenate(ks), states


def _window_counts(comps, n, length):
    onehot = np.zeros((len(comps) + 1, n))
    onehot[np.arange(len(comps)) + 1, comps] = 1
    cum = onehot.cumsum(0)
    return cum[length:] - cum[:-length]


@settings(max_examples=150, deadline=None)
@given(mixtures())
def test_every_run_of_a_block_holds_floor_or_ceil_of_each_share(setup):
    w, block, comps = np.asarray(setup[0]), setup[1], _stream(*setup)[1]
    counts = _window_counts(comps, len(w), block)  # every offset, not only block starts
    assert np.all(np.abs(counts - w * block) < 1 + EPS)


@settings(max_examples=150, deadline=None)
@given(mixtures())
def test_long_runs_stay_exact_and_short_windows_close(setup):
    _, comps, _, states = _stream(*setup)
    w, block = np.asarray(setup[0]), setup[1]
    for j, state in enumerate(states):  # at each block boundary: within one sample of the share of everything before
        assert np.all(np.abs(np.asarray(state.consumed) - w * block * j) < 1 + EPS)
    for length in range(1, min(len(comps), 3 * block + 2)):
        assert np.all(np.abs(_window_counts(comps, len(w), length) - w * length) < 4)


@settings(max_examples=100, deadline=None)
@given(mixtures())
def test_each_component_is_numbered_in_stream_order(setup):
    weights, block, blocks = setup
    il, comps, ks, states = _stream(weights, block, blocks)
    for c in range(len(weights)):
        assert np.array_equal(ks[comps == c], np.arange(np.count_nonzero(comps == c)))
    for j in range(len(states) - 1):  # the counts at any offset of a block, as a state reports them
        picks = il.picks(states[j])
        for offset in (0, block // 3, block - 1):
            expected = [np.count_nonzero(comps[: j * block + offset] == c) for c in range(len(weights))]
            assert list(il.consumed_at(states[j], picks, offset)) == expected


@st.composite
def epochs(draw):
    """Weights, a block size, an epoch length (shorter than a block too) and an optional shorter first epoch."""
    weights, block, _ = draw(mixtures())
    length = draw(st.integers(1, 6 * block + 5))
    return weights, block, length, draw(st.none() | st.integers(1, length))


def _epochs(weights, block, length, first, count=4):
    """(segments, component of each sample, its component sample index) over `count` epochs, walked block by block."""
    segments = Segments(units(weights), block, 7, [5] * len(weights), length, first)
    walker, comps, ks = Walker(segments), [], []
    end = segments.start(count).start
    position = segments.origin
    while position < end:
        state, picks = walker.at(segments.start(0), position)
        il = segments.interleave(state)
        c, k = _locate(il, state, picks)
        comps.append(c)
        ks.append(k)
        position = state.start + il.block
    return segments, np.concatenate(comps), np.concatenate(ks)


@settings(max_examples=150, deadline=None)
@given(epochs())
def test_epochs_hold_exact_quotas_and_start_where_the_walk_reaches(setup):
    weights, block, length, first = setup
    segments, comps, ks = _epochs(weights, block, length, first)
    w, n = np.asarray(weights), len(weights)
    cum = np.vstack([np.zeros(n), np.cumsum(np.eye(n)[comps], axis=0)])
    starts = [segments.start(j).start - segments.origin for j in range(5)]
    assert starts == [0, *(((first or length) + j * length) for j in range(4))]
    for j in range(4):
        held = cum[starts[j + 1]] - cum[starts[j]]
        assert held.tolist() == list(segments.epoch(j).quota)  # exact quotas, each within one sample of its share
        assert np.all(np.abs(held - w * (starts[j + 1] - starts[j])) < 1 + EPS)
        assert list(segments.start(j).consumed) == (cum[starts[j]] + 5).tolist()  # closed form == the walk
        if j and first is None:  # Pfair over epochs: every epoch boundary within one sample of everything before
            assert np.all(np.abs(cum[starts[j]] - w * starts[j]) < 1 + EPS)
    for c in range(n):  # numbered in stream order, from where the segments began
        assert np.array_equal(ks[comps == c], 5 + np.arange(np.count_nonzero(comps == c)))
    windows = _window_counts(comps, n, block)
    for start, deviation in enumerate(np.abs(windows - w * block).max(axis=1)):
        j = max(i for i in range(4) if starts[i] <= start)
        inside = start + block <= starts[j] + segments.epoch(j).blocks * block
        assert deviation < (1 if inside else 3) + EPS, (start, deviation)
    for size in range(1, min(len(comps), 3 * block + 2)):
        assert np.all(np.abs(_window_counts(comps, n, size) - w * size) < 4)


@settings(max_examples=60, deadline=None)
@given(epochs(), st.data())
def test_a_walk_from_any_block_finds_the_same_states(setup, data):
    weights, block, length, first = setup
    segments, _, _ = _epochs(weights, block, length, first)
    walked = Walker(segments)
    end = segments.start(4).start
    for _ in range(5):
        position = data.draw(st.integers(segments.origin, end - 1))
        truth = walked.at(segments.start(0), position)
        begin = data.draw(st.integers(segments.origin, position))
        state, _ = Walker(segments).at(segments.start(0), begin)
        assert Walker(segments).at(state, position) == truth
        segments.check(truth[0])


def test_an_epoch_start_costs_one_pd2_step_per_epoch_before_it_not_a_walk_through_its_samples(monkeypatch):
    steps = []
    real = Interleave.picks
    monkeypatch.setattr(Interleave, "picks", lambda self, state: steps.append(self.block) or real(self, state))
    length = (1 << 48) // 2048  # the largest epoch a mixture file may ask for, at seq_len 2048: 33M blocks of 4,096
    segments = Segments(units([0.6, 0.3, 0.1]), 4096, 0, [0, 0, 0], length)
    state = segments.start(3)
    assert state.start == 3 * length and sum(state.consumed) == 3 * length
    assert np.all(np.abs(np.asarray(state.consumed) - np.array([0.6, 0.3, 0.1]) * 3 * length) < 1)
    assert steps == [length] * 3  # three steps of the epoch-level PD2, none of a block
    assert sum(segments.epoch(3).quota) == length and steps == [length] * 4


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=7))
def test_edf_layout_keeps_every_prefix_within_one_item(counts):
    slots = sum(counts)
    if not slots:
        return
    task, index = edf_layout(counts, slots)
    for x, m in enumerate(counts):
        mine = task == x
        assert np.array_equal(index[mine], np.arange(m))
        prefix = np.cumsum(mine)
        assert np.all(np.abs(prefix - m * np.arange(1, slots + 1) / slots) < 1)


def test_weights_become_exact_units():
    assert sum(units([0.6, 0.3, 0.1])) == UNIT
    assert units([1.0]) == (UNIT,)
    il = Interleave(units([0.6, 0.3, 0.1]), 256)
    assert il.base == (153, 76, 25) and il.extras == 2
