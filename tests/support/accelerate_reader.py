"""A torchrun entry point: every process reads a dataset (or mixture) through accelerate's prepared DataLoader with the
settings given as JSON, logs what each batch it receives holds, saves accelerate's state every `every` steps (with
the step it was saved at) and can SIGKILL itself at a step; a restarted run loads the last saved state.

    torchrun --standalone --nproc_per_node=N tests/support/accelerate_reader.py URL OUT SETTINGS

SETTINGS: {"options": TorchTokenDataset's, "accelerate": DataLoaderConfiguration's, "loader": "dataloader" | "token",
"batch_size": the DataLoader's (absent: None), "wrap": read through a user's own wrapper (`Wrap`), "workers", "epochs",
"every", "kill_at", "cpu": Accelerator's (default true), "skip": resume with accelerate's own recipe (load_state, then
skip_first_batches over the steps done in the epoch), "set_epoch": call loader.set_epoch before each loop (default
true)}. Each log line is
[step, [(component, digest of the row), ...]], or one line {"error": "<type>: <message>"} when reading raised.
"""

import json
import os
import signal
import sys

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, IterableDataset

from shard_loader.torch_dataset import TokenDataLoader, TorchTokenDataset
from tests.support.mixture_files import digests_of


class Wrap(IterableDataset):
    """A user's few-line wrapper that drops a key: it forwards neither set_epoch nor len."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        for item in self.dataset:
            yield {key: value for key, value in item.items() if key != "position_ids"}


def main(url: str, out: str, settings: dict) -> None:
    config = DataLoaderConfiguration(**settings.get("accelerate", {}))
    accelerator = Accelerator(cpu=settings.get("cpu", True), dataloader_config=config)
    rank = accelerator.process_index
    ds = TorchTokenDataset(url, **settings["options"])
    workers = settings.get("workers", 0)
    if settings.get("loader") == "token":
        loader = TokenDataLoader(ds, num_workers=workers)
    else:
        read = Wrap(ds) if settings.get("wrap") else ds
        loader = DataLoader(read, batch_size=settings.get("batch_size"), num_workers=workers)
    log = open(os.path.join(out, f"rank{rank}.log"), "a")
    try:
        loader = accelerator.prepare(loader)
        ckpt, meta = os.path.join(out, "ckpt"), os.path.join(out, "ckpt.json")
        step, first, done = 0, 0, 0
        if os.path.exists(meta):
            accelerator.load_state(ckpt)
            step, first, done = json.load(open(meta))
        every, kill_at = settings.get("every", 0), settings.get("kill_at", 0)
        for epoch in range(first, settings.get("epochs", 1)):
            skipped = accelerator.skip_first_batches(loader, done) if settings.get("skip") and done else loader
            if settings.get("set_epoch", True):
                skipped.set_epoch(epoch)
            for batch in skipped:
                step, done = step + 1, done + 1
                log.write(json.dumps([step, digests_of(batch)]) + "\n")
                log.flush()
                if every and step % every == 0:
                    accelerator.save_state(ckpt)
                    accelerator.wait_for_everyone()
                    if rank == 0:
                        with open(meta + ".tmp", "w") as f:
                            json.dump([step, epoch, done], f)
                        os.replace(meta + ".tmp", meta)
                    accelerator.wait_for_everyone()
                if step == kill_at and rank == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
            done = 0
    except Exception as e:  # the test reads which error each process met
        log.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        raise


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
