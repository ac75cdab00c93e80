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

Workers write groups into a ring of slots in shared memory made by TokenDataLoader and send
only the slot number: a tensor sent through the DataLoader's queues costs milliseconds of
shared-memory setup, a slot costs a copy. Each worker owns prefetch_factor + 2 slots, more
than it can have in flight, so a slot is never rewritten before the main process copied it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

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
        # epoch, cursor window, cursor sample, rank batches before the cursor, batches served since the cursor
        self._shared = torch.zeros(5, dtype=torch.int64).share_memory_()
        self.ring: torch.Tensor | None = None  # (workers * slots_per_worker, rows, span), set by TokenDataLoader
        self.slots_per_worker = 0

    def make_ring(self, workers: int, prefetch_factor: int) -> None:
        """Shared slots for `workers` workers that keep at most `prefetch_factor` groups in flight each."""
        self.slots_per_worker = prefetch_factor + 2
        rows, span = self.group * self.batch_size, self.data.spec.span
        self.ring = torch.empty((workers * self.slots_per_worker, rows, span), dtype=torch.int64).share_memory_()

    def anchor(self) -> Position:
        """Where the current iteration started: fixed while workers run, so every worker plans from the same point."""
        epoch, window, sample, batches, _ = self._shared.tolist()
        return Position(epoch, Cursor(window, sample), batches)

    def position(self) -> Position:
        """Where the trainer's stream stands: the anchor advanced by the batches served since."""
        anchor = self.anchor()
        return self.data.advanced(self.data.plan(anchor), anchor, int(self._shared[4]))

    def rebase(self) -> None:
        """Anchor the next iteration where the trainer's stream stands (called before workers start or resume)."""
        self._store(self.position())

    def _store(self, position: Position) -> None:
        c = position.cursor
        self._shared.copy_(torch.tensor([position.epoch, c.window, c.sample, position.batches, 0]))

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
        self._shared[4] += 1

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        ds = self.data
        plan = ds.plan(self.anchor())
        consumer = Consumer(info.id, info.num_workers, self.group) if info is not None else Consumer(group=self.group)
        rows = self.group * ds.batch_size
        use_ring = self.ring is not None and info is not None
        buf, slot, pos, filled, sent = None, None, [], 0, 0
        for k, shards, shard_ids, starts in ds.serve(plan, consumer):
            if buf is None:
                slot = info.id * self.slots_per_worker + sent % self.slots_per_worker if use_ring else None
                buf = self.ring[slot].numpy() if use_ring else np.empty((rows, ds.spec.span), dtype=np.int64)
            ds.fill(buf[filled : filled + len(starts)], shards, shard_ids, starts)
            if ds.position_ids:
                pos.append(ds.positions(shards, shard_ids, starts))
            filled += len(starts)
            del shards  # a released window must not stay mapped here while the next one is awaited
            if (k + 1) % self.group == 0 or k + 1 == plan.total_batches:
                yield self._pack(buf, filled, pos, slot)
                buf, pos, filled, sent = None, [], 0, sent + 1

    @staticmethod
    def _pack(buf: np.ndarray, filled: int, pos: list[np.ndarray], slot: int | None) -> dict:
        group = {"slot": slot, "rows": filled} if slot is not None else {"tokens": torch.from_numpy(buf[:filled])}
        if pos:
            group["position_ids"] = torch.from_numpy(np.concatenate(pos))
        return group


class TokenDataLoader(DataLoader):
    """A DataLoader over a TorchTokenDataset: unpacks each transfer into batches of int64 tensors
    {"input_ids", "labels"[, "position_ids"]}, and counts those handed to the trainer."""

    def __init__(self, dataset: TorchTokenDataset, **options: Any):
        super().__init__(dataset, batch_size=None, **options)
        if self.num_workers > 0:
            dataset.make_ring(self.num_workers, self.prefetch_factor)

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self):
        b, m = self.dataset.batch_size, self.dataset.label_shift
        ring = self.dataset.ring
        self.dataset.rebase()
        for group in super().__iter__():
            tokens = ring[group["slot"], : group["rows"]].clone() if "slot" in group else group["tokens"]
            if self.pin_memory and torch.cuda.is_available() and not tokens.is_pinned():
                tokens = tokens.pin_memory()
            for k in range(0, tokens.shape[0], b):
                rows = tokens[k : k + b]
                batch = {"input_ids": rows[:, :-m], "labels": rows[:, m:]}
                if "position_ids" in group:
                    batch["position_ids"] = group["position_ids"][k : k + b]
                self.dataset.advance()
                yield batch

    def state_dict(self) -> dict:
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.dataset.load_state_dict(state)
