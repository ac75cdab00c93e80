"""Trainers that rebuild the DataLoader they are given: accelerate's `prepare` (and transformers.Trainer, which prepares
its DataLoader through it). The dataset finds out how it is read and serves what each process needs, or refuses.

By default accelerate dispatches an IterableDataset: process 0 alone iterates, concatenates `num_processes` items and
slices one to each process. So process 0 here serves the global stream (each global batch's rows in rank order: rank
0's batch, then rank 1's, ...), the other processes serve nothing, and every rank receives exactly its own batch. Asked
to shard instead (`dispatch_batches=False`), accelerate wraps the dataset in an IterableDatasetShard that keeps one
item in `num_processes`; each rank's dataset already serves only its own batches, so the wrapper is made a passthrough,
as transformers does with its own rank-aware sampler. A DataLoader with a batch_size (transformers.Trainer always sets
one) gets rows, which it stacks into batches; any batch size other than the dataset's is refused.

How the dataset is read is learnt from accelerate's loader itself when it calls the dataset (`set_epoch` before each
pass, `len`), found among the calling frames: nothing of accelerate is imported here. The answer lives in shared memory,
so DataLoader workers started earlier (a StatefulDataLoader starts them when it is prepared) see it at their first item.
"""

from __future__ import annotations

import sys
from types import FrameType
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from torch.utils.data import get_worker_info

from .dataset import TokenDataset
from .errors import ShardLoaderError
from .world import Consumer

_FRAMES = 10  # how far up the stack accelerate's loader may be from the dataset's method it called
_NONE, _DISPATCHED, _SHARDED = 0, 1, 2  # how accelerate reads the dataset (the first field of Follower.shared)
_PASSTHROUGH = "_shard_loader_reading"  # set on an IterableDatasetShard made a passthrough: how it reads the dataset


class TrainerError(ShardLoaderError):
    """A trainer's setting under which the loader cannot serve every sample exactly once: the message names the
    setting to change or the integration to use."""


@dataclass(frozen=True)
class Reading:
    """How accelerate reads the dataset: dispatched from process 0 of `processes` (`leader`: this process is it) or
    sharded by each process; `rows`: the DataLoader stacks single rows (it has a batch_size), else each item is a
    batch; `unit`: rows per DataLoader item."""

    mode: int
    processes: int
    leader: bool
    rows: bool
    unit: int


class Followed(Protocol):
    """What a Follower reads of the TorchTokenDataset it serves (named here: torch_dataset imports this module)."""

    data: TokenDataset
    batch_size: int
    label_shift: int
    grouped: bool
    _served: int

    @property
    def world_size(self) -> int: ...

    def anchor(self) -> Any: ...

    def rebase(self) -> None: ...


class Follower:
    """What a TorchTokenDataset learnt of the trainer that reads it, in shared memory for its DataLoader workers."""

    def __init__(self) -> None:
        self.shared: torch.Tensor = torch.zeros(5, dtype=torch.int64).share_memory_()  # Reading's fields, mode 0: none

    def reading(self) -> Reading | None:
        mode, processes, leader, rows, unit = self.shared.tolist()
        return None if mode == _NONE else Reading(mode, processes, bool(leader), bool(rows), unit)

    def follow(self, ds: Followed) -> None:
        """Learn how accelerate reads `ds` if one of its loaders is calling (in the trainer's process)."""
        loader = _calling_loader(ds)
        if loader is None:
            return
        if ds.grouped:
            raise TrainerError(
                "accelerate rebuilt a TokenDataLoader as a plain DataLoader, which would hand the trainer groups: "
                "prepare DataLoader(dataset, batch_size=None) instead (see 'With your trainer' in docs/loader.md)"
            )
        reading = _reading_of(ds, loader)
        self.shared[:] = torch.tensor(
            [reading.mode, reading.processes, int(reading.leader), int(reading.rows), reading.unit]
        )

    def length(self, ds: Followed, batches: int) -> int:
        """len(ds) as the loader reading it counts: process 0 of a dispatching loader serves every rank's items."""
        self.follow(ds)
        reading = self.reading()
        if reading is None:
            return batches
        per_batch = ds.batch_size if reading.rows else 1
        return batches * per_batch * (reading.processes if reading.mode == _DISPATCHED else 1)

    def route(self, ds: Followed, own: Iterator[Any]) -> Iterator[Any]:
        """The dataset's own pass `own`, or, decided at the first item (accelerate has said how it reads by then), what
        accelerate's reading needs."""
        reading = self.reading()
        if reading is None:
            yield from own
            return
        if reading.mode == _SHARDED and not reading.rows:
            yield from own
            return
        _close(own)
        yield from _serve(ds, reading)

    def check_worker_state(self) -> None:
        """Refuse a StatefulDataLoader's per-worker state under dispatching: its counters are process 0's items."""
        reading = self.reading()
        if reading is not None and (reading.mode == _DISPATCHED or reading.rows):
            raise TrainerError(
                "a StatefulDataLoader with DataLoader workers cannot save this dataset under accelerate: prepare the "
                "DataLoader with num_workers=0 (the dataset reads ahead in its own threads)"
            )


def _close(iterator: Iterator[Any]) -> None:
    close: Callable[[], None] | None = getattr(iterator, "close", None)
    if close is not None:
        close()


