"""PyTorch integration: an IterableDataset whose workers hand over groups of whole int64 batches in
one transfer, and a DataLoader that unpacks them and knows where its stream stands, so
`state_dict()` resumes exactly even with another number of workers or ranks.

The dataset is built once, in the trainer's process (where the rank and world size are
resolved), and sent to every worker whatever the start method. Each time the loader is
iterated, it records the position the trainer has reached in a small shared tensor (the
anchor), and every worker plans the rest of the epoch from that anchor: the group q of `batches_per_transfer` batches
counted from that point goes to worker q % num_workers, and the DataLoader asks workers in
turn from worker 0, so the delivered stream is the rank's stream, in order, for any worker
count and any resume or break point.

Workers write groups into slots of shared memory made by TokenDataLoader and send only the slot
number; the main process hands the trainer views of the slot, without a copy or per-sample work
(a tensor sent through the DataLoader's queues costs milliseconds of shared-memory setup, and a
copy in the main process costs as much as filling the batch). A slot's group is marked held from
its arrival until no tensor refers to it any more; a worker never writes a held slot (it sends
that group as a fresh tensor instead), and each worker owns prefetch_factor + 2 slots, more than
it can have in flight, so a batch the trainer keeps is never overwritten.
"""

from __future__ import annotations

import gc
import multiprocessing

from collections.abc import Iterator
from typing import Any

import numpy as np

from .errors import MissingExtraError

try:
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info
except ModuleNotFoundError as exc:
    raise MissingExtraError(exc.name or "torch", "torch", "shard_loader.torch_dataset") from None

from .arguments import integer
from .dataset import TokenDataset
from .sampler import Cursor
from .state import Position
from .world import Consumer


