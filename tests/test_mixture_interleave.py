"""Property tests of the mixture interleave: for random weights and block sizes, every block holds floor or ceil of
each component's share, so does every run of one block's length at any offset, each component's count at a block
boundary is within one sample of its share of everything before (Pfair), any window at all is within 4, each
component's samples are numbered 0, 1, 2, ... in stream order, and the walk is the same from any block it passes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_loader.mixture.interleave import UNIT, BlockState, Interleave, Walker, edf_layout, units

EPS = 1e-6  # weights are exact to 2**-40 of a block; the bounds below are strict up to that


@st.composite
def mixtures(draw):
    n = draw(st.integers(1, 6))
    raw = draw(st.lists(st.floats(0.001, 1.0), min_size=n, max_size=n))
    weights = [w / sum(raw) for w in raw]
    return weights, draw(st.integers(1, 120)), draw(st.integers(1, 40))


def _stream(weights, block, blocks):
    """(component of each sample, its component sample index, the states at block starts) over `blocks` blocks."""
    il = Interleave(units(weights), block)
    state, comps, ks, states = BlockState.origin(0, [0] * len(weights)), [], [], []
    for _ in range(blocks):
        states.append(state)
        picks = il.picks(state)
        c, k = il.locate(state, picks, np.arange(block))
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
    weights, block, blocks = setup
    il, comps, ks, states = _stream(weights, block, blocks)
    w = np.asarray(weights)
    counts = _window_counts(comps, len(w), block)  # every offset, not only block starts
    assert np.all(np.abs(counts - w * block) < 1 + EPS)


@settings(max_examples=150, deadline=None)
@given(mixtures())
def test_long_runs_stay_exact_and_short_windows_close(setup):
    weights, block, blocks = setup
    il, comps, ks, states = _stream(weights, block, blocks)
    w = np.asarray(weights)
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


@settings(max_examples=60, deadline=None)
@given(mixtures(), st.data())
def test_a_walk_from_any_block_finds_the_same_states(setup, data):
    weights, block, blocks = setup
    il, comps, ks, states = _stream(weights, block, blocks)
    walker = Walker(il)
    for _ in range(5):
        start = data.draw(st.integers(0, blocks - 1))
        position = data.draw(st.integers(start * block, blocks * block - 1))
        state, picks = walker.at(states[start], position)
        assert state == states[position // block]
        assert il.origin(state) == states[0]


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
