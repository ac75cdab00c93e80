"""Write, audit, publish: assemble a manifest version from the per-partition records, write
`manifests/<version>.json` once, audit exactly that version, and only then replace `manifest.json`.

A failing audit leaves `manifest.json` and every older version untouched. Audits cost what the
records cost (counts, sizes, ids recorded at write time, a sampled read), never a full re-read."""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, UTC
from collections.abc import Collection
from typing import Any

from shard_loader.builder_api import CREATED_AT_FORMAT, LATEST_KEY, SPLITS, FileRef, Manifest, ShardEntry
from shard_loader.builder_api import ShardLoaderError, SplitInfo, Store, TokenizerInfo, ensure_local, open_shard
from shard_loader.builder_api import versioned_key

from .errors import PublishError
from .ownership import claim
from .published import read_published
from .records import PartRecord, TokenizerRecord
from .store import ObjectStore

SAMPLED_SHARDS = 4


@dataclass(frozen=True)
class Audit:
    """The outcome of one blocking audit of a written, not yet live, manifest version."""

    name: str
    passed: bool
    summary: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Published:
    version: str
    key: str
    created: bool
    live: bool
    manifest: Manifest
    audits: tuple[Audit, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> list[str]:
        return [a.name for a in self.audits if not a.passed]


def content_version(
    dataset: str, tokenizer: TokenizerInfo, dtype: str, splits: dict[str, SplitInfo], left_out: Collection[str] = ()
) -> str:
    """A version id from the published content only, so a re-run with the same inputs republishes the same version:
    the tokenizer's file and each split's shard table (key, size, sha256), which name every shard by partition, key,
    size and sha256. Two versions share an id only if they name the same files, so a source moved to other paths
    (other partition names, so other keys) is a new version, never a clash with the old one. The partitions left
    out while still in the dataset (failed, refused, not rebuilt) count too, when there are any: such a version says
    so in its own lineage, even where its files are an older version's. One whose file vanished is not among them: it
    left the dataset, and files moved back are the first version again."""
    tables = {}
    for s, info in splits.items():
        if info.table is None:
            raise PublishError(
                f"split {s!r} has no shard table: a version is named by its splits' tables (build them with "
                "SplitInfo.of)"
            )
        tables[s] = asdict(info.table)
    identity = {"dataset": dataset, "dtype": dtype, "tokenizer": asdict(tokenizer.file), "tables": tables}
    body = json.dumps(identity | ({"left_out": sorted(left_out)} if left_out else {}), sort_keys=True)
    return f"{dataset}-{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def build_manifest(
    dataset: str,
    tokenizer: TokenizerRecord,
    tokenizer_file: FileRef,
    parts: dict[str, PartRecord],
    lineage: dict[str, Any],
    lineage_detail: dict[str, Any],
    left_out: Collection[str] = (),
) -> Manifest:
    """The manifest of every partition's shards (shards with no document are left out); `lineage` is published
    inline, `lineage_detail` (per partition) as its own file; `left_out`: the partitions it leaves out that are still
    in the dataset."""
    ordered = [p for _, p in sorted(parts.items())]
    splits = {s: SplitInfo.of([p.shards[s] for p in ordered if p.shards[s].documents]) for s in SPLITS}
    info = TokenizerInfo(tokenizer.name, tokenizer.fingerprint, tokenizer.vocab_size, tokenizer.eod_id, tokenizer_file)
    return Manifest(
        dataset=dataset,
        version=content_version(dataset, info, tokenizer.token_dtype, splits, left_out),
        created_at=datetime.now(UTC).strftime(CREATED_AT_FORMAT),
        tokenizer=info,
        token_dtype=tokenizer.token_dtype,
        splits=splits,
        lineage=lineage,
        lineage_detail=lineage_detail,
    )


def write_version(store: ObjectStore, manifest: Manifest) -> tuple[str, bool, Manifest]:
    """Write the shard tables and lineage detail (content-addressed, first writer wins), then
    `manifests/<version>.json` once; returns its key, whether this call created it, and the parsed copy.

    A version already written with other content is refused, never replaced."""
    key = versioned_key(manifest.version)
    if not store.exists(key):
        for side_key, data in manifest.sidecar_bytes().items():
            store.put_bytes(side_key, data, if_absent=True)
    created = store.put_bytes(key, manifest.dumps(), if_absent=True)
    written = read_published(store, key)
    if written.version != manifest.version or _content(written) != _content(manifest):
        raise PublishError(
            f"{key}: {store.describe()} already holds a different manifest under this version; refusing to replace it"
        )
    return key, created, written


def _content(m: Manifest) -> list[FileRef]:
    """What a version's identity covers: every file but the lineage detail (run ids differ between re-runs)."""
    return [ref for ref in m.files() if ref != m.lineage_file]


def promote(store: ObjectStore, key: str) -> None:
    """Make a written version live: replace manifest.json (atomically) with its bytes."""
    store.put_bytes(LATEST_KEY, store.get_bytes(key))


