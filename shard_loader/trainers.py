"""accelerate's prepared DataLoaders (transformers.Trainer prepares its DataLoader through accelerate): the dataset
learns how it is read from what accelerate declares, `accelerate.state.is_initialized()`, `PartialState` and the
loader being iterated (`GradientState().active_dataloader`: a DataLoaderDispatcher or a DataLoaderShard whose dataset
is, or holds, this one), and serves what each process needs, or refuses. Nothing of accelerate is imported here.

While accelerate is initialized (and no pass showed another loader reading it), `len(dataset)` counts what its loaders
read: single rows of every process (a DataLoaderDispatcher's process 0 reads for all of them; an IterableDatasetShard
keeps one row block in num_processes). So accelerate's DataLoader must batch rows by the dataset's batch_size:
batch_size=None, or another size, is refused at the first batch. Dispatched, process 0 serves each global batch's rows
in rank order and the others nothing; sharded, each process serves its own batches' rows, each batch num_processes
times, of which the IterableDatasetShard keeps one.
What a process learns in the trainer's process (when accelerate calls set_epoch, when the dataset is pickled for
spawned workers, or iterated there) lives in shared memory for workers; a forked worker also asks its own copy of
accelerate's state.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import get_worker_info

from .dataset import TokenDataset
from .errors import ShardLoaderError
from .format import Shard
from .world import Consumer

# how the dataset is read (the first field of Follower.shared): not known, by accelerate's loaders (dispatched or
# sharded), or by another loader (a pass showed it)
_NONE, _DISPATCHED, _SHARDED, _PLAIN = 0, 1, 2, 3
_STATEFUL_WORKERS = (
    "a StatefulDataLoader with DataLoader workers cannot save this dataset under accelerate: prepare the DataLoader "
    "with num_workers=0 (the dataset reads ahead in its own threads)"
)
_DEPTH = 3  # how deep a user's wrapper may hold the dataset in its attributes
_LIGHTNING_RESTART = "You're resuming from a checkpoint that ended before the epoch ended"


class TrainerError(ShardLoaderError):
    """A trainer's setting under which the loader cannot serve every sample exactly once: the message names the
    setting to change or the integration to use."""


@dataclass(frozen=True)
class Reading:
    """How accelerate reads the dataset: dispatched from process 0 (`leader`: this process is it) or sharded; `unit`:
    rows per DataLoader item; `copies`: how often each item is served (an IterableDatasetShard keeps one of them)."""

    mode: int
    leader: bool
    unit: int
    copies: int


class Followed(Protocol):
    """What a Follower reads of the TorchTokenDataset it serves (named here: torch_dataset imports this module)."""

    data: TokenDataset
    batch_size: int
    grouped: bool
    _served: int

    @property
    def world_size(self) -> int: ...

    def anchor(self) -> Any: ...

    def rebase(self) -> None: ...

    def batch(self, shards: dict[int, Shard], shard_ids: np.ndarray, starts: np.ndarray) -> dict[str, torch.Tensor]: ...


class Follower:
    """What a TorchTokenDataset learnt of the accelerate loader that reads it, in shared memory for its workers."""

    def __init__(self) -> None:
        # Reading's fields (0: none), then 1 once len() counted another loader's batches under accelerate
        self.shared: torch.Tensor = torch.zeros(5, dtype=torch.int64).share_memory_()
        self.placed = False  # the trainer's code moved or restored the dataset (not accelerate's loop by itself)
        refuse_lightning_restart()

    def follow(self, ds: Followed) -> Reading | None:
        """How accelerate reads `ds` now, asked of accelerate in this process: the trainer's process records it for its
        workers; a worker whose own copy of accelerate's state says nothing (spawned, or started before accelerate's
        loader ran) takes the record."""
        reading = _reading(ds, self.placed)
        mode, leader, unit, copies, counted = self.shared.tolist()
        if get_worker_info() is None:
            if reading is not None and counted:
                raise TrainerError(
                    "len() of this dataset counted another DataLoader's batches (it had read the dataset), and "
                    "accelerate's loader now reading it takes len() as rows: give accelerate's DataLoader a dataset "
                    "of its own"
                )
            kept = _PLAIN if mode == _PLAIN else _NONE
            fields = (
                [kept, 0, 0, 0] if reading is None else [reading.mode, reading.leader, reading.unit, reading.copies]
            )
            self.shared[:4] = torch.tensor(fields)
            return reading
        return reading or (None if mode in (_NONE, _PLAIN) else Reading(mode, bool(leader), unit, copies))

    def processes(self, ds: Followed) -> int | None:
        """accelerate's processes when its loaders may read the dataset (len() then counts their rows), else None:
        while accelerate is initialized, unless a pass showed another loader reading the dataset and none of
        accelerate's reads it now (before any pass nothing tells: the Trainer asks len() of its prepared loader
        first)."""
        processes = accelerate_processes()
        if processes is not None and int(self.shared[0]) == _PLAIN and _active_loader(ds) is None:
            self.shared[4] = 1  # accelerate's loader reading the dataset after this answer is refused
            return None
        return processes

    def route(self, ds: Followed, own: Generator[Any, None, None]) -> Iterator[Any]:
        """The dataset's own pass `own`, or, decided at the first item, what accelerate's reading needs."""
        reading = self.follow(ds)
        if reading is None:
            self.shared[0] = _PLAIN
            yield from own
            return
        own.close()
        yield from _serve(ds, reading)

    def check_worker_state(self, ds: Followed) -> None:
        """Refuse a StatefulDataLoader's per-worker state under accelerate: its counters are of rows, not batches."""
        if self.follow(ds) is not None:
            raise TrainerError(_STATEFUL_WORKERS)


