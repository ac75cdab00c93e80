r"""A torchrun entry point: REPS passes over a remote dataset, each into a fresh shared cache, by every rank through
TokenDataLoader with 2 workers; rank SLOW_RANK sleeps SLOW seconds per batch, so it lags the other by many windows.
Ranks meet once after their first batch (as DDP's first all-reduce makes them) and between passes; each rank logs
the (shard, start) of every sample it trains on, per pass.

    torchrun --standalone --nproc_per_node=2 tests/support/lagging_rank.py \
        URL CACHE BUDGET OUT SIZES REPS SLOW_RANK SLOW

S3 credentials and endpoint come from LAGGING_STORE_OPTIONS (JSON), if set.
"""

import json
import os
import shutil
import sys
import time

import torch.distributed as dist

from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.positional import samples_of

OPTIONS = dict(seq_len=16, batch_size=2, window_shards=1, batches_per_transfer=2)


def main(url: str, cache: str, budget: int, out: str, sizes: list[int], reps: int, slow_rank: int, slow: float) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    store_options = json.loads(os.environ.get("LAGGING_STORE_OPTIONS", "{}"))
    passes = []
    for rep in range(reps):
        if rank == 0:
            shutil.rmtree(cache, ignore_errors=True)  # a fresh node for every pass
        dist.barrier()
        ds = TorchTokenDataset(
            url, seed=rep, cache_dir=cache, disk_budget=budget, store_options=store_options, **OPTIONS
        )
        batches = iter(TokenDataLoader(ds, num_workers=2))
        served = [samples_of(next(batches), sizes)]
        dist.barrier()
        for batch in batches:
            served.append(samples_of(batch, sizes))
            if rank == slow_rank:
                time.sleep(slow)  # this rank's "GPU" is slower
        passes.append(served)
        dist.barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(passes, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    url, cache, budget, out, sizes, reps, slow_rank, slow = sys.argv[1:9]
    main(url, cache, int(budget), out, json.loads(sizes), int(reps), int(slow_rank), float(slow))
