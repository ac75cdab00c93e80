"""Mixture files written by hand per the published format (docs/format.md), over positional datasets for loader tests:
each token names its component, shard and position, so every served row is checked token by token and traced back
to (component, shard, token start)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shard_loader import TokenDataset
from shard_loader.format import versioned_key
from tests.support.synthetic import write_dataset

STRIDE = (
    10_000  # token at position p of shard s of component c is (c * 100 + s) * STRIDE + p + 1; one document per shard
)
VOCAB = 1 << 23
# A published mixture document's top-level keys, in the order docs/format.md gives them.
MIXTURE_KEYS = [
    "format",
    "format_version",
    "mixture",
    "created_at",
    "tokenizer",
    "tokens_per_epoch",
    "components",
    "lineage",
]


@dataclass(frozen=True)
class Part:
    """One component to write: its name, the folder under the store root, its shard sizes and its weight."""

    name: str
    sizes: tuple[int, ...]
    weight: float
    index: int  # the number its tokens carry (its component index in the first mixture written)


def write_component(root: str | Path, part: Part, version: str = "v1") -> str:
    """Publish one positional dataset under root/<name>; returns its pinned manifest key (relative to root)."""
    assert max(part.sizes) < STRIDE and len(part.sizes) < 100
    shards = [[(part.index * 100 + s) * STRIDE + 1 + np.arange(n)] for s, n in enumerate(part.sizes)]
    manifest = write_dataset(
        Path(root) / part.name, {"train": shards}, vocab_size=VOCAB, version=f"{part.name}-{version}", name=part.name
    )
    return f"{part.name}/{versioned_key(manifest.version)}"


def write_components(root: Path, parts: list[Part]) -> Path:
    """write_component for each part; returns `root`."""
    for part in parts:
        write_component(root, part)
    return root


def write_mixture(
    root: str | Path,
    name: str,
    parts: list[Part],
    tokens_per_epoch: int,
    pinned: dict[str, str] | None = None,
    edit=None,
) -> str:
    """Publish a mixture of `parts` (folders under `root`, pinned to `pinned[name]` keys, else their current manifests)
    as mixtures/<name>/<version>.json and the live mixtures/<name>.json; returns the live URL. The tokenizer is the
    first component's; `edit(doc)` may alter the document before it is written."""
    root = Path(root)
    components, tokenizer = [], None
    for part in parts:
        key = (pinned or {}).get(part.name) or (
            f"{part.name}/"
            f"{versioned_key(json.loads((root / part.name / 'manifest.json').read_text())['dataset']['version'])}"
        )
        raw = (root / key).read_bytes()
        doc = json.loads(raw)
        tokenizer = tokenizer or {
            **{k: doc["tokenizer"][k] for k in ("fingerprint", "vocab_size", "eod_id")},
            "token_dtype": doc["token_dtype"],
        }
        components.append(
            {
                "name": part.name,
                "weight": part.weight,
                "manifest": {"url": key, "size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()},
                "dataset": doc["dataset"]["name"],
                "version": doc["dataset"]["version"],
                "tokens": {s: v["tokens"] for s, v in doc["splits"].items()},
                "max_repeats": None,
            }
        )
    digest = hashlib.sha256(
        json.dumps(
            [name, tokens_per_epoch, [[c["name"], c["weight"], c["manifest"]["sha256"]] for c in components]]
        ).encode()
    )
    version = f"{name}-{digest.hexdigest()[:16]}"
    doc = {
        "format": "shard-mixture",
        "format_version": 1,
        "mixture": {"name": name, "version": version},
        "created_at": "2026-11-23T12:00:00Z",
        "tokenizer": tokenizer,
        "tokens_per_epoch": {"train": tokens_per_epoch},
        "components": components,
        "lineage": {"spec": "test", "resolved_from": {c["name"]: f"{c['name']}/manifest.json" for c in components}},
    }
    if edit is not None:
        edit(doc)
    raw = json.dumps(doc, indent=2).encode()
    (root / "mixtures" / name).mkdir(parents=True, exist_ok=True)
    (root / "mixtures" / name / f"{version}.json").write_bytes(raw)
    (root / "mixtures" / f"{name}.json").write_bytes(raw)
    return str(root / "mixtures" / f"{name}.json")


def sample_of(row, sizes: dict[int, tuple[int, ...]]) -> tuple[int, int, int]:
    """(component, shard, token start) of a served row, after checking every token of it against the shard."""
    row = np.asarray(row)
    ident, start = divmod(int(row[0]) - 1, STRIDE)
    comp, shard = divmod(ident, 100)
    expected = np.append((comp * 100 + shard) * STRIDE + 1 + np.arange(sizes[comp][shard]), 0)[start : start + len(row)]
    assert np.array_equal(row, expected), (
        f"row starting at component {comp} shard {shard} token {start} is not the shard's tokens"
    )
    return comp, shard, start


def samples_of(batch, sizes: dict[int, tuple[int, ...]]) -> list[tuple[int, int, int]]:
    """(component, shard, start) of every row of a batch, checking labels against inputs and `component` against the
    tokens."""
    return [sample_of(r, sizes) for r in _samples(batch)]


def digests_of(batch) -> list[tuple[int, str]]:
    """(component, sha256 of the sample's tokens) of every row of a batch: how rows of datasets built from real text,
    whose tokens name no position, are told apart and matched against each component's own stream."""
    rows = zip(components_of(batch), _samples(batch))
    return [(c, hashlib.sha256(row.tobytes()).hexdigest()[:20]) for c, row in rows]


def _samples(batch) -> np.ndarray:
    """Each row's whole sample (seq_len + 1 tokens), after checking that labels are the inputs shifted by one."""
    inputs, labels = np.asarray(batch["input_ids"]), np.asarray(batch["labels"])
    assert np.array_equal(labels[:, :-1], inputs[:, 1:])
    return np.ascontiguousarray(np.concatenate([inputs, labels[:, -1:]], axis=1), dtype=np.int64)


def components_of(batch) -> list[int]:
    return np.asarray(batch["component"]).tolist()


def own_stream(url: str | Path, samples: int, row_of, **options) -> tuple[list, int]:
    """The first `samples` rows of one component as a TokenDataset of it alone serves them with the mixture's options
    (one sample per batch, epoch after epoch: its own (seed, epoch) order), each as `row_of` gives it without its
    component, and how many rows one of its epochs holds."""
    ds = TokenDataset(str(url), **{**options, "batch_size": 1})
    out, epoch = [], 0
    while len(out) < samples:
        ds.set_epoch(epoch)
        out += [row_of(b)[0][1:] for b in ds]
        epoch += 1
    return out[:samples], len(out) // epoch


def assert_every_block_holds_the_shares(comps: np.ndarray, weights: list[float], block: int, epoch: int, step: int):
    """Every run of `block` samples (sliding by `step`) holds floor or ceil of each share within an epoch's full blocks
    and within 2 across an epoch's last block, and every epoch of `epoch` samples ends within one sample of each share
    of everything before."""
    w, full = np.asarray(weights), epoch // block * block
    for start in range(0, len(comps) - block + 1, step):
        counts = np.bincount(comps[start : start + block], minlength=len(w))
        bound = 1 if start % epoch + block <= full else 2
        assert np.all(np.abs(counts - w * block) <= bound), (start, counts)
    for end in range(epoch, len(comps) + 1, epoch):
        assert np.all(np.abs(np.bincount(comps[:end], minlength=len(w)) - w * end) < 1), end
