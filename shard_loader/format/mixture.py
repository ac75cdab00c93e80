"""The published mixture file (`mixtures/<name>.json`, `mixtures/<name>/<version>.json`; docs/format.md): its typed
records, the JSON the builder writes from them and the parser the loader (and the builder, reading back what it wrote)
validates every field with, each error naming the file and the field."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ManifestError
from .codec import Count, NonEmpty, Positive, Sha256, document_version, from_dict, parse_json, stored_as, to_plain
from .entries import FileRef
from .keys import check_key
from .manifest import Manifest, TokenDtype

MIXTURE_FORMAT = "shard-mixture"
MIXTURE_FORMAT_VERSION = 1
MIXTURE_VERSIONS = (1,)  # the format versions this reader knows
WEIGHT_TOLERANCE = 1e-6  # the builder writes weights normalised to sum to 1
MAX_COMPONENTS = 1024  # far past any real blend; each component is a dataset opened, cached and held by every worker
MAX_TOKENS_PER_EPOCH = 1 << 48  # 2.8e14: stream positions stay within 64 bits for 32,768 epochs even at stride 1
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class MixtureTokenizer:
    fingerprint: NonEmpty
    vocab_size: Count
    eod_id: Count
    token_dtype: TokenDtype

    def check(self, manifest: Manifest, where: str) -> None:
        """Refuse a component manifest whose tokenizer or token dtype is not this record's (a forged record would be
        served and printed as the mixture's), naming the field and both values."""
        tok = manifest.tokenizer
        found = {"fingerprint": tok.fingerprint, "vocab_size": tok.vocab_size, "eod_id": tok.eod_id}
        for name, value in found.items():
            if value != getattr(self, name):
                raise ManifestError(f"{where}: tokenizer {name} {value!r} is not the mixture's {getattr(self, name)!r}")
        if manifest.token_dtype != self.token_dtype:
            raise ManifestError(f"{where}: token_dtype {manifest.token_dtype} is not the mixture's {self.token_dtype}")


@dataclass(frozen=True)
class PinnedManifest:
    """A component's dataset, pinned: its manifest's URL (relative to the mixture's store root, or absolute), size and
    sha256."""

    url: NonEmpty
    size: Count
    sha256: Sha256

    @property
    def ref(self) -> FileRef:
        """The manifest as a file to fetch and verify."""
        return FileRef(self.url, self.size, self.sha256)


@dataclass(frozen=True)
class Component:
    """One component: its share of training tokens, and its dataset pinned by manifest URL, size and sha256."""

    name: NonEmpty
    weight: Positive  # share of training tokens; the weights of a mixture sum to 1
    manifest: PinnedManifest
    dataset: NonEmpty
    version: NonEmpty
    tokens: dict[str, Count]  # the component's own tokens per split, from its manifest
    max_repeats: Positive | None = None  # the most passes over this component one mixture epoch may take

    @property
    def relative(self) -> bool:
        """Whether the manifest URL is relative to the mixture's store root (else a path or URL of its own)."""
        return not (self.manifest.url.startswith("/") or _SCHEME.match(self.manifest.url))

    def repeats(self, split: str, tokens_per_epoch: int) -> float:
        """Passes over this component's `split` that one mixture epoch of `tokens_per_epoch` tokens takes."""
        held = self.tokens.get(split, 0)
        return self.weight * tokens_per_epoch / held if held else float("inf")


@dataclass(frozen=True)
class ComponentSummary:
    """What one component amounts to in a mixture epoch of a split: its weight against its natural share (its part of
    the components' tokens), the tokens it serves per mixture epoch and the passes over its own tokens that takes.
    `shard-loader info`, `shard-assets mix` and the mixture asset's metadata all show these."""

    name: str
    dataset: str
    version: str
    weight: float
    natural: float
    tokens: int
    per_epoch: int
    epochs: float
    max_repeats: float | None


