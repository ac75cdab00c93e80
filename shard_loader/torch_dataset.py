"""PyTorch integration: an IterableDataset whose workers hand over groups of whole int64 batches in
one transfer, and a DataLoader that unpacks them and knows where its stream stands, so
`state_dict()` resumes exactly even with another number of workers.

Worker w builds its own TokenDataset and serves the groups q of `batches_per_transfer`
consecutive batches with q % num_workers == w; the DataLoader collects workers
round-robin, so the rank's stream keeps its order. Epoch and start batch travel to
(persistent) workers through a small shared tensor.

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

from .dataset import Consumer, TokenDataset


class TorchTokenDataset(IterableDataset):
    """Yields groups of batches: {"tokens": (k * batch_size, seq_len + shift)[, "position_ids"]}; use TokenDataLoader."""

    def __init__(self, url: str, batches_per_transfer: int = 16, **options: Any):
        super().__init__()
        self.url, self.options, self.group = url, options, batches_per_transfer
        self._main = TokenDataset(url, **options)
        self.batch_size, self.label_shift = self._main.batch_size, self._main.spec.label_shift
        self._position = torch.zeros(2, dtype=torch.int64).share_memory_()  # epoch, batches served
        self.ring: torch.Tensor | None = None  # (workers * slots_per_worker, rows, span), set by TokenDataLoader
        self.slots_per_worker = 0

    def make_ring(self, workers: int, prefetch_factor: int) -> None:
        """Shared slots for `workers` workers that keep at most `prefetch_factor` groups in flight each."""
        self.slots_per_worker = prefetch_factor + 2
        rows, span = self.group * self.batch_size, self._dataset().spec.span
        self.ring = torch.empty((workers * self.slots_per_worker, rows, span), dtype=torch.int64).share_memory_()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_main"] = None  # each worker opens its own
        return state

    def _dataset(self) -> TokenDataset:
        if self._main is None:
            self._main = TokenDataset(self.url, **self.options)
        return self._main

    def __len__(self) -> int:
        """Batches (not groups) this rank serves per epoch."""
        return len(self._dataset())

    def set_epoch(self, epoch: int) -> None:
        self._position[0], self._position[1] = epoch, 0

    def state_dict(self) -> dict[str, int]:
        return {**self._dataset().state_dict(), "epoch": int(self._position[0]), "batches": int(self._position[1])}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._dataset().load_state_dict(state)
        self._position[0], self._position[1] = state["epoch"], state["batches"]

    def advance(self) -> None:
        """Count one batch as served to the trainer (called by TokenDataLoader in the main process)."""
        self._position[1] += 1

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        if info is not None and self._main is None:
            self._main = TokenDataset(self.url, **self.options)  # a persistent worker keeps it, and what it verified, across epochs
        ds = self._main
        ds.epoch, ds.start_batch = int(self._position[0]), int(self._position[1])
        ds.consumer = Consumer(info.id, info.num_workers, self.group) if info is not None else Consumer(group=self.group)
        rows = self.group * ds.batch_size
        use_ring = self.ring is not None and info is not None
        buf, pos, filled, sent = None, [], 0, 0
        try:
            for shards, shard_ids, starts in ds.samples():
                if buf is None:
                    slot = info.id * self.slots_per_worker + sent % self.slots_per_worker if use_ring else None
                    buf = self.ring[slot].numpy() if use_ring else np.empty((rows, ds.spec.span), dtype=np.int64)
                ds.fill(buf[filled : filled + len(starts)], shards, shard_ids, starts)
                if ds.position_ids:
                    pos.append(ds.positions(shards, shard_ids, starts))
                filled += len(starts)
                if ds.start_batch % self.group == 0:
                    yield self._pack(buf, filled, pos, slot)
                    buf, pos, filled, sent = None, [], 0, sent + 1
            if filled:
                yield self._pack(buf, filled, pos, slot)
        finally:
            ds.cache.close()

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

    def state_dict(self) -> dict[str, int]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.dataset.load_state_dict(state)
