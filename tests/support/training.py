"""Running a documented training loop verbatim: a prelude that defines the loop's free names (url, ckpt, model/net,
epochs, every, device) with a model that logs what it trains on and SIGKILLs itself at a given step, a launcher (one
process or torchrun), and the checks that every step trained on the uninterrupted stream's batch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from shard_loader import TokenDataset
from tests.support import mixture_files, positional
from tests.support.patience import HUNG

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 2

PRELUDE = f'''
import json, os, signal, sys
import torch
import torch.distributed as dist
from tests.support.patience import HUNG
from tests.support.training import rows_of
url, ckpt, log_path, every, kill_at, kill_rank, sizes, init = sys.argv[1:9]
every, kill_at, kill_rank, sizes, epochs, device = int(every), int(kill_at), int(kill_rank), \
json.loads(sizes), {EPOCHS}, "cpu"
rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))  # LOCAL_RANK: Lightning's own launcher
log_path = log_path.format(rank=rank)
if init == "1":  # under torchrun, as a DDP trainer starts (unless the loop starts it itself)
    dist.init_process_group("gloo")
_save = torch.save


def _recorded_save(obj, path, *args, **kwargs):
    """torch.save, recording which rank wrote which path: two ranks writing one path race (the .tmp vanishes)."""
    with open(log_path + ".writes", "a") as writes:
        writes.write(json.dumps([rank, str(path)]) + "\\n")
    return _save(obj, path, *args, **kwargs)


torch.save = _recorded_save


class Model(torch.nn.Module):
    """A small model that logs what it trains on at each of its steps (its step count is part of its state),
    all-reduces once per step as DDP does (no rank runs ahead of another), and SIGKILLs its own process at step
    kill_at on rank kill_rank."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, input_ids, labels):
        self.steps += 1
        with open(log_path, "a") as log:
            log.write(json.dumps([int(self.steps), rows_of({{"input_ids": input_ids, "labels": labels}}, \
sizes)]) + "\\n")
        if dist.is_initialized():
            dist.all_reduce(torch.zeros(1))
        if int(self.steps) == kill_at and rank == kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.stack([input_ids.float().mean(1), input_ids.float().std(1), labels.float().max(1).values], 1) / 1e6
        return self.linear(x).pow(2).mean()


torch.manual_seed(0)
model = net = Model()
'''


Sizes = list[int] | dict[int, tuple[int, ...]]  # a positional dataset's shard sizes, or a mixture's by component


def rows_of(batch: dict, sizes: Sizes | dict[str, list[int]]) -> list[tuple[int, ...]]:
    """Where each row of a batch comes from, every token checked: (shard, start) of a positional dataset, or
    (component, shard, start) of a mixture of them (its sizes by component; JSON makes the keys strings)."""
    if isinstance(sizes, list):
        return positional.samples_of(batch, sizes)
    return mixture_files.samples_of(batch, {int(c): tuple(s) for c, s in sizes.items()})


def snippet(doc: str, name: str) -> str:
    """The python block between `<!-- name:start -->` and `<!-- name:end -->` in a markdown file of the repository."""
    text = (ROOT / doc).read_text()
    return re.search(rf"<!-- {name}:start -->\n```python\n(.*?)```\n<!-- {name}:end -->", text, re.S).group(1)


def train(
    code: str,
    url: str,
    sizes: Sizes,
    tmp: Path,
    name: str,
    kill_at: int = 0,
    kill_rank: int = 0,
    world: int = 0,
    init: bool = True,
    every: int = 7,
    log: str | None = None,
) -> subprocess.CompletedProcess:
    """Run PRELUDE + code with checkpoint `tmp/name.ckpt` and logs `tmp/<log or name>-<rank>.log`: in one process, or
    under torchrun with `world` ranks (which start a gloo process group first when `init`)."""
    args = [
        url,
        str(tmp / f"{name}.ckpt"),
        str(tmp / f"{log or name}-{{rank}}.log"),
        str(every),
        str(kill_at),
        str(kill_rank),
        json.dumps(sizes),
        "1" if init and world else "0",
    ]
    script = tmp / f"{name}.py"
    script.write_text(PRELUDE + code)
    launch = torchrun(world) if world else [sys.executable]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*launch, str(script), *args], cwd=ROOT, env=env, timeout=HUNG, capture_output=True, text=True
    )


def torchrun(world: int) -> list[str]:
    """The launcher a test's ranks start under: torchrun on this host with `world` processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"]


def read_log(tmp: Path, name: str, rank: int = 0) -> list:
    """[step, samples] lines a run's model logged on one rank."""
    path = tmp / f"{name}-{rank}.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def writers(tmp: Path, name: str, world: int) -> dict[str, set[int]]:
    """Which ranks wrote each path with torch.save."""
    out: dict[str, set[int]] = {}
    for rank in range(world):
        for writer, written in (json.loads(line) for line in _lines(tmp / f"{name}-{rank}.log.writes")):
            out.setdefault(written, set()).add(writer)
    return out


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def uninterrupted(url: str, sizes: Sizes, rank: int = 0, world: int = 1, **options) -> dict[int, list]:
    """{step: samples} of one rank over EPOCHS epochs with the snippets' options, from the numpy path."""
    ds = TokenDataset(url, seq_len=2048, batch_size=8, seed=1234, rank=rank, world_size=world, **options)
    steps = []
    for epoch in range(EPOCHS):
        ds.set_epoch(epoch)
        steps += [[list(s) for s in rows_of(b, sizes)] for b in ds]
    return {n: rows for n, rows in enumerate(steps, 1)}


def check_exact(trained: list, reference: dict[int, list]) -> None:
    """Every step trained once, on the uninterrupted run's batch for that step."""
    assert [step for step, _ in trained] == list(reference)
    assert all(rows == reference[step] for step, rows in trained)


def check_replayed(trained: list, reference: dict[int, list]) -> None:
    """Every step trained on the uninterrupted run's batch for that step, every step was trained, and the kills
    replayed some steps (those after the last checkpoint)."""
    assert {step for step, _ in trained} == set(reference)
    assert all(rows == reference[step] for step, rows in trained)
    assert len(trained) > len(reference)
