"""Write small published datasets straight from numpy, to test shard_loader against files only."""

from __future__ import annotations

import functools
import hashlib
import io
import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from shard_loader.format import (
    LATEST_KEY,
    FileRef,
    Manifest,
    ShardEntry,
    ShardTable,
    SplitInfo,
    TokenizerInfo,
    token_dtype_for,
    versioned_key,
)


def _ref(root: Path, key: str, data: bytes) -> FileRef:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return FileRef(key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def _npy_bytes(tokens: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, tokens, allow_pickle=False)
    return buf.getvalue()


@functools.cache
def tokenizer_file(vocab_size: int, eod_id: int) -> bytes:
    """A tokenizer.json whose largest id is `vocab_size - 1` and whose special token is `eod_id`, shaped as the
    `tokenizers` library writes one: what `shard-loader verify` compares the manifest's tokenizer fields with. Only
    those two ids are listed: the fixtures' positional vocabularies (2**23 ids) would make it 170 MB."""
    vocab = {f"t{vocab_size - 1}": vocab_size - 1, "<|eod|>": eod_id}
    added = [{"id": eod_id, "content": "<|eod|>", "special": True}]
    return json.dumps({"added_tokens": added, "model": {"type": "WordLevel", "vocab": vocab}}).encode()


def write_dataset(
    root: str | Path,
    splits: dict[str, list[list[np.ndarray]]],
    vocab_size: int = 50_000,
    eod_id: int = 0,
    version: str = "v1",
    name: str = "synthetic",
    tag: str = "synthetic",
) -> Manifest:
    """Publish `splits[split][shard][doc]` (token arrays without EOD) under `root`.

    Returns the manifest, also written to `manifests/<version>.json` and `manifest.json`.
    Files go under `tag`, so datasets with different tags can share a root.
    """
    root = Path(root)
    dtype = token_dtype_for(vocab_size)
    tok_ref = _ref(root, f"tokenizers/{tag}/tokenizer.json", tokenizer_file(vocab_size, eod_id))
    infos = {}
    for split, shards in splits.items():
        entries = []
        for i, docs in enumerate(shards):
            with_eod = [np.append(np.asarray(d, dtype=dtype), np.array([eod_id], dtype=dtype)) for d in docs]
            tokens = np.concatenate(with_eod) if with_eod else np.zeros(0, dtype=dtype)
            offsets = np.zeros(len(docs) + 1, dtype="<i8")
            offsets[1:] = np.cumsum([len(d) for d in with_eod])
            part = f"part-{i:05d}"
            base = f"tokenized/{tag}/{split}/{part}"
            npy = _ref(root, f"{base}.npy", _npy_bytes(tokens))
            bin_ = _ref(root, f"{base}.bin", offsets.tobytes())
            entries.append(ShardEntry(partition=part, tokens=len(tokens), documents=len(docs), npy=npy, bin=bin_))
        infos[split] = SplitInfo.of(entries)
    manifest = Manifest(
        dataset=name,
        version=version,
        created_at="2026-01-01T00:00:00Z",
        tokenizer=TokenizerInfo(
            name="synthetic", fingerprint="synthetic", vocab_size=vocab_size, eod_id=eod_id, file=tok_ref
        ),
        token_dtype=dtype,
        splits=infos,
        lineage={"code_version": "test"},
    )
    publish_manifest(root, manifest)
    return manifest


def publish_manifest(root: str | Path, manifest: Manifest) -> None:
    root = Path(root)
    for key, data in manifest.sidecar_bytes().items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    (root / "manifests").mkdir(parents=True, exist_ok=True)
    (root / versioned_key(manifest.version)).write_bytes(manifest.dumps())
    (root / LATEST_KEY).write_bytes(manifest.dumps())


def random_docs(
    rng: np.random.Generator, n_docs: int, vocab_size: int = 50_000, mean_len: int = 300
) -> list[np.ndarray]:
    """Documents of random token ids in [1, vocab_size): id 0 is reserved for EOD."""
    lengths = rng.integers(1, 2 * mean_len, size=n_docs)
    return [rng.integers(1, vocab_size, size=n) for n in lengths]


def tamper_json(root: str | Path, edit) -> None:
    """Apply `edit(doc)` to the published manifest.json in place, as an attacker with write access would.

    `doc` shows each split's shard table inline (`doc["splits"][s]["shards"]`, a list of entry dicts) as
    well as its totals; after the edit, the tables are written back unchecked and the manifest's refs to
    them (key, size, sha256, count, bytes) made consistent, so only the edited fields are wrong."""
    root = Path(root)
    path = root / LATEST_KEY
    doc = json.loads(path.read_text())
    for split in doc.get("splits", {}).values():
        if isinstance(split, dict) and "table" in split:
            table = ShardTable(np.load(root / split["table"]["key"], allow_pickle=False))  # as published, unchecked
            split["shards"] = [asdict(e) for e in table]
    edit(doc)
    for split in doc.get("splits", {}).values():
        if isinstance(split, dict) and "table" in split and "shards" in split:
            entries = [
                ShardEntry(**{**e, "npy": FileRef(**e["npy"]), "bin": FileRef(**e["bin"])}) for e in split.pop("shards")
            ]
            data = ShardTable.of(entries).to_bytes()
            key = f"manifests/tables/tampered-{hashlib.sha256(data).hexdigest()[:16]}.npy"
            (root / key).write_bytes(data)
            split["table"] = {"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            split.update(shard_count=len(entries), bytes=sum(e.npy.size + e.bin.size for e in entries))
    path.write_text(json.dumps(doc))


__all__ = ["publish_manifest", "random_docs", "replace", "tamper_json", "write_dataset"]
