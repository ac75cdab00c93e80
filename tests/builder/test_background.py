"""Background work for the hot path: in order, bounded, and an error stops the caller at its next step."""

import threading
import time

import pytest

from shard_assets.lib.background import Background, prefetched


def test_prefetched_items_come_in_order_from_another_thread_and_stay_bounded():
    made, threads = [], set()

    def items():
        for i in range(20):
            made.append(i)
            threads.add(threading.get_ident())
            yield i

    seen = []
    for item in prefetched(items(), depth=2):
        time.sleep(0.002)
        assert len(made) <= item + 3  # never more than `depth` (+ the one being made) ahead
        seen.append(item)
    assert seen == list(range(20)) and threading.get_ident() not in threads


def test_a_prefetch_error_is_raised_in_the_consumer_after_the_items_before_it():
    def items():
        yield 1
        raise OSError("bad page in r.parquet")

    got = []
    with pytest.raises(OSError, match="bad page"):
        for item in prefetched(items(), depth=3):
            got.append(item)
    assert got == [1]


def test_a_failed_call_stops_the_next_submit_and_later_calls_do_not_run():
    ran, gate = [], threading.Event()

    def fail():
        gate.wait(5)
        raise ValueError("differs")

    work = Background("t", depth=2)
    work.submit(fail)
    work.submit(ran.append, 1)
    gate.set()
    with pytest.raises(ValueError, match="differs"):  # the queue is full: submit collects the failed call
        work.submit(ran.append, 2)
    work.close()
    assert 2 not in ran


def test_drain_waits_for_every_call_in_order():
    out = []
    work = Background("t", depth=4)
    for i in range(10):
        work.submit(lambda i=i: (time.sleep(0.001), out.append(i)))
    work.drain()
    work.close()
    assert out == list(range(10))