def refuse_lightning_restart() -> None:
    """Lightning resumes a mid-epoch checkpoint over a DataLoader without state_dict() from the epoch's first batch and
    only warns (nothing is saved): make it an error, once per process (a filter the user adds after it wins)."""
    if not any(f[0] == "error" and f[1] is not None and f[1].pattern == _LIGHTNING_RESTART for f in warnings.filters):
        warnings.filterwarnings("error", message=_LIGHTNING_RESTART)


def accelerate_processes() -> int | None:
    """accelerate's number of processes while it is initialized (its loaders read rows of each of them), else None."""
    state = sys.modules.get("accelerate.state")
    return int(state.PartialState().num_processes) if state is not None and state.is_initialized() else None


def _holds(obj: object, ds: object, depth: int) -> bool:
    """Whether `obj` is `ds` or holds it among its attributes or their items (a user's wrapper, an
    IterableDatasetShard)."""
    if obj is ds:
        return True
    inner = obj if isinstance(obj, list | tuple) else getattr(obj, "__dict__", {}).values()
    return depth > 0 and any(_holds(value, ds, depth - 1) for value in inner)


def _active_loader(ds: Followed) -> Any:
    """The accelerate loader this process iterates, when it reads `ds` (or a wrapper of it), else None."""
    state = sys.modules.get("accelerate.state")
    loader = state.GradientState().active_dataloader if state is not None and state.is_initialized() else None
    return loader if loader is not None and _holds(loader.dataset, ds, _DEPTH) else None


