"""The price of the standard resume stack: TorchTokenDataset's throughput under torchdata's StatefulDataLoader (one
batch per item, with 0 and 2 workers) against TokenDataLoader (groups in shared slots, 2 workers), interleaved over
REPS repetitions and reported as medians of per-repetition ratios with their min-max spread."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from .datasets import make_dataset
from .sizes import Size, get_size

B, S = 8, 2048
REPS = 5
VARIANTS = ("token_2_workers", "stateful_0_workers", "stateful_2_workers")


def _loader(root: Path, variant: str):
    from torchdata.stateful_dataloader import StatefulDataLoader

    from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset

    ds = TorchTokenDataset(str(root), seq_len=S, batch_size=B, window_shards=2)
    if variant == "token_2_workers":
        return ds, TokenDataLoader(ds, num_workers=2, prefetch_factor=4, persistent_workers=True)
    workers = 2 if variant == "stateful_2_workers" else 0
    return ds, StatefulDataLoader(
        ds,
        batch_size=None,
        num_workers=workers,
        **({"prefetch_factor": 4, "persistent_workers": True} if workers else {}),
    )


def _epoch(ds, loader, epoch: int) -> float:
    ds.set_epoch(epoch)
    started, n = time.perf_counter(), sum(1 for _ in loader)
    return n * B * S / (time.perf_counter() - started)


def run(size: Size | str, work: Path) -> dict:
    try:
        import torchdata  # noqa: F401
    except ImportError:
        return {"skipped": "torchdata is not installed (pip install torchdata)"}
    size = get_size(size) if isinstance(size, str) else size
    root = work / "dataset"
    make_dataset(root, size.loader_tokens, shards=8)
    loaders = {v: _loader(root, v) for v in VARIANTS}
    for ds, loader in loaders.values():
        _epoch(ds, loader, 10_000)  # warm: workers started, page cache touched
    rows = [{v: _epoch(*loaders[v], rep) for v in VARIANTS} for rep in range(REPS)]
    result = {"tokens": size.loader_tokens, "reps": REPS, "per_rep": rows}
    for v in VARIANTS:
        rates, ratios = [r[v] for r in rows], [r[v] / r["token_2_workers"] for r in rows]
        result[v] = float(np.median(rates))
        result[f"{v}_of_token"], result[f"{v}_of_token_min"], result[f"{v}_of_token_max"] = (
            float(np.median(ratios)),
            min(ratios),
            max(ratios),
        )
    result["summary"] = [
        {
            "figure": (
                f"{v.replace('_', ' ')}, tokens/s; of TokenDataLoader (median, min-max of {REPS} interleaved reps)"
            ),
            "value": (
                f"{result[v] / 1e6:.1f}M; {result[f'{v}_of_token']:.3f} "
                f"({result[f'{v}_of_token_min']:.3f}-{result[f'{v}_of_token_max']:.3f})"
            ),
        }
        for v in VARIANTS
    ]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_resume_paths", description=__doc__)
    parser.add_argument("--size", default="small", help="small, medium or large")
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / "results" / "work" / "resume_paths")
    args = parser.parse_args(argv)
    result = run(args.size, args.work)
    print(json.dumps({k: v for k, v in result.items() if k != "per_rep"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
