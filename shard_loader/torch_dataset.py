"""PyTorch integration: an IterableDataset that hands over whole int64 batches, and a DataLoader
that knows where its stream stands, so `state_dict()` resumes exactly even with another
number of workers.

Each DataLoader worker builds its own TokenDataset and serves batches g with
g % num_workers == worker id; the DataLoader collects workers round-robin, so the rank's
stream keeps its order. Epoch and start batch travel to (persistent) workers through a
small shared tensor.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .dataset import Consumer, TokenDataset


class TorchTokenDataset(IterableDataset):
    """Batches as dicts of int64 tensors; use with TokenDataLoader (or DataLoader(batch_size=None))."""

    def __init__(self, url: str, **options: Any):
        super().__init__()
        self.url, self.options = url, options
        self._main = TokenDataset(url, **options)
        self._position = torch.zeros(2, dtype=torch.int64).share_memory_()  # epoch, batches served

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_main"] = None  # each worker opens its own
        return state

    def __len__(self) -> int:
        return len(self._main) if self._main is not None else len(TokenDataset(self.url, **self.options))

    def set_epoch(self, epoch: int) -> None:
        self._position[0], self._position[1] = epoch, 0

    def state_dict(self) -> dict[str, int]:
        base = (self._main or TokenDataset(self.url, **self.options)).state_dict()
        return {**base, "epoch": int(self._position[0]), "batches": int(self._position[1])}

    def load_state_dict(self, state: dict[str, int]) -> None:
        (self._main or TokenDataset(self.url, **self.options)).load_state_dict(state)
        self._position[0], self._position[1] = state["epoch"], state["batches"]

    def advance(self) -> None:
        """Count one batch as served to the trainer (called by TokenDataLoader in the main process)."""
        self._position[1] += 1

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        ds = self._main if info is None else TokenDataset(self.url, **self.options)
        ds.epoch, ds.start_batch = int(self._position[0]), int(self._position[1])
        ds.consumer = Consumer(info.id, info.num_workers) if info is not None else Consumer()
        try:
            for batch in ds:
                yield {k: torch.from_numpy(v) for k, v in batch.items()}
        finally:
            if info is not None:
                ds.close()


class TokenDataLoader(DataLoader):
    """A DataLoader over a TorchTokenDataset that counts the batches it hands to the trainer."""

    def __init__(self, dataset: TorchTokenDataset, **options: Any):
        super().__init__(dataset, batch_size=None, **options)

    def __iter__(self):
        for batch in super().__iter__():
            self.dataset.advance()
            yield batch

    def state_dict(self) -> dict[str, int]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.dataset.load_state_dict(state)
