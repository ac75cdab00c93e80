"""Loader throughput, side by side in one run: shard_loader's numpy and torch paths against a
ceiling (each batch's random 2049-token rows of an in-RAM array gathered in one call and widened
into a fresh int64 array), a plain row-by-row copy the ceiling must beat, and a naive memmap
loader, interleaved over REPS repetitions and reported as medians of per-repetition ratios
with their min-max spread; the trainer's main-process CPU per batch on the torch path;
LitData; peak RSS at 1x and 10x the window; a DataLoader worker's peak unique memory (USS) with 10
and 30,000 shards (fork and spawn); time to first batch with 10 and 30,000 shards; waits at window
swaps over a throttled link."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import shard_loader
from shard_loader import TokenDataset

from .datasets import make_dataset
from .machine import PEAK_RSS_SNIPPET
from .run import write_result
from .sizes import Size, get_size

B, S = 8, 2048


REPS = 9
EPOCHS_PER_REP = (
    2  # each variant serves this many epochs' worth of batches per repetition: short, so variants run close together
)
MANY_SHARDS = 30_000
BOUNDED = ("row_copy", "naive", "numpy", "torch_1_worker", "torch_2_workers")  # what the ceiling bounds


def _rate(batches: int, seconds: float) -> float:
    return batches * B * S / seconds


def ceiling(tokens: np.ndarray, starts: np.ndarray) -> float:
    """The ceiling: per batch, B random (S+1)-token rows of an in-RAM array gathered in one call (rows of a
    sliding-window view) and widened into a fresh int64 array, which a tensor wraps for free; the starts are
    drawn beforehand, as the loader's plan is. The fastest plain copy measured here (docs/loader.md)."""
    rows = np.lib.stride_tricks.sliding_window_view(tokens, S + 1)
    started = time.perf_counter()
    for batch in starts:
        rows[batch].astype(np.int64)
    return _rate(len(starts), time.perf_counter() - started)


def row_copy(tokens: np.ndarray, starts: np.ndarray) -> float:
    """A plain copy the ceiling must beat: each row copied (and widened) on its own into a fresh int64 array,
    as the loader fills its batches; the same starts as the ceiling."""
    started = time.perf_counter()
    for batch in starts.tolist():
        out = np.empty((B, S + 1), dtype=np.int64)
        for r, s in enumerate(batch):
            out[r] = tokens[s : s + S + 1]
    return _rate(len(starts), time.perf_counter() - started)


def naive(files: list[np.ndarray], n: int, rng) -> float:
    """A naive in-process loader: a random memmapped shard, random offsets, np.stack of inputs and labels."""
    import torch

    started = time.perf_counter()
    for _ in range(n):
        mm = files[rng.integers(len(files))]
        starts = rng.integers(0, len(mm) - S - 1, size=B)
        x = torch.from_numpy(np.stack([mm[s : s + S].astype(np.int64) for s in starts]))
        y = torch.from_numpy(np.stack([mm[s + 1 : s + 1 + S].astype(np.int64) for s in starts]))
        del x, y
    return _rate(n, time.perf_counter() - started)


class NumpyPath:
    """shard_loader's numpy path: EPOCHS_PER_REP epochs per repetition."""

    def __init__(self, root: Path):
        self.ds = TokenDataset(str(root), seq_len=S, batch_size=B, window_shards=2)

    def epochs(self, first: int) -> tuple[float, int]:
        started, n = time.perf_counter(), 0
        for epoch in range(first, first + EPOCHS_PER_REP):
            self.ds.set_epoch(epoch)
            n += sum(1 for _ in self.ds)
        return _rate(n, time.perf_counter() - started), n


class TorchPath:
    """shard_loader's DataLoader path with persistent workers, warmed by a first epoch; also the main process's
    CPU time per batch, all its threads (what the trainer pays, whatever the workers do)."""

    def __init__(self, root: Path, workers: int):
        from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset

        self.ds = TorchTokenDataset(str(root), seq_len=S, batch_size=B, window_shards=2)
        self.loader = TokenDataLoader(self.ds, num_workers=workers, prefetch_factor=4, persistent_workers=True)
        self.epochs(10_000)  # warm: workers started, slots and page cache touched

    def epochs(self, first: int) -> tuple[float, float]:
        started, cpu, n = time.perf_counter(), time.process_time(), 0
        for epoch in range(first, first + EPOCHS_PER_REP):
            self.ds.set_epoch(epoch)
            for _ in self.loader:
                n += 1
        return _rate(n, time.perf_counter() - started), (time.process_time() - cpu) / n * 1e6


