"""Synthetic published datasets of a given size, written with the builder's own shard writer."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from shard_assets.lib.publish import promote, write_version
from shard_loader.format import ShardWriter
from shard_assets.lib.store import LocalFolderStore
from shard_loader.cache.checksum import sha256_file
from shard_loader.format import FileRef, Manifest, ShardEntry, SplitInfo, TokenizerInfo, token_dtype_for


def _ref(root: Path, key: str) -> FileRef:
    return FileRef(key=key, size=(root / key).stat().st_size, sha256=sha256_file(root / key))


def make_dataset(
    root: Path, tokens: int, shards: int, vocab_size: int = 50257, doc_len: int = 1500, seed: int = 0
) -> Manifest:
    """`shards` train shards of about tokens/shards random tokens in documents of about doc_len tokens."""
    version = f"bench-{tokens}-{shards}-{seed}"
    if (root / "manifest.json").exists():
        from shard_loader import open_manifest

        existing = open_manifest(str(root)).manifest
        if existing.version == version:
            return existing
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    dtype = token_dtype_for(vocab_size)
    (root / "tokenizers/bench").mkdir(parents=True, exist_ok=True)
    (root / "tokenizers/bench/tokenizer.json").write_text('{"benchmark": true}\n')
    entries = []
    per_shard = max(1, tokens // shards)
    for i in range(shards):
        base = f"tokenized/bench/train/part-{i:05d}"
        (root / base).parent.mkdir(parents=True, exist_ok=True)
        writer = ShardWriter(root / f"{base}.npy", root / f"{base}.bin", dtype)
        docs = max(1, per_shard // doc_len)
        lengths = np.full(docs, per_shard // docs, dtype=np.int64)
        lengths[-1] += per_shard - lengths.sum()
        body = rng.integers(1, vocab_size, size=per_shard, dtype=np.int64).astype(dtype)
        body[np.cumsum(lengths) - 1] = 0
        writer.append(body, lengths)
        writer.close()
        entries.append(
            ShardEntry(
                f"part-{i:05d}", writer.tokens, writer.documents, _ref(root, f"{base}.npy"), _ref(root, f"{base}.bin")
            )
        )
    split = SplitInfo.of(entries)
    manifest = Manifest(
        dataset="bench",
        version=version,
        created_at="2026-01-01T00:00:00Z",
        tokenizer=TokenizerInfo("bench", "bench", vocab_size, 0, _ref(root, "tokenizers/bench/tokenizer.json")),
        token_dtype=dtype,
        splits={"train": split},
        lineage={},
    )
    promote(LocalFolderStore(root), write_version(LocalFolderStore(root), manifest)[0])
    return manifest
