"""Reader leases: small records under `readers/<version>/` by which a reader (or whoever pins a version) tells
retention that a version is in use. A lease is live for `seconds` after its object was last written, by the store's
clock (its modification time), so a reader's skewed clock cannot shorten or stretch it; gc keeps every version
with a live lease. The loader writes and renews them; the builder's gc reads them.

While gc collects a version it marks it (`readers/<version>.collecting`): gc marks, then reads the leases, then
deletes; a reader leases, then looks for the mark. So either gc sees the reader's lease and keeps the version, or the
reader sees the mark (or the manifest gone) and refuses to start: never a version deleted under an open reader."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..arguments import MAX_DAYS, MAX_SECONDS
from ..errors import ManifestError
from .codec import from_dict, loads, to_plain
from .keys import check_key

READERS_DIR = "readers"
LEASE_FORMAT = "shard-reader-lease"
KINDS = ("reader", "pin")
_HOLDER = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


COLLECTING_SUFFIX = ".collecting"


def collecting_key(version: str) -> str:
    """gc's mark on a version it is deleting: readers refuse to open it."""
    return check_key(f"{READERS_DIR}/{version}{COLLECTING_SUFFIX}", "collecting mark key")


def lease_key(version: str, holder: str) -> str:
    """Where one holder's lease on one version lives."""
    if not _HOLDER.match(holder):
        raise ManifestError(f"reader lease holder {holder!r}: letters, digits, '.', '_' and '-' only (at most 128)")
    return check_key(f"{READERS_DIR}/{version}/{holder}.json", "reader lease key")


@dataclass(frozen=True)
class Lease:
    """One holder's claim on a version: a training process renewing it (`kind` "reader"), or a pin written by whoever
    launches a run (`kind` "pin"); live for `seconds` after its object was last written."""

    version: str
    holder: str
    kind: str
    seconds: float
    note: str = ""  # who holds it, for gc's listing: host and process, or the pin's author

    def to_bytes(self) -> bytes:
        return (json.dumps({"format": LEASE_FORMAT, **to_plain(self)}, sort_keys=True) + "\n").encode()

    @classmethod
    def parse(cls, raw: bytes, key: str) -> Lease:
        """A lease from its object's bytes; anything else is a ManifestError naming the key (and the field)."""
        try:
            data = loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{key}: not a reader lease ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != LEASE_FORMAT or data.get("kind") not in KINDS:
            found = (data.get("format"), data.get("kind")) if isinstance(data, dict) else type(data).__name__
            raise ManifestError(f"{key}: not a reader lease (format and kind {found!r})")
        lease = from_dict(cls, data, key)
        if not 0 <= lease.seconds <= MAX_SECONDS:  # NaN fails this too: a lease's end must be a date every clock has
            raise ManifestError(
                f"{key}: seconds {lease.seconds} is not from 0 to {MAX_SECONDS:.0f} ({MAX_DAYS} days); it holds "
                "nothing: delete it, or pin the version again with shard-loader pin --for"
            )
        if lease_key(lease.version, lease.holder) != key:
            raise ManifestError(
                f"{key}: a lease of {lease.version}/{lease.holder} for {lease.seconds} s does not belong at this key"
            )
        return lease