def throughput(root: Path, files: list[np.ndarray], reps: int = REPS) -> dict:
    """Every variant once per repetition, interleaved, each right after a measurement of the ceiling (the
    repetition's ceiling is the fastest of those); medians (and min-max) of rates and of per-repetition ratios."""
    tokens = np.concatenate([np.asarray(f) for f in files])  # in RAM, in the shards' own dtype
    numpy_path, one, two = NumpyPath(root), TorchPath(root, 1), TorchPath(root, 2)
    rng = np.random.default_rng(0)
    n = EPOCHS_PER_REP * len(numpy_path.ds)  # batches per variant per repetition
    rows = []
    for rep in range(reps):
        first = rep * EPOCHS_PER_REP
        starts = rng.integers(0, len(tokens) - S - 1, size=(n, B))
        row, ceilings = {}, []

        def two_workers() -> float:
            rate, row["main_cpu_us_per_batch_2_workers"] = two.epochs(first)
            return rate

        variants = {
            "numpy": lambda: numpy_path.epochs(first)[0],
            "row_copy": lambda: row_copy(tokens, starts),
            "naive": lambda: naive(files, n, rng),
            "torch_1_worker": lambda: one.epochs(first)[0],
            "torch_2_workers": two_workers,
        }
        for name, measure in variants.items():  # the ceiling right before each variant: a burst of load meets both
            ceilings.append(ceiling(tokens, starts))
            row[name] = measure()
        row["ceiling"] = max(ceilings)  # a bound: the fastest of its measurements in this repetition
        rows.append(row)
    out = {"reps": reps, "batches_per_rep": n, "per_rep": rows}

    def stat(f) -> tuple[float, float, float]:
        values = [f(r) for r in rows]
        return float(np.median(values)), float(min(values)), float(max(values))

    for name in (
        "ceiling",
        "row_copy",
        "naive",
        "numpy",
        "torch_1_worker",
        "torch_2_workers",
        "main_cpu_us_per_batch_2_workers",
    ):
        out[name], out[f"{name}_min"], out[f"{name}_max"] = stat(lambda r: r[name])
    for name in BOUNDED:
        for other in ("ceiling", "naive"):
            if name != other:
                key = f"{name}_of_{other}" if other == "ceiling" else f"{name}_vs_{other}"
                out[key], out[f"{key}_min"], out[f"{key}_max"] = stat(lambda r: r[name] / r[other])
    return out


def _litdata_tokens(path: str):
    """LitData's optimize() input function: one shard's tokens as a tensor (module level: workers are spawned)."""
    import torch

    yield torch.from_numpy(np.load(path).astype(np.int32))


def litdata_path(root: Path, work: Path) -> dict:
    """LitData StreamingDataset + TokensLoader(block_size=2049) in-process, batches of 8 stacked to int64."""
    try:
        import torch
        from litdata import StreamingDataset, TokensLoader, optimize
    except ImportError as exc:
        return {
            "skipped": f"litdata not importable here ({exc}); install litdata and lightning-utilities with --no-deps"
        }
    chunks = work / "litdata" / root.name
    version = (root / "manifest.json").read_text()
    if not (chunks / "source-manifest.json").exists() or (chunks / "source-manifest.json").read_text() != version:
        shutil.rmtree(chunks, ignore_errors=True)
        files = sorted(str(p) for p in (root / "tokenized/bench/train").glob("*.npy"))
        optimize(
            fn=_litdata_tokens,
            inputs=files,
            output_dir=str(chunks),
            chunk_size=(S + 1) * 1024,
            item_loader=TokensLoader(),
            num_workers=1,
        )
        (chunks / "source-manifest.json").write_text(version)
    ds = StreamingDataset(str(chunks), item_loader=TokensLoader(block_size=S + 1), shuffle=True, seed=0)
    started, n, rows = time.perf_counter(), 0, []
    for item in ds:
        rows.append(item)
        if len(rows) == B:
            block = torch.stack(rows).long()
            _inputs, _labels, rows, n = block[:, :-1], block[:, 1:], [], n + 1
    return {"tokens_per_s": _rate(n, time.perf_counter() - started), "batches": n}


RSS_SCRIPT = (
    """
import sys
import shard_loader
from shard_loader import TokenDataset
ds = TokenDataset(sys.argv[1], seq_len=2048, batch_size=8, window_shards=int(sys.argv[2]))
for _ in ds:
    pass
"""
    + f"print({PEAK_RSS_SNIPPET})\n"
)