def _calling_loader(ds: Followed) -> Any:
    """The accelerate loader (or IterableDatasetShard) among the calling frames that reads `ds`, else None."""
    module = sys.modules.get("accelerate.data_loader")
    if module is None:
        return None
    kinds = (module.DataLoaderDispatcher, module.DataLoaderShard, module.IterableDatasetShard)
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_FRAMES):
        if frame is None:
            return None
        caller = frame.f_locals.get("self")
        if type(caller) in kinds and _reads(caller, ds):
            return caller
        frame = frame.f_back
    return None


def _reads(loader: Any, ds: Followed) -> bool:
    dataset = loader.__dict__.get("dataset")  # an IterableDatasetShard's
    base = loader.__dict__.get("base_dataloader")
    if base is not None:
        dataset = base.dataset
    return dataset is ds or getattr(dataset, "dataset", None) is ds


def _reading_of(ds: Followed, loader: Any) -> Reading:
    """How `loader` (accelerate's, or its IterableDatasetShard) reads `ds`; one that cannot be exact is refused."""
    module = sys.modules["accelerate.data_loader"]
    state = sys.modules["accelerate.state"].PartialState()
    processes, index = int(state.num_processes), int(state.process_index)
    if type(loader) is module.IterableDatasetShard:
        return _sharded(ds, loader, processes)
    base = loader.base_dataloader
    if type(loader) is module.DataLoaderShard:
        if isinstance(base.dataset, module.IterableDatasetShard):
            return _sharded(ds, base.dataset, processes)
        return Reading(_SHARDED, processes, False, base.batch_size is not None, _rows(ds, base.batch_size))
    if processes != ds.world_size:
        raise TrainerError(
            f"accelerate dispatches to {processes} process(es), but the dataset was built for world_size "
            f"{ds.world_size}: start accelerate on every process (on CPU: Accelerator(cpu=True) or `accelerate launch "
            "--cpu`), or build the dataset with accelerate's num_processes"
        )
    split = bool(getattr(loader, "split_batches", False))
    size = base.batch_size
    wanted = ds.batch_size * processes if split else ds.batch_size
    if size is not None and size != wanted:
        raise TrainerError(
            f"accelerate deals batches of {size} rows{' split over' if split else ' to each of'} {processes} "
            f"processes, but the dataset's batch_size is {ds.batch_size}: give the DataLoader batch_size={wanted} "
            f"(or None), or the dataset batch_size={size // processes if split else size}"
        )
    if index != 0 and getattr(loader, "use_stateful_dataloader", False):
        loader.use_stateful_dataloader = False  # its state never moves here: only process 0's is saved and loaded
    return Reading(_DISPATCHED, processes, index == 0, size is not None, size or 1)


def _sharded(ds: Followed, shard: Any, processes: int) -> Reading:
    """accelerate's IterableDatasetShard over `ds` (dispatch_batches=False), made a passthrough: each rank's dataset
    serves its own batches already."""
    made: Reading | None = getattr(shard, _PASSTHROUGH, None)
    if made is not None:
        return made
    size = shard.batch_size
    if getattr(shard, "split_batches", False) and size is not None:
        size //= processes
    made = Reading(_SHARDED, processes, False, size is not None, _rows(ds, size))
    shard.num_processes, shard.process_index, shard.batch_size = 1, 0, 1
    setattr(shard, _PASSTHROUGH, made)
    return made


def _rows(ds: Followed, size: int | None) -> int:
    """Rows per item of a DataLoader with `size` reading this rank's stream: its batch_size, or 1 (whole batches)."""
    if size is not None and size != ds.batch_size:
        raise TrainerError(
            f"accelerate reads batches of {size} rows on each process, but the dataset's batch_size is "
            f"{ds.batch_size}: give the DataLoader batch_size={ds.batch_size} (or None)"
        )
    return size or 1


def _serve(ds: Followed, reading: Reading) -> Iterator[dict[str, torch.Tensor]]:
    """What accelerate asks this process's DataLoader (or worker) for: under dispatching, process 0 serves every
    rank's rows of each global batch in rank order and the others nothing; sharded with rows, this rank's rows.
    DataLoader item j goes to worker j % num_workers, the order in which a DataLoader asks its workers."""
    if reading.mode == _DISPATCHED and not reading.leader:
        return
    info = get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    data, m = ds.data, ds.label_shift
    if info is None:
        ds.rebase()
    anchor = ds.anchor()
    plan = data.plan(anchor)
    whole = replace(plan, rank=0, world_size=1, batch_size=plan.global_batch) if reading.mode == _DISPATCHED else plan
    unit = reading.unit * (1 if reading.rows else data.batch_size)
    items = whole.batch_size // unit  # DataLoader items per batch of `whole`
    served = 0  # rows served from the anchor (trainer's process only)
    for k, shards, shard_ids, starts in data.serve(whole, Consumer()):
        for i in range(items):
            if (k * items + i) % workers != worker:
                continue
            rows = slice(i * unit, (i + 1) * unit)
            tokens = torch.empty((unit, data.spec.span), dtype=torch.int64)
            data.fill(tokens.numpy(), shards, shard_ids[rows], starts[rows])
            batch = {
                "input_ids": tokens[:, :-m],
                "labels": tokens[:, m:],
                "component": torch.from_numpy(data.components_of(shard_ids[rows])),
            }
            if data.position_ids:
                batch["position_ids"] = torch.from_numpy(data.positions(shards, shard_ids[rows], starts[rows]))
            if info is None:  # steps every rank has received: accelerate saves its state in the middle of a fetch
                served += unit
                ds._served = served // whole.global_batch if reading.mode == _DISPATCHED else served // unit
            if reading.rows:
                yield from ({key: value[r] for key, value in batch.items()} for r in range(unit))
            else:
                yield batch
        del shards
