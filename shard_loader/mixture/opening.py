"""Open a published mixture: read its file from any store, tell it from a dataset manifest by its `format`, and
resolve each component's pinned manifest URL (relative ones against the mixture's store root)."""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..errors import ManifestError, ShardLoaderError
from ..format import MIXTURE_FORMAT, MIXTURES_DIR, Component, Manifest, MixtureFile, parse_mixture
from ..opening import OpenedManifest, document_format, open_manifest, read_document
from ..storage import Store, open_store, split_manifest_url
from ..storage.urls import url_path


def is_mixture(url: str, store_options: dict[str, Any] | None = None) -> bool:
    """Whether the URL names a mixture file (told by its `format` field, never by its path)."""
    return document_format(read_document(url, store_options)[1]) == MIXTURE_FORMAT


def _with_path(url: str, path: str) -> str:
    local, _ = url_path(url)
    if local:
        return path if urlparse(url).scheme != "file" else f"file://{path}"
    return urlparse(url)._replace(path=path).geturl()


def store_root(url: str, name: str) -> str | None:
    """The store root of a mixture file at `url` named `name`: the folder holding `mixtures/<name>.json` (live) or
    `mixtures/<name>/<version>.json` (pinned); None when the file sits elsewhere."""
    _, path = url_path(url)
    folder, file = posixpath.split(path.rstrip("/"))
    if posixpath.basename(folder) == MIXTURES_DIR and file == f"{name}.json":
        return _with_path(url, posixpath.dirname(folder))
    parent = posixpath.dirname(folder)
    if posixpath.basename(folder) == name and posixpath.basename(parent) == MIXTURES_DIR:
        return _with_path(url, posixpath.dirname(parent))
    return None


def component_url(url: str, mixture: MixtureFile, component: Component, where: str) -> str:
    """The component's pinned manifest URL: absolute as written, or relative to the mixture's store root."""
    if not component.relative:
        return component.manifest.url
    root = store_root(url, mixture.name)
    if root is None:
        raise ManifestError(
            f"{where}.manifest.url: {component.manifest.url!r} is relative to the mixture's store root, but {url} is "
            f"not at <root>/{MIXTURES_DIR}/{mixture.name}.json or <root>/{MIXTURES_DIR}/{mixture.name}/<version>.json"
        )
    if not root:
        return component.manifest.url
    return f"{root.rstrip('/')}/{component.manifest.url}"


@dataclass(frozen=True)
class OpenedMixture:
    """A parsed mixture file, where it was read, and each component's resolved manifest URL (in file order)."""

    file: MixtureFile
    url: str
    component_urls: tuple[str, ...]


def open_mixture(
    url: str, store_options: dict[str, Any] | None = None, document: tuple[Store, bytes] | None = None
) -> OpenedMixture:
    """Read and validate the mixture file at `url` (`document`: its store and bytes, when read already), resolving its
    components' URLs (their manifests are read later, each checked against its pinned size and sha256)."""
    root, key = split_manifest_url(url)
    store, raw = document or (open_store(root, **(store_options or {})), None)
    origin = f"{store.url}/{key}"
    mixture = parse_mixture(store.read_bytes(key) if raw is None else raw, origin=origin)
    urls = tuple(component_url(url, mixture, c, f"{origin}.components[{i}]") for i, c in enumerate(mixture.components))
    return OpenedMixture(mixture, url, urls)


def component_cache_dir(cache_dir: str | Path, name: str) -> Path:
    """A component's folder under a mixture's cache_dir (each its own disk budget): readable, distinct per name."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:40]
    return Path(cache_dir) / f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def where(opened: OpenedMixture, i: int) -> str:
    """How errors name component i: the mixture, the component's name and its manifest URL."""
    return f"{opened.url}: component {opened.file.components[i].name!r} ({opened.component_urls[i]})"


def check_component(opened: OpenedMixture, i: int, manifest: Manifest) -> None:
    """Refuse a component manifest that is not the one the mixture names, or has another tokenizer or token dtype."""
    mix, c = opened.file, opened.file.components[i]
    mix.tokenizer.check(manifest, where(opened, i))
    if (manifest.dataset, manifest.version) != (c.dataset, c.version):
        raise ManifestError(
            f"{where(opened, i)}: the manifest is {manifest.dataset}@{manifest.version}, the mixture names "
            f"{c.dataset}@{c.version}"
        )


def open_components(
    opened: OpenedMixture,
    splits: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    store_options: dict[str, Any] | None = None,
) -> list[OpenedManifest]:
    """Each component's pinned manifest, its bytes checked against the mixture's size and sha256 and its tokenizer
    against the mixture's, with the shard tables of `splits` (default all) read."""
    out = []
    for i, c in enumerate(opened.file.components):
        cache = component_cache_dir(cache_dir, c.name) if cache_dir is not None else None
        try:
            manifest = open_manifest(
                opened.component_urls[i], splits, cache, pinned=c.manifest.ref, **(store_options or {})
            )
        except ShardLoaderError as exc:
            raise type(exc)(f"{where(opened, i)}: {exc}") from None
        check_component(opened, i, manifest.manifest)
        out.append(manifest)
    return out