@dataclass(frozen=True)
class MixtureFile:
    """A mixture file, its fields as published (after `format` and `format_version`)."""

    name: NonEmpty = field(metadata=stored_as("mixture.name"))
    version: NonEmpty = field(metadata=stored_as("mixture.version"))
    created_at: str
    tokenizer: MixtureTokenizer
    tokens_per_epoch: dict[str, Count]
    components: tuple[Component, ...]
    lineage: dict[str, Any] = field(default_factory=dict)

    def summary(self, split: str, tokens: list[int] | None = None) -> list[ComponentSummary]:
        """Each component's summary for `split`, from the tokens its pin records, or `tokens` (per component, as its
        verified manifest says)."""
        held = [c.tokens.get(split, 0) for c in self.components] if tokens is None else tokens
        total, budget = sum(held), self.tokens_per_epoch.get(split, 0)
        return [
            ComponentSummary(
                c.name,
                c.dataset,
                c.version,
                c.weight,
                n / total if total else 0.0,
                n,
                round(c.weight * budget),
                c.weight * budget / n if n else float("inf"),
                c.max_repeats,
            )
            for c, n in zip(self.components, held)
        ]

    def epoch_tokens(self, split: str, origin: str) -> int:
        """Tokens one mixture epoch serves of `split`; refused naming the split when the file has none for it."""
        if split not in self.tokens_per_epoch:
            raise ManifestError(
                f"{origin}: tokens_per_epoch has no split {split!r} (has {sorted(self.tokens_per_epoch)}); the mixture "
                "cannot serve it"
            )
        if problem := self.epoch_too_large(split):
            raise ManifestError(f"{origin}: {problem}")
        return self.tokens_per_epoch[split]

    def epoch_too_large(self, split: str) -> str | None:
        """What is wrong with `split`'s tokens_per_epoch if it is past MAX_TOKENS_PER_EPOCH (epoch arithmetic would
        overflow 64 bits), else None."""
        tokens = self.tokens_per_epoch[split]
        if tokens <= MAX_TOKENS_PER_EPOCH:
            return None
        return (
            f"tokens_per_epoch.{split}: {tokens:,} is more than {MAX_TOKENS_PER_EPOCH:,} (2**48), the most one mixture "
            "epoch may hold; give a smaller budget"
        )

    @property
    def identity(self) -> MixtureFile:
        """What the version covers: everything but when it was made and by which run (a re-run republishes it)."""
        return replace(self, created_at="", lineage={})

    def to_json(self) -> dict[str, Any]:
        """The mixture as the JSON document the builder publishes."""
        return {"format": MIXTURE_FORMAT, "format_version": MIXTURE_FORMAT_VERSION, **to_plain(self)}

    def dumps(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()


def parse_mixture(raw: bytes | str, origin: str = "mixture") -> MixtureFile:
    """Parse and validate a mixture file; `origin` (its URL) names it in every error."""
    data = parse_json(raw, origin)  # nesting bounded, as a manifest's
    document_version(data, origin, MIXTURE_FORMAT, MIXTURE_VERSIONS)
    entries = data.get("components")
    if isinstance(entries, list) and len(entries) > MAX_COMPONENTS:  # refused before each is decoded
        raise ManifestError(
            f"{origin}.components: {len(entries):,} components, more than the {MAX_COMPONENTS:,} a mixture may have "
            "(each is a dataset every worker opens); merge components into datasets"
        )
    doc = from_dict(MixtureFile, data, origin)
    if not doc.components:
        raise ManifestError(f"{origin}.components: a mixture needs at least one component")
    seen: dict[str, int] = {}
    for i, c in enumerate(doc.components):
        if c.relative:
            check_key(c.manifest.url, f"{origin}.components[{i}].manifest.url")
        if c.name in seen:
            raise ManifestError(
                f"{origin}.components[{i}].name: {c.name!r} is also components[{seen[c.name]}]; names must be unique"
            )
        seen[c.name] = i
    total = sum(c.weight for c in doc.components)
    if abs(total - 1) > WEIGHT_TOLERANCE:
        raise ManifestError(
            f"{origin}.components: weights sum to {total:.6g}, not 1 (the builder writes them normalised)"
        )
    return doc
