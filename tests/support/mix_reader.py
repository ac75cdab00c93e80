"""A torchrun entry point that trains on a mixture: every rank reads EPOCHS mixture epochs through TokenDataLoader,
logs the (component, shard, start) of every row it trains on (with SIZES {}, for datasets built from real text:
(component, digest of the sample's tokens)), steps in lockstep with the other ranks, checkpoints the stream on rank 0
every EVERY steps, and at step KILL_AT tells the test (a file holding its pid) and waits to be SIGKILLed.

    torchrun --standalone --nproc_per_node=N tests/support/mix_reader.py URL OUT SIZES WORKERS METHOD EVERY KILL_AT
"""

import json
import os
import signal
import sys

import torch.distributed as dist

from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.mixture_files import digests_of, samples_of

OPTIONS = dict(seq_len=16, batch_size=2, seed=7, window_shards=2, batches_per_transfer=3)
EPOCHS = 2


def main(
    url: str, out: str, sizes: dict[int, tuple[int, ...]], workers: int, method: str, every: int, kill_at: int
) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = TorchTokenDataset(url, **OPTIONS)
    loader = TokenDataLoader(
        ds, num_workers=workers, multiprocessing_context=method if workers else None, persistent_workers=bool(workers)
    )
    checkpoint, step, start_epoch = os.path.join(out, "checkpoint.json"), 0, 0
    if os.path.exists(checkpoint):
        saved = json.load(open(checkpoint))
        loader.load_state_dict(saved["data"])
        step, start_epoch = saved["step"], saved["data"]["epoch"]
    with open(os.path.join(out, f"run{os.environ['RUN']}-rank{rank}.log"), "a") as log:
        for epoch in range(start_epoch, EPOCHS):
            ds.set_epoch(epoch)
            for batch in loader:
                step += 1
                rows = samples_of(batch, sizes) if sizes else digests_of(batch)
                assert batch["component"].tolist() == [row[0] for row in rows]
                log.write(json.dumps([step, epoch, rows]) + "\n")
                log.flush()
                dist.barrier()  # ranks step together, as an all-reduce of gradients makes them
                if every and step % every == 0 and rank == 0:
                    with open(checkpoint + ".tmp", "w") as f:
                        json.dump({"data": loader.state_dict(), "step": step}, f)
                    os.replace(checkpoint + ".tmp", checkpoint)
                if step == kill_at and rank == 0:
                    with open(os.path.join(out, "kill-me.tmp"), "w") as f:
                        f.write(str(os.getpid()))
                    os.replace(os.path.join(out, "kill-me.tmp"), os.path.join(out, "kill-me"))
                    while True:
                        signal.pause()
    dist.destroy_process_group()


if __name__ == "__main__":
    url, out, sizes, workers, method, every, kill_at = sys.argv[1:8]
    main(
        url,
        out,
        {int(k): tuple(v) for k, v in json.loads(sizes).items()},
        int(workers),
        method,
        int(every),
        int(kill_at),
    )