def _audit_files_present(store: ObjectStore, m: Manifest) -> Audit:
    """Every file present with its size (that a file is named in one split only, the reader checked when it read the
    written version's tables). Sizes come from one listing per folder (a few requests per thousand files on S3, not
    one per file)."""
    files = m.files()
    folders = sorted({ref.key.rpartition("/")[0] for ref in files})
    sizes = {k: n for folder in folders for k, n in store.list(f"{folder}/")}
    problems = []
    for ref in files:
        if (size := sizes.get(ref.key)) != ref.size:
            problems.append(f"{ref.key}: " + ("missing" if size is None else f"{size} bytes, manifest says {ref.size}"))
    summary = f"{len(files)} files, {len(problems)} missing or of another size"
    return Audit("files_present", not problems, summary, tuple(problems))


def _audit_counts(m: Manifest, parts: dict[str, PartRecord]) -> Audit:
    problems = []
    for partition, part in parts.items():
        tokenized = sum(part.shards[s].documents for s in SPLITS)
        copies = part.dedup.dropped_total if part.dedup else 0  # left out as copies of other documents
        curated = part.curation.dropped_total if part.curation else 0  # dropped by the curation stage
        if part.raw.documents != tokenized + copies + curated:
            problems.append(
                f"{partition}: {part.raw.documents} raw documents, {tokenized} tokenized, {copies} copies"
                + (f", {curated} dropped by curation" if curated else "")
            )
    for name, split in m.splits.items():
        tokens = sum(p.shards[name].tokens for p in parts.values())
        documents = sum(p.shards[name].documents for p in parts.values())
        if (tokens, documents) != (split.tokens, split.documents):
            problems.append(
                f"{name}: shards hold {tokens} tokens / {documents} documents, manifest says {split.tokens} / "
                f"{split.documents}"
            )
    summary = "documents agree between raw and tokenized (with copies left out); tokens between shards and manifest"
    return Audit("counts_agree", not problems, summary, tuple(problems))


def _audit_vocab(m: Manifest, parts: dict[str, PartRecord]) -> Audit:
    worst = max((p.max_token_id for p in parts.values()), default=-1)
    bad = tuple(
        f"{k}: max token id {p.max_token_id}" for k, p in parts.items() if p.max_token_id >= m.tokenizer.vocab_size
    )
    summary = f"max token id {worst} (recorded at write time), vocab size {m.tokenizer.vocab_size}"
    return Audit("token_ids_below_vocab", not bad, summary, bad)


def _audit_not_empty(m: Manifest, val_fraction: float) -> Audit:
    wanted = ["train"] + (["val"] if val_fraction > 0 else [])
    empty = tuple(f"{s}: 0 documents (val_fraction {val_fraction})" for s in wanted if m.splits[s].documents == 0)
    summary = ", ".join(f"{s}: {m.splits[s].documents:,} documents" for s in wanted)
    return Audit("splits_not_empty", not empty, summary, empty)


def sampled_shards(m: Manifest) -> list[ShardEntry]:
    """First, last and evenly between, over the shards of every split in order."""
    tables = [s.shards for s in m.splits.values()]
    total = sum(len(t) for t in tables)
    spread = {round(i * (total - 1) / (SAMPLED_SHARDS - 1)) for i in range(SAMPLED_SHARDS)}
    picks = range(total) if total <= SAMPLED_SHARDS else sorted(spread)
    out = []
    for i in picks:
        for t in tables:
            if i < len(t):
                out.append(t[i])
                break
            i -= len(t)
    return out


def sample_reads(store: Store, m: Manifest) -> list[str]:
    """The tokenizer and a deterministic sample of shards (first, last and evenly between) verified against their
    sha256 (read in place, or downloaded to a temporary folder) and opened with shard_loader's reader: what went
    wrong, in one line. The dataset's and the mixture's audits both read this way."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ensure_local(store, m.tokenizer.file, tmp)
            for e in sampled_shards(m):
                open_shard(e, ensure_local(store, e.npy, tmp), ensure_local(store, e.bin, tmp), m.token_dtype)
        except (ShardLoaderError, OSError) as exc:
            return [" ".join(str(exc).split())]
    return []


def _audit_readable(store: ObjectStore, m: Manifest) -> Audit:
    problems = tuple(sample_reads(store, m))
    summary = f"tokenizer and {len(sampled_shards(m))} sampled shards verified and opened"
    return Audit("reads_with_shard_loader", not problems, summary, problems)


def audit(store: ObjectStore, m: Manifest, parts: dict[str, PartRecord], val_fraction: float) -> tuple[Audit, ...]:
    """Every blocking audit of a written version, with the builder's own store client and credentials."""
    return (
        _audit_files_present(store, m),
        _audit_counts(m, parts),
        _audit_vocab(m, parts),
        _audit_not_empty(m, val_fraction),
        _audit_readable(store, m),
    )


def publish(store: ObjectStore, manifest: Manifest, parts: dict[str, PartRecord], val_fraction: float) -> Published:
    """Write the version, audit it, and replace manifest.json only if every audit passed."""
    claim(store, manifest.dataset)
    key, created, written = write_version(store, manifest)
    audits = audit(store, written, parts, val_fraction)
    live = all(a.passed for a in audits)
    if live:
        promote(store, key)
    return Published(version=written.version, key=key, created=created, live=live, manifest=written, audits=audits)
