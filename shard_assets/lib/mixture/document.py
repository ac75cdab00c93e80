"""The published mixture file (format `shard-mixture` 1, docs/format.md): its keys, its typed form, its version id,
and its JSON. The loader reads the same file; the builder reads back what it wrote to audit exactly that version."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from shard_loader.format import check_key

from ..errors import RecordError
from ..records import from_dict

FORMAT_NAME = "shard-mixture"
FORMAT_VERSION = 1
MIXTURES_DIR = "mixtures"


def live_mixture_key(name: str) -> str:
    """The live mixture: a byte copy of the latest version whose audits passed."""
    return check_key(f"{MIXTURES_DIR}/{name}.json", "mixture name")


def mixture_version_key(name: str, version: str) -> str:
    """A mixture version, written once and never rewritten."""
    return check_key(f"{MIXTURES_DIR}/{name}/{version}.json", "mixture version")


@dataclass(frozen=True)
class PinnedManifest:
    """A component's pinned manifest: `manifests/<version>.json` of its dataset, by URL (relative to the mixture's
    store root when it lies under it), size and sha256 of its bytes."""

    url: str
    size: int
    sha256: str


@dataclass(frozen=True)
class MixtureTokenizer:
    fingerprint: str
    vocab_size: int
    eod_id: int
    token_dtype: str


@dataclass(frozen=True)
class MixtureComponent:
    name: str
    weight: float  # share of training tokens; the weights of a mixture sum to 1
    manifest: PinnedManifest
    dataset: str
    version: str
    tokens: dict[str, int]  # the component's own tokens per split, from its manifest
    max_repeats: float | None = None

    def repeats(self, split: str, tokens_per_epoch: int) -> float:
        """Passes over this component's `split` that one mixture epoch of `tokens_per_epoch` tokens takes."""
        held = self.tokens.get(split, 0)
        return self.weight * tokens_per_epoch / held if held else float("inf")


@dataclass(frozen=True)
class Mixture:
    name: str
    version: str
    created_at: str
    tokenizer: MixtureTokenizer
    tokens_per_epoch: dict[str, int]
    components: tuple[MixtureComponent, ...]
    lineage: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "mixture": {"name": self.name, "version": self.version},
            "created_at": self.created_at,
            "tokenizer": asdict(self.tokenizer),
            "tokens_per_epoch": dict(self.tokens_per_epoch),
            "components": [asdict(c) for c in self.components],
            "lineage": self.lineage,
        }

    def dumps(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()

    @property
    def identity(self) -> Mixture:
        """What the version covers: everything but when it was made and by which run (a re-run republishes it)."""
        return replace(self, created_at="", lineage={})


def mixture_version(name: str, tokens_per_epoch: dict[str, int], components: tuple[MixtureComponent, ...]) -> str:
    """`<name>-<16 hex>`: a sha256 over the name, the tokens per epoch and each component's (name, weight, manifest
    sha256, max_repeats), so the same inputs republish the same version."""
    body = json.dumps(
        {
            "name": name,
            "tokens_per_epoch": tokens_per_epoch,
            "components": [[c.name, c.weight, c.manifest.sha256, c.max_repeats] for c in components],
        },
        sort_keys=True,
    )
    return f"{name}-{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def parse_mixture(raw: bytes, origin: str) -> Mixture:
    """A mixture file read back, every field checked; errors name `origin` and the field."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{origin}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME or doc.get("format_version") != FORMAT_VERSION:
        found = (doc.get("format"), doc.get("format_version")) if isinstance(doc, dict) else type(doc).__name__
        raise RecordError(f"{origin}: not a {FORMAT_NAME} {FORMAT_VERSION} file (format, format_version: {found})")
    head = from_dict(_Head, doc.get("mixture"), f"{origin}.mixture")
    body = from_dict(_Body, {k: v for k, v in doc.items() if k in _BODY_FIELDS}, origin)
    return Mixture(head.name, head.version, body.created_at, body.tokenizer, body.tokens_per_epoch, body.components, body.lineage)


@dataclass(frozen=True)
class _Head:
    name: str
    version: str


@dataclass(frozen=True)
class _Body:
    created_at: str
    tokenizer: MixtureTokenizer
    tokens_per_epoch: dict[str, int]
    components: tuple[MixtureComponent, ...]
    lineage: dict[str, Any]


_BODY_FIELDS = ("created_at", "tokenizer", "tokens_per_epoch", "components", "lineage")
