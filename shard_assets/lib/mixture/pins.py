"""A published mixture protects the component versions it pins from the components' gc: a pin (a reader lease of
kind "pin", shard_loader.format.leases) in each component's store, under a holder named after the mixture, written
before the mixture goes live and moved when it moves to other versions (the new pins written, then the old removed).
gc keeps a pinned version and its dry run names the mixture holding it (the pin's note)."""

from __future__ import annotations

import hashlib
from typing import Any

from shard_loader.builder_api import Lease, MixtureFile, ShardLoaderError, WritableStore, lease_key, writer_for

from ..errors import PublishError
from .components import absolute_url, open_manifest_store

PIN_SECONDS = 10 * 365 * 86400.0  # held while the mixture is live; moved (or removed) when it moves


def pin_holder(live_url: str, name: str, relative: bool) -> str:
    """The pins' holder: on a component in the mixture's own store (`relative`), the mixture's name alone, so a copy of
    the store carries pins its own mixture moves; elsewhere also its live file's URL (two stores may each hold a
    mixture `name` reading one component)."""
    return f"mixture-{name}" if relative else f"mixture-{name}-{hashlib.sha256(live_url.encode()).hexdigest()[:8]}"


def _pins(
    mixture: MixtureFile, root: str, live_url: str, client: Any
) -> list[tuple[str, WritableStore | None, str, str]]:
    """(component URL, lease writer or None over https, the pinned version, the pin's holder) for each component."""
    found = []
    for c in mixture.components:
        url = absolute_url(c.manifest.url, root)
        store, _ = open_manifest_store(url, client)
        found.append((url, writer_for(store), c.version, pin_holder(live_url, mixture.name, c.relative)))
    return found


def pin_components(mixture: MixtureFile, root: str, live_url: str, client: Any = None) -> None:
    """Write a pin on every component version `mixture` reads, in the component's store; a store that refuses it is a
    PublishError naming the component (the mixture is then not made live). A component read over https cannot be
    written to: its store's gc does not see the mixture (pin it there with `shard-loader pin`)."""
    for url, writer, version, holder in _pins(mixture, root, live_url, client):
        if writer is None:
            continue
        lease = Lease(version, holder, "pin", PIN_SECONDS, f"mixture {mixture.version} at {live_url}")
        try:
            writer.write_bytes(lease_key(version, holder), lease.to_bytes())
        except (ShardLoaderError, OSError) as exc:
            raise PublishError(
                f"{url}: cannot pin version {version} for mixture {mixture.name} ({' '.join(str(exc).split())}); "
                "publish the mixture with keys that may write the component's store, so its gc keeps the version"
            ) from None


def unpin_components(old: MixtureFile, new: MixtureFile, root: str, live_url: str, client: Any = None) -> None:
    """Remove the pins of `old`'s component versions that `new` no longer reads: once `new` is live, gc may collect
    them. Best effort: a pin left behind lapses after PIN_SECONDS."""
    kept = {(absolute_url(c.manifest.url, root), c.version) for c in new.components}
    earlier = pin_holder(live_url, old.name, relative=False)  # an own-store pin's holder before issue 47
    for url, writer, version, holder in _pins(old, root, live_url, client):
        if writer is not None and (url, version) not in kept:
            for name in {holder, earlier}:
                try:
                    writer.remove(lease_key(version, name))
                except (ShardLoaderError, OSError):
                    continue
