"""Mixture throughput against a single dataset, side by side in one run: a 3-component mixture (two datasets of
`loader_tokens` and one 100x smaller, weights 0.6 / 0.3 / 0.1, one mixture epoch = `loader_tokens`) and the first
component alone, through the numpy path and the torch DataLoader path (2 persistent workers, forked and spawned),
interleaved over REPS repetitions; medians (min-max) of per-repetition ratios, the trainer's main-process CPU per batch
and the workers' (each worker's own process clock, all its threads, read at every group it hands over)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import get_worker_info

from shard_loader import TokenDataset
from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset

from .datasets import make_dataset
from .run import bench_main
from .sizes import Size, get_size

B, S = 8, 2048
REPS = 9
# Each variant serves this many epochs per repetition (about a second at medium): long enough to ride out a busy
# machine's bursts.
EPOCHS_PER_REP = 4
OPTIONS = dict(seq_len=S, batch_size=B, window_shards=2)
WEIGHTS = (0.6, 0.3, 0.1)


def make_store(work: Path, tokens: int) -> tuple[str, str]:
    """(the single dataset's URL, the mixture's URL): three datasets under one store root and a mixture of them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.mixture_files import Part, write_mixture

    store = work / "store"
    sizes = {"web": (tokens, 8), "code": (tokens, 8), "math": (tokens // 100, 1)}  # math: 100x smaller
    for seed, (name, (n, shards)) in enumerate(sizes.items()):
        make_dataset(store / name, n, shards=shards, seed=seed)
    parts = [Part(name, (), w, i) for i, (name, w) in enumerate(zip(sizes, WEIGHTS))]
    return str(store / "web"), write_mixture(store, "bench", parts, tokens_per_epoch=tokens)


class NumpyPath:
    """The numpy path; also its CPU per batch (all threads: the prefetch thread's loads count)."""

    def __init__(self, url: str):
        self.ds = TokenDataset(url, **OPTIONS)

    def epochs(self, first: int) -> tuple[float, float, float]:
        started, cpu, n = time.perf_counter(), time.process_time(), 0
        for epoch in range(first, first + EPOCHS_PER_REP):
            self.ds.set_epoch(epoch)
            n += sum(1 for _ in self.ds)
        return n * B * S / (time.perf_counter() - started), (time.process_time() - cpu) / n * 1e6, 0.0


class ClockedDataset(TorchTokenDataset):
    """A TorchTokenDataset whose workers write their process CPU time (all threads, to the microsecond) into a shared
    tensor before handing over each group: psutil reads a worker's CPU in 10 ms ticks, 3% of a repetition."""

    def __init__(self, url: str, workers: int):
        super().__init__(url, **OPTIONS)
        self.clocks = torch.zeros(workers, dtype=torch.float64).share_memory_()

    def __iter__(self):
        info, clocks = get_worker_info(), self.clocks.numpy()
        for group in super().__iter__():
            if info is not None:
                clocks[info.id] = time.process_time()
            yield group


class TorchPath:
    """The DataLoader path with 2 persistent workers started by `context`, warmed by a first epoch; also the main
    process's CPU per batch (all its threads: what the trainer pays) and the workers' (what the node pays)."""

    def __init__(self, url: str, context: str, workers: int = 2):
        self.ds = ClockedDataset(url, workers)
        self.loader = TokenDataLoader(
            self.ds, num_workers=workers, prefetch_factor=4, persistent_workers=True, multiprocessing_context=context
        )
        self.epochs(10_000)

    def _workers_cpu(self) -> float:
        return float(self.ds.clocks.sum())

    def epochs(self, first: int) -> tuple[float, float, float]:
        started, cpu, workers, n = time.perf_counter(), time.process_time(), self._workers_cpu(), 0
        for epoch in range(first, first + EPOCHS_PER_REP):
            self.ds.set_epoch(epoch)
            for _ in self.loader:
                n += 1
        rate = n * B * S / (time.perf_counter() - started)
        return rate, (time.process_time() - cpu) / n * 1e6, (self._workers_cpu() - workers) / n * 1e6


def throughput(single: str, mixture: str, reps: int = REPS) -> dict:
    """Each variant once per repetition, interleaved (in reverse order every other repetition, so no variant always
    follows the same one); medians (min-max) of rates, CPU and per-repetition ratios."""
    variants = {
        "numpy_single": NumpyPath(single),
        "numpy_mixture": NumpyPath(mixture),
        "torch_single": TorchPath(single, "fork"),
        "torch_mixture": TorchPath(mixture, "fork"),
        "spawn_single": TorchPath(single, "spawn"),
        "spawn_mixture": TorchPath(mixture, "spawn"),
    }
    rows = []
    for rep in range(reps):
        row = {}
        for name, variant in list(variants.items())[:: 1 if rep % 2 == 0 else -1]:  # order reversed every other rep
            row[name], row[f"{name}_cpu_us"], row[f"{name}_workers_cpu_us"] = variant.epochs(rep * EPOCHS_PER_REP)
        rows.append(row)
    out = {"reps": reps, "per_rep": rows}

    def stat(values) -> tuple[float, float, float]:
        return float(np.median(values)), float(min(values)), float(max(values))

    for path in ("numpy", "torch", "spawn"):
        out[f"{path}_single"], out[f"{path}_mixture"] = (
            stat([r[f"{path}_single"] for r in rows])[0],
            stat([r[f"{path}_mixture"] for r in rows])[0],
        )
        out[f"{path}_ratio"] = stat([r[f"{path}_mixture"] / r[f"{path}_single"] for r in rows])
        for cpu in ("cpu_us", "workers_cpu_us") if path != "numpy" else ("cpu_us",):
            out[f"{path}_{cpu}_single"] = stat([r[f"{path}_single_{cpu}"] for r in rows])
            out[f"{path}_{cpu}_mixture"] = stat([r[f"{path}_mixture_{cpu}"] for r in rows])
            out[f"{path}_{cpu}_ratio"] = stat([r[f"{path}_mixture_{cpu}"] / r[f"{path}_single_{cpu}"] for r in rows])
    return out


def _spread(v: tuple[float, float, float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(v[0])} ({fmt.format(v[1])}-{fmt.format(v[2])})"


def run(size: Size | str, work: Path, reps: int = REPS) -> dict:
    """Every mixture measurement on datasets kept under `work`; the suite runner calls this."""
    size = get_size(size) if isinstance(size, str) else size
    work.mkdir(parents=True, exist_ok=True)
    single, mixture = make_store(work, size.loader_tokens)
    for url in (single, mixture):
        for _ in TokenDataset(url, **OPTIONS):  # warm the page cache for both
            pass
    t = throughput(single, mixture, reps)
    result = {"tokens": size.loader_tokens, "batch": f"{B} x {S}", "weights": WEIGHTS, "throughput": t}
    result["summary"] = [
        {
            "figure": (
                f"3-component mixture / single dataset, numpy path (median (min-max) of {t['reps']} interleaved reps)"
            ),
            "value": (
                f"{_spread(t['numpy_ratio'])}; {t['numpy_mixture'] / 1e6:.0f}M vs {t['numpy_single'] / 1e6:.0f}M "
                "tokens/s"
            ),
            "target": ">= 0.9",
        },
        {
            "figure": "3-component mixture / single dataset, torch DataLoader (2 workers)",
            "value": (
                f"{_spread(t['torch_ratio'])}; {t['torch_mixture'] / 1e6:.0f}M vs {t['torch_single'] / 1e6:.0f}M "
                "tokens/s"
            ),
            "target": ">= 0.9",
        },
        {
            "figure": "main process CPU per batch, mixture vs single (torch, 2 workers)",
            "value": (
                f"{_spread(t['torch_cpu_us_mixture'], '{:.1f}')} us vs {_spread(t['torch_cpu_us_single'], '{:.1f}')} "
                f"us; ratio {_spread(t['torch_cpu_us_ratio'])}"
            ),
            "target": "<= 1 (single's)",
        },
        {
            "figure": "CPU per batch, mixture / single: numpy path (all threads)",
            "value": (
                f"{_spread(t['numpy_cpu_us_ratio'])} ({t['numpy_cpu_us_mixture'][0]:.1f} vs "
                f"{t['numpy_cpu_us_single'][0]:.1f} us)"
            ),
        },
        *(
            {
                "figure": f"CPU per batch, mixture / single: torch workers (both, {context})",
                "value": (
                    f"{_spread(t[f'{path}_workers_cpu_us_ratio'])} ({t[f'{path}_workers_cpu_us_mixture'][0]:.1f} vs "
                    f"{t[f'{path}_workers_cpu_us_single'][0]:.1f} us)"
                ),
                "target": "<= 1.1",
            }
            for path, context in (("torch", "fork"), ("spawn", "spawn"))
        ),
    ]
    return result


if __name__ == "__main__":
    raise SystemExit(bench_main("mixture", run, __doc__, REPS, (70, 70)))