FIRST_BATCH_SCRIPT = """
import sys, time
started = time.perf_counter()
import shard_loader
from shard_loader import TokenDataset
ds = TokenDataset(sys.argv[1], seq_len=2048, batch_size=1, window_shards=1)
next(iter(ds))
print(time.perf_counter() - started)
"""


WORKER_RSS_SCRIPT = """
import sys, psutil
from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
ds = TorchTokenDataset(sys.argv[1], seq_len=2048, batch_size=1, window_shards=1, batches_per_transfer=1)
loader = TokenDataLoader(ds, num_workers=2, persistent_workers=True, multiprocessing_context=sys.argv[2])
peak = 0
for n, _ in enumerate(loader):
    if n % 10 == 0:
        peak = max([peak] + [p.memory_full_info().uss for p in psutil.Process().children()])
    if n == 200:
        break
print(peak)
"""


def _python(script: str, *args) -> float:
    return float(
        subprocess.run(
            [sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, check=True
        ).stdout.split()[-1]
    )


def swap_waits(root: Path) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.http_server import FolderServer

    largest = max(shard_loader.open_manifest(str(root)).manifest.splits["train"].shards.column("npy_size"))
    with FolderServer(root, rate=4 * largest) as server, __import__("tempfile").TemporaryDirectory() as cache:
        ds = TokenDataset(f"{server.url}/manifest.json", seq_len=S, batch_size=B, window_shards=1, cache_dir=cache)
        per_window = len(ds) / len(ds.windows)
        for _ in ds:
            time.sleep(0.5 / per_window)  # consume a window in ~0.5 s; it arrives in ~0.25 s
        ds.close()
    return {
        "first_wait_s": round(ds.stats.waits[0], 3),
        "max_wait_after_first_s": round(max(ds.stats.waits[1:]), 4),
        "windows": len(ds.stats.waits),
    }


def _outran(t: dict) -> int:
    """How many (repetition, variant) pairs ran faster than the ceiling measured beside them."""
    return sum(row[name] > row["ceiling"] for row in t["per_rep"] for name in BOUNDED)


def _versus_litdata(result: dict, t: dict) -> str:
    lit = result["litdata"]
    if "skipped" in lit:
        return f"skipped: {lit['skipped']}"
    rate = lit["tokens_per_s"]
    return f"{rate / 1e6:.0f}M (numpy path {t['numpy'] / rate:.1f}x, torch 1 worker {t['torch_1_worker'] / rate:.1f}x)"


def _size(size: Size | str | int) -> Size:
    """A named size, or an int: the loader dataset's token count on top of the small size."""
    if isinstance(size, Size):
        return size
    if isinstance(size, int):
        return replace(get_size("small"), name=str(size), loader_tokens=size)
    return get_size(size)


def run(size: Size | str | int, work: Path) -> dict:
    """Every loader measurement on datasets kept under `work`; the suite runner calls this."""
    size = _size(size)
    work.mkdir(parents=True, exist_ok=True)
    root = work / "dataset"
    make_dataset(root, size.loader_tokens, shards=8)
    files = [np.load(p, mmap_mode="r") for p in sorted((root / "tokenized/bench/train").glob("*.npy"))]
    for f in files:
        np.asarray(f).sum()  # warm the page cache for every contender
    t = throughput(root, files)
    result = {
        "tokens": size.loader_tokens,
        "batch": f"{B} x {S} int64 input_ids + labels",
        "throughput": t,
        "litdata": litdata_path(root, work),
    }
    windowed = work / "ten_windows"
    make_dataset(windowed, size.loader_tokens, shards=10, seed=1)
    result["peak_rss_dataset_1x_window_bytes"] = _python(RSS_SCRIPT, windowed, 10)
    result["peak_rss_dataset_10x_window_bytes"] = _python(RSS_SCRIPT, windowed, 1)
    few, many = work / "few_shards", work / f"shards_{MANY_SHARDS}"
    make_dataset(few, 10 * 3000, shards=10, doc_len=1000)
    make_dataset(
        many, MANY_SHARDS * 3000, shards=MANY_SHARDS, doc_len=1000
    )  # the public writer and manifest, as a builder writes them
    for method in (
        "fork",
        "spawn",
    ):  # memory a worker holds of its own: its unique set, peak over its first 200 batches
        result[f"worker_uss_10_shards_{method}_bytes"] = _python(WORKER_RSS_SCRIPT, few, method)
        result[f"worker_uss_{MANY_SHARDS}_shards_{method}_bytes"] = _python(WORKER_RSS_SCRIPT, many, method)
    result["first_batch_10_shards_s"] = _python(FIRST_BATCH_SCRIPT, few)
    result[f"first_batch_{MANY_SHARDS}_shards_s"] = _python(FIRST_BATCH_SCRIPT, many)
    result["swap_waits"] = swap_waits(make_dataset(work / "swaps", 8_000_000, shards=6) and work / "swaps")

    def ratio(name: str) -> str:
        spread = lambda key: f"{t[key]:.2f} ({t[key + '_min']:.2f}-{t[key + '_max']:.2f})"  # noqa: E731
        return f"{t[name] / 1e6:.0f}M; {spread(name + '_of_ceiling')} of ceiling; {spread(name + '_vs_naive')}x naive"

    result["summary"] = [
        {
            "figure": (
                f"ceiling / naive, tokens/s (medians of {t['reps']} interleaved reps of {t['batches_per_rep']} batches)"
            ),
            "value": (
                f"{t['ceiling'] / 1e6:.0f}M ({t['ceiling_min'] / 1e6:.0f}-{t['ceiling_max'] / 1e6:.0f}M) / "
                f"{t['naive'] / 1e6:.0f}M"
            ),
        },
        {"figure": "plain row-by-row copy, tokens/s; median (min-max) ratios", "value": ratio("row_copy")},
        {
            "figure": "repetitions where a variant outran the ceiling",
            "value": f"{_outran(t)} of {t['reps'] * len(BOUNDED)} ({t['reps']} reps x {len(BOUNDED)} variants)",
            "target": "0",
        },
        {
            "figure": "numpy path, tokens/s; median (min-max) ratios",
            "value": ratio("numpy"),
            "target": ">= 0.5 of ceiling, >= 2x naive",
        },
        {
            "figure": "torch DataLoader (1 worker), tokens/s; median (min-max) ratios",
            "value": ratio("torch_1_worker"),
            "target": ">= 0.6 of ceiling, >= 2x naive",
        },
        {
            "figure": "torch DataLoader (2 workers), tokens/s; median (min-max) ratios",
            "value": ratio("torch_2_workers"),
            "target": ">= 0.6 of ceiling, >= 2x naive",
        },
        {
            "figure": "main process CPU per batch, all threads (torch, 2 workers)",
            "value": (
                f"{t['main_cpu_us_per_batch_2_workers']:.1f} us "
                f"({t['main_cpu_us_per_batch_2_workers_min']:.1f}-{t['main_cpu_us_per_batch_2_workers_max']:.1f})"
            ),
        },
        {
            "figure": "LitData StreamingDataset + TokensLoader, tokens/s",
            "value": _versus_litdata(result, t),
            "target": "shard_loader >= 3x",
        },
        {
            "figure": "peak RSS, dataset 1x / 10x the window",
            "value": (
                f"{result['peak_rss_dataset_1x_window_bytes'] / 2**20:.0f} MiB / "
                f"{result['peak_rss_dataset_10x_window_bytes'] / 2**20:.0f} MiB"
            ),
        },
        *(
            {
                "figure": f"DataLoader worker peak unique memory (USS, {m}), 10 / {MANY_SHARDS:,} shards",
                "value": (
                    f"{result[f'worker_uss_10_shards_{m}_bytes'] / 2**20:.0f} MiB / "
                    f"{result[f'worker_uss_{MANY_SHARDS}_shards_{m}_bytes'] / 2**20:.0f} MiB"
                ),
                "target": f"< 50 MB at {MANY_SHARDS:,}",
            }
            for m in ("fork", "spawn")
        ),
        {
            "figure": f"first batch, 10 / {MANY_SHARDS:,} local shards",
            "value": (
                f"{result['first_batch_10_shards_s']:.2f} s / {result[f'first_batch_{MANY_SHARDS}_shards_s']:.2f} s"
            ),
        },
        {
            "figure": "wait at swaps after the first window (slow consumer)",
            "value": (
                f"max {result['swap_waits']['max_wait_after_first_s'] * 1000:.1f} ms over "
                f"{result['swap_waits']['windows']} windows (first {result['swap_waits']['first_wait_s']:.2f} s)"
            ),
            "target": "0",
        },
    ]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_loader", description=__doc__)
    parser.add_argument("--size", default="small", help="small, medium, large, or a token count")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "loader.json")
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / "results" / "work" / "loader")
    args = parser.parse_args(argv)
    result = run(int(args.size) if args.size.isdigit() else args.size, args.work)
    write_result(args.out, result, (58, 60))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
