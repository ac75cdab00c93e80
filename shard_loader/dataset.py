"""Open a published dataset and serve fixed-length token sequences from one split."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cache import ensure_local
from .manifest import Manifest, parse_manifest
from .shards import Shard, open_shard
from .store import Store, open_store, split_manifest_url


@dataclass(frozen=True)
class OpenedManifest:
    manifest: Manifest
    store: Store
    key: str


def open_manifest(url: str, **store_options) -> OpenedManifest:
    """Read and validate the manifest at a path or URL (a folder means its manifest.json)."""
    root, key = split_manifest_url(url)
    store = open_store(root, **store_options)
    manifest = parse_manifest(store.read_bytes(key), origin=f"{store.url}/{key}")
    return OpenedManifest(manifest=manifest, store=store, key=key)


def load_shard(opened: OpenedManifest, entry, cache_dir: str | Path | None = None) -> Shard:
    """Fetch (if remote), verify and memory-map one shard of an opened manifest."""
    npy = ensure_local(opened.store, entry.npy, cache_dir)
    bin_ = ensure_local(opened.store, entry.bin, cache_dir)
    return open_shard(entry, npy, bin_, opened.manifest.token_dtype)


def iter_sequences(
    url: str, split: str = "train", seq_len: int = 2048, batch_size: int = 8, cache_dir: str | Path | None = None
) -> Iterator[dict[str, np.ndarray]]:
    """Batches of `input_ids` and `labels` (int64, shape (batch_size, seq_len)) in shard order.

    Each sample is `seq_len + 1` consecutive tokens of one shard; labels are input_ids
    shifted by one. The tail of a shard shorter than a sample, and a last partial
    batch, are dropped.
    """
    opened = open_manifest(url)
    buf = np.empty((batch_size, seq_len + 1), dtype=np.int64)
    filled = 0
    for entry in opened.manifest.split(split).shards:
        tokens = load_shard(opened, entry, cache_dir).tokens
        for i in range((len(tokens) - 1) // seq_len):
            buf[filled] = tokens[i * seq_len : i * seq_len + seq_len + 1]
            filled += 1
            if filled == batch_size:
                yield {"input_ids": buf[:, :-1].copy(), "labels": buf[:, 1:].copy()}
                filled = 0
