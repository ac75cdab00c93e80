"""The README's training loop, run verbatim: SIGKILLed at given steps and restarted from its own checkpoints, every
step trains on exactly the batch the uninterrupted run trained on, in one process and under torchrun with 2 ranks."""

import random
import signal

import numpy as np
import pytest

from tests.support.positional import write_positional
from tests.support.training import check_replayed, read_log, snippet, train, uninterrupted, writers

pytestmark = pytest.mark.system

SIZES = [int(n) for n in np.random.default_rng(17).integers(20_000, 60_000, size=16)]


def readme_loop() -> str:
    return snippet("README.md", "training-loop")


def test_the_readme_loop_survives_sigkill_and_trains_on_the_uninterrupted_stream(tmp_path):
    write_positional(tmp_path / "pub", SIZES)
    url = str(tmp_path / "pub")
    done = train(readme_loop(), url, SIZES, tmp_path, "whole")
    assert done.returncode == 0, done.stderr[-3000:]
    reference = {step: rows for step, rows in read_log(tmp_path, "whole")}
    steps = len(reference)
    assert sorted(reference) == list(range(1, steps + 1)) and steps > 40
    kills = sorted(random.Random(3).sample(range(2, steps), 3)) + [steps // 2 + 1]  # and the first step of epoch 1
    for kill_at in sorted(set(kills)):
        run = train(readme_loop(), url, SIZES, tmp_path, "killed", kill_at)
        assert run.returncode == -signal.SIGKILL, run.stderr[-3000:]
    final = train(readme_loop(), url, SIZES, tmp_path, "killed")
    assert final.returncode == 0, final.stderr[-3000:]
    check_replayed(read_log(tmp_path, "killed"), reference)


def test_the_readme_loop_under_torchrun_with_two_ranks_survives_sigkill(tmp_path):
    """Rank 1 killed in epoch 0, then rank 0 (which saves) at the first step of epoch 1; torchrun stops the other rank
    each time; the restarted runs train every rank on exactly its uninterrupted stream, and one rank writes each
    checkpoint path (two ranks writing one path race: the .tmp one moved is gone for the other)."""
    write_positional(tmp_path / "pub", SIZES)
    url = str(tmp_path / "pub")
    references = [uninterrupted(url, SIZES, rank, 2, disk_budget="200GB") for rank in range(2)]  # the README's options
    steps = len(references[0])
    assert steps == len(references[1]) and steps > 20
    for kill_at, kill_rank in [(random.Random(5).randrange(8, steps // 2), 1), (steps // 2 + 1, 0)]:
        run = train(readme_loop(), url, SIZES, tmp_path, "ranks", kill_at, kill_rank, world=2)
        assert run.returncode != 0, run.stderr[-3000:]
    final = train(readme_loop(), url, SIZES, tmp_path, "ranks", world=2)
    assert final.returncode == 0, final.stderr[-3000:]
    for rank in range(2):
        check_replayed(read_log(tmp_path, "ranks", rank), references[rank])
    written = writers(tmp_path, "ranks", 2)
    assert written and all(len(ranks) == 1 for ranks in written.values()), written
