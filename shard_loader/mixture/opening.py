"""Open a published mixture: read its file from any store, tell it from a dataset manifest by its `format`, and
resolve each component's pinned manifest URL (relative ones against the mixture's store root)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from urllib.parse import urlparse

from ..errors import ManifestError
from ..storage import open_store, split_manifest_url
from .file import MIXTURE_FORMAT, Component, MixtureFile, document_format, parse_mixture

MIXTURES_DIR = "mixtures"


def read_document(url: str, store_options: dict | None = None) -> tuple[str, bytes]:
    """(the document's URL as read, its bytes): a dataset manifest or a mixture file, whichever the URL names."""
    root, key = split_manifest_url(url)
    store = open_store(root, **(store_options or {}))
    return f"{store.url}/{key}", store.read_bytes(key)


def is_mixture(url: str, store_options: dict | None = None) -> bool:
    """Whether the URL names a mixture file (told by its `format` field, never by its path)."""
    return document_format(read_document(url, store_options)[1]) == MIXTURE_FORMAT


def _split(url: str) -> tuple[bool, str]:
    parsed = urlparse(url)
    local = parsed.scheme in ("", "file") or len(parsed.scheme) == 1
    return local, (parsed.path if parsed.scheme == "file" else url if local else parsed.path)


def _with_path(url: str, path: str) -> str:
    local, _ = _split(url)
    if local:
        return path if urlparse(url).scheme != "file" else f"file://{path}"
    return urlparse(url)._replace(path=path).geturl()


def store_root(url: str, name: str) -> str | None:
    """The store root of a mixture file at `url` named `name`: the folder holding `mixtures/<name>.json` (live) or
    `mixtures/<name>/<version>.json` (pinned); None when the file sits elsewhere."""
    _, path = _split(url)
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
        return component.manifest.key
    root = store_root(url, mixture.name)
    if root is None:
        raise ManifestError(
            f"{where}.manifest.url: {component.manifest.key!r} is relative to the mixture's store root, but {url} is not "
            f"at <root>/{MIXTURES_DIR}/{mixture.name}.json or <root>/{MIXTURES_DIR}/{mixture.name}/<version>.json"
        )
    if not root:
        return component.manifest.key
    return f"{root.rstrip('/')}/{component.manifest.key}"


@dataclass(frozen=True)
class OpenedMixture:
    """A parsed mixture file, where it was read, and each component's resolved manifest URL (in file order)."""

    file: MixtureFile
    url: str
    component_urls: tuple[str, ...]


def open_mixture(url: str, store_options: dict | None = None) -> OpenedMixture:
    """Read and validate the mixture file at `url`, resolving its components' URLs (their manifests are read later,
    each checked against its pinned size and sha256)."""
    origin, raw = read_document(url, store_options)
    mixture = parse_mixture(raw, origin=origin)
    urls = tuple(component_url(url, mixture, c, f"{origin}.components[{i}]") for i, c in enumerate(mixture.components))
    return OpenedMixture(mixture, url, urls)
