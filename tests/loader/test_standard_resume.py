"""docs/loader.md's resume snippets run verbatim: the StatefulDataLoader loop SIGKILLed at given steps trains on exactly
the uninterrupted stream; a DCP checkpoint of model, optimizer and stream, saved by a 2-rank gloo run and loaded by a
fresh one, continues with the uninterrupted run's batches and ends with its parameters, bit for bit."""

import json
import random
import shutil
import signal

import numpy as np
import pytest

from tests.support.positional import write_positional
from tests.support.training import check_replayed, read_log, snippet, train, uninterrupted

pytestmark = pytest.mark.system

SIZES = [int(n) for n in np.random.default_rng(17).integers(20_000, 60_000, size=16)]
FINAL = """
with open(log_path + ".final", "w") as final:  # the parameters the run ended with
    json.dump([p.tolist() for p in net.parameters()], final)
"""


@pytest.fixture
def url(tmp_path):
    write_positional(tmp_path / "pub", SIZES)
    return str(tmp_path / "pub")


def test_the_stateful_dataloader_snippet_survives_sigkill(url, tmp_path):
    code = snippet("docs/loader.md", "stateful-dataloader")
    reference = uninterrupted(url, SIZES)
    steps = len(reference)
    kills = [random.Random(11).randrange(8, steps // 2), steps // 2 + 1]  # mid-epoch 0, and the first step of epoch 1
    for kill_at in kills:
        run = train(code, url, SIZES, tmp_path, "sdl", kill_at)
        assert run.returncode == -signal.SIGKILL, run.stderr[-3000:]
    final = train(code, url, SIZES, tmp_path, "sdl")
    assert final.returncode == 0, final.stderr[-3000:]
    check_replayed(read_log(tmp_path, "sdl"), reference)


def test_a_dcp_checkpoint_restores_model_optimizer_and_stream_in_a_two_rank_run(url, tmp_path):
    code = snippet("docs/loader.md", "dcp") + FINAL
    whole = train(code, url, SIZES, tmp_path, "dcp", world=2, init=False, log="whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    saved = sorted(int(p.parent.name[5:]) for p in (tmp_path / "dcp.ckpt").glob("step-*/.metadata"))
    assert len(saved) > 2
    restore = random.Random(7).choice(saved[:-1])
    for later in saved[saved.index(restore) + 1 :]:  # as if the run had stopped right after saving at `restore`
        shutil.rmtree(tmp_path / "dcp.ckpt" / f"step-{later}")
    resumed = train(code, url, SIZES, tmp_path, "dcp", world=2, init=False, log="resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for rank in range(2):
        trained = read_log(tmp_path, "whole", rank)
        assert {step: rows for step, rows in trained} == uninterrupted(url, SIZES, rank, 2)
        assert read_log(tmp_path, "resumed", rank) == [entry for entry in trained if entry[0] > restore]
        ends = [json.loads((tmp_path / f"{run}-{rank}.log.final").read_text()) for run in ("whole", "resumed")]
        assert ends[0] == ends[1]  # the restored optimizer and model reach the same parameters