class TorchTokenDataset(IterableDataset):
    """Yields groups of batches: {"tokens": (k * batch_size, seq_len + shift)[, "position_ids"]}; use TokenDataLoader."""

    def __init__(self, url: str, batches_per_transfer: int = 16, **options: Any):
        super().__init__()
        self.group = integer("batches_per_transfer", batches_per_transfer, 1)
        self.data = TokenDataset(url, **options)
        self.batch_size, self.label_shift = self.data.batch_size, self.data.spec.label_shift
        # epoch, cursor window, cursor sample, rank batches before the cursor: where the current iteration started
        self._shared = torch.zeros(4, dtype=torch.int64).share_memory_()
        self._served = 0  # batches handed to the trainer since the anchor (main process only)
        self.slots: list[torch.Tensor] = []  # workers * slots_per_worker tensors (rows, span), set by TokenDataLoader
        self.held: np.ndarray | None = None  # 1 while the trainer may still hold a view of the slot
        self.slots_per_worker = 0

    def make_ring(self, workers: int, prefetch_factor: int) -> None:
        """Shared slots for `workers` workers that keep at most `prefetch_factor` groups in flight each."""
        self.slots_per_worker = prefetch_factor + 2
        rows, span = self.group * self.batch_size, self.data.spec.span
        self.slots = [torch.empty((rows, span), dtype=torch.int64).share_memory_() for _ in range(workers * self.slots_per_worker)]
        self.held = torch.zeros(len(self.slots), dtype=torch.uint8).share_memory_().numpy()

    def anchor(self) -> Position:
        """Where the current iteration started: fixed while workers run, so every worker plans from the same point."""
        epoch, window, sample, batches = self._shared.tolist()
        return Position(epoch, Cursor(window, sample), batches)

    def position(self) -> Position:
        """Where the trainer's stream stands: the anchor advanced by the batches served since."""
        anchor = self.anchor()
        return self.data.advanced(self.data.plan(anchor), anchor, self._served)

    def rebase(self) -> None:
        """Anchor the next iteration where the trainer's stream stands (called before workers start or resume)."""
        self._store(self.position())

    def _store(self, position: Position) -> None:
        c = position.cursor
        self._shared.copy_(torch.tensor([position.epoch, c.window, c.sample, position.batches]))
        self._served = 0

    def __len__(self) -> int:
        """Batches (not groups) this rank serves in the current epoch."""
        return len(self.data)

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of `epoch`; a no-op when the stream is already in it, so a restored position survives."""
        self.data.position = self.position()
        self.data.set_epoch(epoch)
        self._store(self.data.position)

    def state_dict(self) -> dict:
        self.data.position = self.position()
        return self.data.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.data.load_state_dict(state)
        self._store(self.data.position)

    def advance(self) -> None:
        """Count one batch as served to the trainer (called by TokenDataLoader in the main process)."""
        self._served += 1

    def __iter__(self) -> Iterator[dict]:
        info = get_worker_info()
        ds = self.data
        plan = ds.plan(self.anchor())
        consumer = Consumer(info.id, info.num_workers, self.group) if info is not None else Consumer(group=self.group)
        rows, total = self.group * ds.batch_size, plan.total_batches
        slots = [s.numpy() for s in self.slots] if info is not None else []
        buf, slot, pos, filled, sent = None, None, [], 0, 0
        for k, shards, shard_ids, starts in ds.serve(plan, consumer):
            if buf is None:
                slot = info.id * self.slots_per_worker + sent % self.slots_per_worker if slots else None
                if slot is not None and self.held[slot]:  # the trainer still holds a batch of this slot: leave it alone
                    slot = None
                buf = slots[slot] if slot is not None else np.empty((rows, ds.spec.span), dtype=np.int64)
            ds.fill(buf[filled : filled + len(starts)], shards, shard_ids, starts)
            if ds.position_ids:
                pos.append(ds.positions(shards, shard_ids, starts))
            filled += len(starts)
            del shards  # a released window must not stay mapped here while the next one is awaited
            end = k + len(starts) // ds.batch_size  # runs end at group boundaries, or where the plan ends
            if end % self.group == 0 or end == total:
                yield self._pack(buf, filled, pos, slot)
                buf, pos, filled, sent = None, [], 0, sent + 1

    @staticmethod
    def _pack(buf: np.ndarray, filled: int, pos: list[np.ndarray], slot: int | None) -> dict:
        group = {"slot": slot, "rows": filled} if slot is not None else {"tokens": torch.from_numpy(buf[:filled])}
        if pos:
            group["position_ids"] = torch.from_numpy(np.concatenate(pos))
        return group


_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)  # references to a storage, views included; absent: copy slots


def _uses(tensor: torch.Tensor) -> int:
    return _USE_COUNT(tensor.untyped_storage()._cdata)


class TokenDataLoader(DataLoader):
    """A DataLoader over a TorchTokenDataset: unpacks each transfer into batches of int64 tensors
    {"input_ids", "labels"[, "position_ids"]}, and counts those handed to the trainer."""

    def __init__(self, dataset: TorchTokenDataset, **options: Any):
        super().__init__(dataset, batch_size=None, **options)
        if self.num_workers > 0:
            dataset.make_ring(self.num_workers, self.prefetch_factor)
        self._unused = [_uses(slot) for slot in dataset.slots] if _USE_COUNT else []  # a slot's count with no view alive

    def _free_slots(self) -> None:
        """Let workers write again into slots of which the trainer holds no view any more."""
        held = self.dataset.held
        for s in np.flatnonzero(held).tolist():
            if _uses(self.dataset.slots[s]) <= self._unused[s]:
                held[s] = 0

    def __len__(self) -> int:
        return len(self.dataset)

    def _get_iterator(self):
        """Forked workers start with the parent's objects frozen out of the cyclic collector: a collection in a worker
        would otherwise write into the header of every object it inherited and copy each page (at 30,000 shards that
        was most of a worker's unique memory). The parent unfreezes at once; its own garbage is collected as before."""
        context = self.multiprocessing_context or multiprocessing.get_context()
        if self.num_workers == 0 or context.get_start_method() != "fork":
            return super()._get_iterator()
        gc.freeze()
        try:
            return super()._get_iterator()
        finally:
            gc.unfreeze()

    def __iter__(self):
        ds = self.dataset
        b, m, pin = ds.batch_size, ds.label_shift, self.pin_memory and torch.cuda.is_available()
        ds.rebase()
        if ds.held is not None:
            self._free_slots()
        for group in super().__iter__():
            if "slot" in group:
                self._free_slots()
                tokens = ds.slots[group["slot"]][: group["rows"]]
                if _USE_COUNT:
                    ds.held[group["slot"]] = 1
                else:
                    tokens = tokens.clone()
            else:
                tokens = group["tokens"]
            if pin:
                tokens = tokens.pin_memory()
            split = tokens.view(-1, b, tokens.shape[1])
            inputs, labels = split[:, :, :-m].unbind(0), split[:, :, m:].unbind(0)
            positions = group["position_ids"].view(-1, b, group["position_ids"].shape[1]).unbind(0) if "position_ids" in group else None
            del tokens, split
            for k in range(len(inputs)):
                batch = {"input_ids": inputs[k], "labels": labels[k]}
                if positions is not None:
                    batch["position_ids"] = positions[k]
                ds.advance()
                yield batch
            del inputs, labels, positions, batch

    def state_dict(self) -> dict:
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.dataset.load_state_dict(state)
