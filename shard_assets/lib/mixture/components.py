"""Resolve a mixture spec into the file to publish: each component's manifest read through shard_loader's own
stores (any URL the loader reads), a live `manifest.json` pinned to its `manifests/<version>.json`, and the
tokens per epoch resolved from the budget or the stop rule."""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from shard_loader.builder_api import CREATED_AT_FORMAT, LATEST_KEY, SPLITS, VERSIONS_DIR, Component, Manifest
from shard_loader.builder_api import MixtureFile, MixtureTokenizer, PinnedManifest, ShardLoaderError, Store, is_remote
from shard_loader.builder_api import open_store, parse_manifest, split_manifest_url, versioned_key

from ..errors import MixtureError
from ..store import ObjectStore
from .spec import ComponentSpec, MixtureSpec

T = TypeVar("T")


@dataclass(frozen=True)
class PinnedComponent:
    """A component's manifest as read at publish: the pinned version's bytes and where they came from."""

    given: str  # the URL the spec gave (a relative path already resolved against the spec's folder)
    url: str  # the pinned manifest's own absolute URL
    manifest: Manifest  # without its shard tables
    size: int
    sha256: str


def join_url(root: str, key: str) -> str:
    """`key` under a store root: a path for a local root, a URL for a remote one."""
    return str(Path(root) / key) if not is_remote(root) else f"{root.rstrip('/')}/{key}"


def open_manifest_store(url: str, client: Any = None) -> tuple[Store, str]:
    """The loader's store for the dataset root of a manifest URL, and the manifest's key. An s3:// or r2:// root is read
    with `client` when given (the builder's own client for its bucket), else with the loader's read keys."""
    root, key = split_manifest_url(url)
    options = {"client": client} if client is not None and urlparse(root).scheme in ("s3", "r2") else {}
    return open_store(root, **options), key


def pin_component(url: str, client: Any = None) -> PinnedComponent:
    """Read a component's manifest; a live `manifest.json` (or its folder) is pinned to the version it names."""
    store, key = open_manifest_store(url, client)
    raw = store.read_bytes(key)
    manifest = parse_manifest(raw, origin=f"{store.url}/{key}")
    if key == LATEST_KEY:
        key = versioned_key(manifest.version)
        raw = store.read_bytes(key)
        pinned = parse_manifest(raw, origin=f"{store.url}/{key}")
        if pinned.version != manifest.version:
            raise MixtureError(
                f"{store.url}/{key}: holds version {pinned.version}, but {LATEST_KEY} names {manifest.version}"
            )
        manifest = pinned
    elif posixpath.dirname(key) != VERSIONS_DIR:
        raise MixtureError(
            f"{url}: neither a live {LATEST_KEY} (or its folder) nor a pinned {VERSIONS_DIR}/<version>.json"
        )
    return PinnedComponent(url, join_url(store.url, key), manifest, len(raw), hashlib.sha256(raw).hexdigest())


def url_in_mixture(url: str, store_root: str) -> str:
    """How the mixture names a component's URL: relative to the mixture's store root when it lies under it (so a copy
    of the whole prefix works unchanged), else absolute."""
    if not is_remote(url) and not is_remote(store_root):
        path = Path(urlparse(url).path if url.startswith("file://") else url).resolve()
        if path.is_relative_to(Path(store_root).resolve()):
            return path.relative_to(Path(store_root).resolve()).as_posix()
        return str(path)
    # r2://bucket/... and s3://bucket/... on R2's endpoint are one object
    same_scheme = url.replace("r2://", "s3://", 1)
    prefix = store_root.rstrip("/").replace("r2://", "s3://", 1) + "/"
    return same_scheme[len(prefix) :] if same_scheme.startswith(prefix) else url


def absolute_url(url: str, store_root: str) -> str:
    """A component URL as the mixture names it, made absolute against the mixture's store root."""
    absolute = url.startswith("/") or "://" in url
    return url if absolute else join_url(store_root, url)


