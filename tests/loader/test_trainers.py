"""docs/loader.md's "With your trainer" snippets run verbatim at 2 processes under torchrun (gloo on CPU): accelerate,
the Hugging Face Trainer, Lightning's Trainer and Lightning Fabric, over a dataset and over a mixture, each SIGKILLed
on rank 1 in epoch 0 and on rank 0 at the first step of epoch 1, then resumed: every step of every rank trains on
exactly the batch the uninterrupted stream gives it there."""

import random

import numpy as np
import pytest

from tests.support.mixture_files import Part, write_components, write_mixture
from tests.support.positional import write_positional
from tests.support.training import check_replayed, read_log, snippet, train, uninterrupted

pytestmark = pytest.mark.system

SIZES = [int(n) for n in np.random.default_rng(17).integers(20_000, 60_000, size=16)]
PARTS = [  # a mixture's components: positional shards of 2,500-9,999 tokens (a sample is 2,049)
    Part(name, tuple(int(n) for n in np.random.default_rng(i).integers(2_500, 10_000, size=24)), weight, i)
    for i, (name, weight) in enumerate([("web", 0.5), ("code", 0.3), ("math", 0.2)])
]
MIXTURE_SIZES = {p.index: p.sizes for p in PARTS}
FOR_TRANSFORMERS = """
class ForTrainer(torch.nn.Module):
    '''The logging model as a transformers model answers: a dict with the loss.'''

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids, labels):
        return {"loss": self.net(input_ids, labels)}


model = ForTrainer(net)
"""


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """{source: (url, sizes)}: a positional dataset, and a mixture of three positional components (~400k tokens per
    epoch: 24 steps of 2 x 8 samples of 2,048 tokens)."""
    root = tmp_path_factory.mktemp("positional")
    write_positional(root, SIZES)
    store = write_components(tmp_path_factory.mktemp("mixture"), PARTS)
    return {"dataset": (str(root), SIZES), "mixture": (write_mixture(store, "blend", PARTS, 400_000), MIXTURE_SIZES)}


@pytest.mark.parametrize("source", ["dataset", "mixture"])
@pytest.mark.parametrize("name", ["accelerate", "hf-trainer", "lightning", "fabric"])
def test_a_snippet_survives_sigkill_and_trains_on_the_stream(sources, tmp_path, monkeypatch, name, source):
    url, sizes = sources[source]
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")  # what `accelerate launch --cpu` sets: a process group on CPU
    run_name = f"run-{name}"  # the script's file name: never the name of a package it imports (accelerate.py)
    code = (FOR_TRANSFORMERS if name == "hf-trainer" else "") + snippet("docs/loader.md", name)
    references = [uninterrupted(url, sizes, rank, 2) for rank in range(2)]
    steps = len(references[0])
    assert steps == len(references[1]) and steps > 20
    for kill_at, kill_rank in [(random.Random(5).randrange(9, steps // 2), 1), (steps // 2 + 1, 0)]:
        run = train(code, url, sizes, tmp_path, run_name, kill_at, kill_rank, world=2, init=False)
        assert run.returncode != 0, run.stderr[-3000:]
        assert "SIGKILL" in run.stderr or "Signals.SIGKILL" in run.stderr or "exitcode  : -9" in run.stderr, run.stderr[
            -3000:
        ]
    final = train(code, url, sizes, tmp_path, run_name, world=2, init=False)
    assert final.returncode == 0, final.stderr[-3000:]
    for rank in range(2):
        check_replayed(read_log(tmp_path, run_name, rank), references[rank])
