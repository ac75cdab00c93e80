"""The blocking audits of a written mixture version, run against exactly the file in the store: every component's
pinned manifest readable and verified, one tokenizer, positive weights, and each component's implied passes per
epoch within its cap. Each returns the dataset audits' `Audit` record, so the UI shows them the same way."""

from __future__ import annotations

import hashlib
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shard_loader.builder_api import Component, FileRef, Manifest, MixtureFile, ShardLoaderError, Store, is_remote
from shard_loader.builder_api import parse_manifest

from ..publish import Audit, sample_reads
from .components import absolute_url, open_manifest_store

SIZE_THREADS = 16  # a remote file's size is one HEAD: waiting on the store, not on this process
AUDITS = {
    "components_verified": "Every component's pinned manifest has its recorded size and sha256, its shard tables "
    "verify, every file it names is present with its size, and its tokenizer and a sample of shards verify (sha256) "
    "and open with shard_loader's reader.",
    "one_tokenizer": "Every component was tokenized with the mixture's tokenizer (one fingerprint).",
    "weights_positive": "Every weight is positive and the weights sum to 1.",
    "repeats_within_caps": "No component is read more times per mixture epoch than its max_repeats allows.",
    "tokens_per_epoch_bounded": "Every split's tokens_per_epoch is within the loader's bound (2**48), so epoch "
    "arithmetic stays in 64 bits.",
}


@dataclass(frozen=True)
class ComponentCheck:
    """One component's manifest as read back for the audits (None when it could not be read) and what was wrong."""

    component: Component
    manifest: Manifest | None
    problems: tuple[str, ...]


def _missing_or_resized(store: Store, manifest: Manifest) -> list[str]:
    """Every file the manifest names, present with its size: a stat each locally, a HEAD each (threaded) remotely."""
    refs = manifest.files()

    def check(ref: FileRef) -> str | None:
        try:
            size = store.size(ref.key)
        except ShardLoaderError as exc:
            return f"{ref.key}: missing ({' '.join(str(exc).split())})"
        return None if size == ref.size else f"{ref.key}: {size} bytes, manifest says {ref.size}"

    with ThreadPoolExecutor(SIZE_THREADS if is_remote(store.url) else 1) as pool:
        return [p for p in pool.map(check, refs) if p]


def check_component(c: Component, store_root: str, client: Any = None) -> ComponentCheck:
    """Read a component's pinned manifest back from its URL and verify it, its tables and its files."""
    url = absolute_url(c.manifest.url, store_root)
    try:
        store, key = open_manifest_store(url, client)
        raw = store.read_bytes(key)
        if len(raw) != c.manifest.size or hashlib.sha256(raw).hexdigest() != c.manifest.sha256:
            pinned = f"the mixture pinned {c.manifest.size} bytes with sha256 {c.manifest.sha256}"
            return ComponentCheck(c, None, (f"{url}: {len(raw)} bytes, {pinned}",))
        manifest = parse_manifest(raw, origin=url).with_tables(lambda ref: store.read_bytes(ref.key))
    except ShardLoaderError as exc:
        return ComponentCheck(c, None, (f"{url}: {' '.join(str(exc).split())}",))
    problems = []
    if (manifest.dataset, manifest.version) != (c.dataset, c.version):
        problems.append(f"{url}: is {manifest.dataset}@{manifest.version}, the mixture says {c.dataset}@{c.version}")
    held = {s: info.tokens for s, info in manifest.splits.items()}
    if held != c.tokens:
        problems.append(f"{url}: holds {held} tokens, the mixture says {c.tokens}")
    problems += _missing_or_resized(store, manifest) + sample_reads(store, manifest)
    return ComponentCheck(c, manifest, tuple(problems))


def _components_verified(checks: list[ComponentCheck]) -> Audit:
    problems = tuple(f"{k.component.name}: {p}" for k in checks for p in k.problems)
    files = sum(len(k.manifest.files()) for k in checks if k.manifest)
    bad = sorted({k.component.name for k in checks if k.problems})
    summary = f"{len(checks)} components, {files} files; " + (f"failed: {', '.join(bad)}" if bad else "all verified")
    return Audit("components_verified", not problems, summary, problems)


def _one_tokenizer(m: MixtureFile, checks: list[ComponentCheck]) -> Audit:
    found = {k.component.name: k.manifest.tokenizer.fingerprint for k in checks if k.manifest}
    problems = tuple(
        f"{name}: tokenizer {fp}, but {m.components[0].name}: tokenizer {m.tokenizer.fingerprint}; a mixture needs one "
        "tokenizer"
        for name, fp in found.items()
        if fp != m.tokenizer.fingerprint
    )
    summary = ", ".join(f"{name}: {fp}" for name, fp in found.items()) + (
        f"; {len(checks) - len(found)} unread" if len(found) < len(checks) else ""
    )
    return Audit("one_tokenizer", not problems, summary, problems)


def _weights_positive(m: MixtureFile) -> Audit:
    problems = [
        f"{c.name}: weight {c.weight!r} is not a positive number"
        for c in m.components
        if not (math.isfinite(c.weight) and c.weight > 0)
    ]
    total = sum(c.weight for c in m.components)
    if not math.isclose(total, 1.0, rel_tol=1e-9):
        problems.append(f"weights sum to {total!r}, not 1")
    summary = ", ".join(f"{c.name}: {c.weight:.4g}" for c in m.components)
    return Audit("weights_positive", not problems, summary, tuple(problems))


def _repeats_within_caps(m: MixtureFile) -> Audit:
    problems, shown = [], []
    for split, tokens in m.tokens_per_epoch.items():
        for c in m.components:
            passes = c.repeats(split, tokens)
            shown.append(f"{c.name} {split} {passes:.3g}")
            if c.max_repeats is not None and passes > c.max_repeats:
                problems.append(
                    f"{c.name}: {passes:.3g} passes over its {split} split per mixture epoch ({tokens:,} tokens x "
                    f"weight {c.weight:.4g} / {c.tokens.get(split, 0):,}), max_repeats is {c.max_repeats:g}"
                )
    return Audit("repeats_within_caps", not problems, "passes per mixture epoch: " + ", ".join(shown), tuple(problems))


def _tokens_per_epoch_bounded(m: MixtureFile) -> Audit:
    problems = tuple(p for split in m.tokens_per_epoch if (p := m.epoch_too_large(split)))
    shown = ", ".join(f"{split} {tokens:,}" for split, tokens in m.tokens_per_epoch.items())
    return Audit("tokens_per_epoch_bounded", not problems, shown, problems)


def audit_mixture(m: MixtureFile, store_root: str, client: Any = None) -> tuple[Audit, ...]:
    """Every blocking audit of a written mixture version (`m` as read back from the store)."""
    checks = [check_component(c, store_root, client) for c in m.components]
    return (
        _components_verified(checks),
        _one_tokenizer(m, checks),
        _weights_positive(m),
        _repeats_within_caps(m),
        _tokens_per_epoch_bounded(m),
    )