def mixture_version(name: str, tokens_per_epoch: dict[str, int], components: tuple[Component, ...]) -> str:
    """`<name>-<16 hex>`: a sha256 over the name, the tokens per epoch and each component's (name, weight, manifest
    sha256, max_repeats), so the same inputs republish the same version."""
    served = [[c.name, c.weight, c.manifest.sha256, c.max_repeats] for c in components]
    body = json.dumps({"name": name, "tokens_per_epoch": tokens_per_epoch, "components": served}, sort_keys=True)
    return f"{name}-{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def epoch_tokens(
    spec: MixtureSpec, names: list[str], weights: list[float], held: list[dict[str, int]]
) -> tuple[dict[str, int], dict[str, str]]:
    """Tokens one mixture epoch serves per split (the spec's budget, else its stop rule), and how each split got them.

    A split some component holds no tokens of cannot be mixed: with a budget or for train that is an error, for
    another split under a stop rule the split is left out (the loader refuses it, naming it)."""
    tokens, how = {}, {}
    for split in SPLITS:
        empty = [n for n, h in zip(names, held) if h.get(split, 0) == 0]
        budget = spec.tokens_per_epoch.get(split)
        if empty and (budget is not None or split == "train"):
            field = f"tokens_per_epoch.{split}" if budget is not None else "components"
            raise MixtureError(
                f"{spec.origin}: {field}: components {empty} hold no {split} tokens, so no {split} mixture can be "
                "served"
            )
        if empty:
            how[split] = f"left out: components {empty} hold no {split} tokens"
        elif budget is not None:
            tokens[split], how[split] = budget, "tokens_per_epoch"
        else:
            ratios = [h[split] / w for h, w in zip(held, weights)]
            tokens[split] = math.floor(min(ratios)) if spec.stop == "first_exhausted" else math.ceil(max(ratios))
            how[split] = spec.stop
    return tokens, how


def _read(spec: MixtureSpec, i: int, c: ComponentSpec, read: Callable[[str], T]) -> T:
    """`read` of component `i`'s manifest URL; a failure is one line naming the spec and the component."""
    try:
        return read(c.manifest)
    except (ShardLoaderError, MixtureError) as exc:
        raise MixtureError(
            f"{spec.origin}: components[{i}].manifest {c.manifest}: {' '.join(str(exc).split())}"
        ) from None


def resolve_mixture(spec: MixtureSpec, store: ObjectStore, lineage: dict[str, Any]) -> MixtureFile:
    """The mixture to publish into `store`: every component read and pinned, weights normalised, tokens per epoch
    resolved, and the version id over what it serves. `lineage` (run, code version) is published with it."""
    client = getattr(store, "client", None)
    pinned = [_read(spec, i, c, lambda url: pin_component(url, client)) for i, c in enumerate(spec.components)]
    names = [c.name or p.manifest.dataset for c, p in zip(spec.components, pinned)]
    if len(set(names)) != len(names):
        raise MixtureError(
            f"{spec.origin}: components[].name: two components are named alike ({names}); give each a unique name"
        )
    total = math.fsum(c.weight for c in spec.components)  # 0.6 + 0.3 + 0.1 is 1, not 1.0000000000000002
    weights = [c.weight / total for c in spec.components]
    held = [{s: info.tokens for s, info in p.manifest.splits.items()} for p in pinned]
    tokens, how = epoch_tokens(spec, names, weights, held)
    root = store.loader_url()
    components = tuple(
        Component(
            name=name,
            weight=weight,
            manifest=PinnedManifest(url_in_mixture(p.url, root), p.size, p.sha256),
            dataset=p.manifest.dataset,
            version=p.manifest.version,
            tokens=h,
            max_repeats=c.max_repeats,
        )
        for name, weight, p, h, c in zip(names, weights, pinned, held, spec.components)
    )
    first = pinned[0].manifest.tokenizer  # one tokenizer across components is an audit of the written version
    return MixtureFile(
        name=spec.name,
        version=mixture_version(spec.name, tokens, components),
        created_at=datetime.now(UTC).strftime(CREATED_AT_FORMAT),
        tokenizer=MixtureTokenizer(first.fingerprint, first.vocab_size, first.eod_id, pinned[0].manifest.token_dtype),
        tokens_per_epoch=tokens,
        components=components,
        lineage={
            **lineage,
            "spec": spec.origin,
            "stop": spec.stop,
            "tokens_per_epoch_from": how,
            "resolved_from": {n: p.given for n, p in zip(names, pinned)},
        },
    )


def current_versions(spec: MixtureSpec, client: Any = None) -> dict[str, str]:
    """The version each component URL names now, by URL: a live `manifest.json` moves on, a pinned one never does."""

    def version(url: str) -> str:
        store, key = open_manifest_store(url, client)
        return parse_manifest(store.read_bytes(key), origin=f"{store.url}/{key}").version

    return {c.manifest: _read(spec, i, c, version) for i, c in enumerate(spec.components)}
