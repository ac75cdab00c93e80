"""A torchrun entry point: every rank reads an epoch of a positional dataset through TokenDataLoader,
logs each batch it trains on, checkpoints the stream, and can SIGKILL itself at a given step
(KILL_AT -1: right after the epoch's last batch, as a crash at the epoch's end).

    torchrun --standalone --nproc_per_node=N tests/support/dist_reader.py URL OUT SIZES WORKERS METHOD EVERY KILL_AT
"""

import json
import os
import signal
import sys

import torch.distributed as dist

from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.positional import samples_of

OPTIONS = dict(seq_len=16, batch_size=2, seed=4, window_shards=2, batches_per_transfer=2)


def main(url: str, out: str, sizes: list[int], workers: int, method: str, every: int, kill_at: int) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = TokenDataLoader(
        TorchTokenDataset(url, **OPTIONS), num_workers=workers, multiprocessing_context=method if workers else None
    )
    checkpoint, step = os.path.join(out, "checkpoint.json"), 0
    if os.path.exists(checkpoint):
        saved = json.load(open(checkpoint))
        loader.load_state_dict(saved["data"])
        step = saved["step"]
    with open(os.path.join(out, f"run{os.environ['RUN']}-rank{rank}.log"), "a") as log:
        log.write(json.dumps({"world_size": dist.get_world_size(), "batches": len(loader)}) + "\n")
        for batch in loader:
            step += 1
            log.write(json.dumps([step, samples_of(batch, sizes)]) + "\n")
            log.flush()
            if every and step % every == 0 and rank == 0:
                with open(checkpoint + ".tmp", "w") as f:
                    json.dump({"data": loader.state_dict(), "step": step}, f)
                os.replace(checkpoint + ".tmp", checkpoint)
            if step == kill_at and rank == 0:
                os.kill(os.getpid(), signal.SIGKILL)
    if kill_at < 0 and rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.destroy_process_group()


if __name__ == "__main__":
    url, out, sizes, workers, method, every, kill_at = sys.argv[1:8]
    main(url, out, json.loads(sizes), int(workers), method, int(every), int(kill_at))
