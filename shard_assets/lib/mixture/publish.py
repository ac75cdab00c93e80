"""Publish a mixture with the dataset protocol: write `mixtures/<name>/<version>.json` once (if absent), audit
exactly that version, and only then replace `mixtures/<name>.json`. A failed audit leaves the live mixture unchanged."""

from __future__ import annotations

from dataclasses import dataclass

from shard_loader.builder_api import MixtureFile, live_mixture_key, mixture_version_key, parse_mixture

from ..errors import PublishError
from ..publish import Audit
from ..store import ObjectStore
from .audits import audit_mixture
from .components import join_url
from .pins import pin_components, unpin_components


@dataclass(frozen=True)
class PublishReport:
    """What a publish did, as the run reports it to whoever started it (`shard-assets mix`): the version's key, whether
    this publish wrote it and made it live, and each blocking audit's outcome."""

    key: str
    created: bool
    live: bool
    audits: tuple[Audit, ...]

    @property
    def failed(self) -> list[str]:
        return [a.name for a in self.audits if not a.passed]


@dataclass(frozen=True)
class PublishedMixture:
    report: PublishReport
    mixture: MixtureFile  # the version as read back from the store


def live_mixture_url(store: ObjectStore, name: str) -> str:
    """The URL trainers read a mixture by: its live file, as the loader names the store."""
    return join_url(store.loader_url(), live_mixture_key(name))


def read_mixture(store: ObjectStore, key: str) -> MixtureFile:
    return parse_mixture(store.get_bytes(key), origin=f"{store.describe()}/{key}")


def write_mixture_version(store: ObjectStore, mixture: MixtureFile) -> tuple[str, bool, MixtureFile]:
    """Write the version once (first writer wins) and read it back; a version already written with other content
    is refused, never replaced. Returns its key, whether this call wrote it, and the copy in the store."""
    key = mixture_version_key(mixture.name, mixture.version)
    created = store.put_bytes(key, mixture.dumps(), if_absent=True)
    written = read_mixture(store, key)
    if written.identity != mixture.identity:
        raise PublishError(
            f"{key}: {store.describe()} already holds a different mixture under this version; refusing to replace it"
        )
    return key, created, written


def publish_mixture(store: ObjectStore, mixture: MixtureFile) -> PublishedMixture:
    """Write the version, audit it, and replace the live mixture only if every audit passed."""
    key, created, written = write_mixture_version(store, mixture)
    base, client = store.loader_url(), getattr(store, "client", None)
    audits = audit_mixture(written, base, client)
    live = all(a.passed for a in audits)
    if live:
        url, live_key = live_mixture_url(store, written.name), live_mixture_key(written.name)
        before = read_mixture(store, live_key) if store.exists(live_key) else None
        pin_components(written, base, url, client)  # before it is live: gc never sees it unprotected
        store.put_bytes(live_key, store.get_bytes(key))  # live: mixtures/<name>.json replaced (atomically) by its bytes
        if before is not None:
            unpin_components(before, written, base, url, client)
    return PublishedMixture(PublishReport(key, created, live, audits), written)
