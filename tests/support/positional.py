"""A dataset whose tokens name their own shard and position, so every served row is checked token by token."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shard_loader.format import Manifest
from tests.support.synthetic import write_dataset

STRIDE = 100_000  # token at position p of shard s is s * STRIDE + p + 1; each shard is one document, then EOD (0)


def write_positional(root: str | Path, sizes: list[int], version: str = "v1") -> Manifest:
    """Publish one shard per size, each a single document of `size` tokens."""
    assert max(sizes) < STRIDE
    shards = [[s * STRIDE + 1 + np.arange(n)] for s, n in enumerate(sizes)]
    return write_dataset(root, {"train": shards}, vocab_size=1 << 23, version=version)


def positional_dataset(tmp_path_factory, sizes: list[int]) -> str:
    """write_positional into a new temporary folder; its path, as a URL to open."""
    root = tmp_path_factory.mktemp("positional")
    write_positional(root, sizes)
    return str(root)


def shard_tokens(shard: int, size: int) -> np.ndarray:
    return np.append(shard * STRIDE + 1 + np.arange(size), 0)


def sample_of(row, sizes: list[int]) -> tuple[int, int]:
    """(shard, token start) of a served row of `span` tokens, after checking every token of it."""
    row = np.asarray(row)
    shard, start = divmod(int(row[0]) - 1, STRIDE)
    expected = shard_tokens(shard, sizes[shard])[start : start + len(row)]
    assert np.array_equal(row, expected), f"row starting at shard {shard} token {start} is not the shard's tokens"
    return shard, start


def samples_of(batch, sizes: list[int], label_shift: int = 1) -> list[tuple[int, int]]:
    """The (shard, start) of every row of a batch, checking inputs and labels against the shard's tokens."""
    inputs, labels = np.asarray(batch["input_ids"]), np.asarray(batch["labels"])
    assert np.array_equal(labels[:, :-label_shift], inputs[:, label_shift:])
    rows = np.concatenate([inputs, labels[:, -label_shift:]], axis=1)
    return [sample_of(r, sizes) for r in rows]


def take(loader, n: int, sizes: list[int]) -> list[list[tuple[int, int]]]:
    """The (shard, start) rows of the loader's first `n` batches, each checked; the loader stops there (a resumable
    loader's state is then taken after batch `n`)."""
    out = []
    for batch in loader:
        out.append(samples_of(batch, sizes))
        if len(out) == n:
            break
    return out