def _reading(ds: Followed, placed: bool) -> Reading | None:
    """How the accelerate loader this process iterates reads `ds`, None when none runs or it reads another dataset;
    what cannot be exact is refused."""
    processes, loaders, loader = accelerate_processes(), sys.modules.get("accelerate.data_loader"), _active_loader(ds)
    if processes is None or loaders is None or loader is None:
        return None
    if ds.grouped:
        raise TrainerError(
            "accelerate rebuilt a TokenDataLoader as a plain DataLoader, which would hand the trainer groups: prepare "
            f"DataLoader(dataset, batch_size={ds.batch_size}) instead (see 'With your trainer' in docs/loader.md)"
        )
    if loader.use_stateful_dataloader and loader.num_workers:  # before its workers' first state_dict refuses it
        raise TrainerError(_STATEFUL_WORKERS)
    if processes != ds.world_size:
        raise TrainerError(
            f"accelerate runs {processes} process(es), but the dataset was built for world_size {ds.world_size}: "
            "start accelerate on every process (on CPU: Accelerator(cpu=True) or `accelerate launch --cpu`), or build "
            "the dataset with accelerate's num_processes"
        )
    if loader.skip_batches and not placed:
        raise TrainerError(
            "accelerate's skip_first_batches drops the first batches of a pass, but nothing told the dataset which "
            "epoch this resumed run is in: call loader.set_epoch(epoch) before each loop (see 'With your trainer' in "
            "docs/loader.md)"
        )
    dispatched = isinstance(loader, loaders.DataLoaderDispatcher)
    split = processes if getattr(loader if dispatched else loader.dataset, "split_batches", False) else 1
    size = loader.batch_size  # sharded, split_batches gives each process's loader the user's batch_size / processes
    if size != (ds.batch_size * split if dispatched else ds.batch_size):
        raise TrainerError(_size_refusal(loader, size if dispatched or size is None else size * split, ds, split))
    index = int(sys.modules["accelerate.state"].PartialState().process_index)
    if not dispatched:
        copies = processes if isinstance(loader.dataset, loaders.IterableDatasetShard) else 1
        return Reading(_SHARDED, False, size, copies)
    if index != 0 and loader.use_stateful_dataloader:
        loader.use_stateful_dataloader = False  # its state never moves here: only process 0's is saved and loaded
    return Reading(_DISPATCHED, index == 0, size, 1)


def _size_refusal(loader: Any, size: int | None, ds: Followed, split: int) -> str:
    """The one line that says which batch size to set, in the words of the Trainer or of accelerate's DataLoader:
    `size` is the user's, `split` the processes split_batches=True splits each of its batches across (else 1)."""
    b, trainer = ds.batch_size, getattr(loader.collate_fn, "__module__", "").startswith("transformers.")
    if trainer:  # the Trainer builds its DataLoader
        named, told = f"per_device_train_batch_size is {size}", "set per_device_train_batch_size"
    else:
        named, told = f"accelerate's DataLoader has batch_size={size}", "give the DataLoader batch_size"
    if split > 1:
        return (
            f"{named} with split_batches=True, which splits each of its batches across the {split} processes: "
            f"{told}={b * split} (the dataset's batch_size {b} x {split} processes)"
        )
    if trainer:
        return f"{named}, but the dataset's batch_size is {b}: {told}={b} (or build the dataset with batch_size={size})"
    return f"{named}, but under accelerate it must batch the dataset's single rows (len() counts them): {told}={b}"


def _serve(ds: Followed, reading: Reading) -> Iterator[dict[str, torch.Tensor]]:
    """Rows for accelerate's DataLoader: under dispatching, process 0 serves every rank's rows of each global batch in
    rank order and the others nothing; sharded, this rank's rows, each DataLoader item `copies` times. DataLoader item
    j goes to worker j % num_workers, the order in which a DataLoader asks its workers."""
    if reading.mode == _DISPATCHED and not reading.leader:
        return
    info = get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    data = ds.data
    if info is None:
        ds.rebase()
    plan = data.plan(ds.anchor())
    whole = replace(plan, rank=0, world_size=1, batch_size=plan.global_batch) if reading.mode == _DISPATCHED else plan
    unit = reading.unit
    items = whole.batch_size // unit  # DataLoader items per batch of `whole`
    served = 0  # rows served from the anchor (trainer's process only)
    for k, shards, shard_ids, starts in data.serve(whole, Consumer()):
        for i in range(items):
            if (k * items + i) % workers != worker:
                continue
            rows = slice(i * unit, (i + 1) * unit)
            batch = ds.batch(shards, shard_ids[rows], starts[rows])
            if info is None:  # steps every rank has received: accelerate saves its state in the middle of a fetch
                served += unit
                ds._served = served // whole.batch_size
            for _ in range(reading.copies):
                yield from ({key: value[r] for key, value in batch.items()} for r in range(unit))
        del shards
