"""The published mixture file (`mixtures/<name>.json`, `mixtures/<name>/<version>.json`; docs/format.md): its typed
records, the JSON the builder writes from them and the parser the loader (and the builder, reading back what it wrote)
validates every field with, each error naming the file and the field."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import ManifestError
from .entries import FileRef
from .fields import SHA256_HEX, count, counts, format_version, parse_json, text
from .fields import field as get_field
from .keys import check_key
from .manifest import TOKEN_DTYPES, Manifest

MIXTURE_FORMAT = "shard-mixture"
MIXTURE_FORMAT_VERSION = 1
MIXTURE_VERSIONS = (1,)  # the format versions this reader knows
WEIGHT_TOLERANCE = 1e-6  # the builder writes weights normalised to sum to 1
MAX_COMPONENTS = 1024  # far past any real blend; each component is a dataset opened, cached and held by every worker
MAX_TOKENS_PER_EPOCH = 1 << 48  # 2.8e14: stream positions stay within 64 bits for 32,768 epochs even at stride 1
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class MixtureTokenizer:
    fingerprint: str
    vocab_size: int
    eod_id: int
    token_dtype: str

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
class Component:
    """One component: its share of training tokens, and its dataset pinned by manifest URL, size and sha256."""

    name: str
    weight: float  # share of training tokens; the weights of a mixture sum to 1
    manifest: (
        FileRef  # key: the pinned manifest's URL (`url` in the file), relative to the mixture's store root or absolute
    )
    dataset: str
    version: str
    tokens: dict[str, int]  # the component's own tokens per split, from its manifest
    max_repeats: float | None = None  # the most passes over this component one mixture epoch may take

    @property
    def relative(self) -> bool:
        """Whether the manifest URL is relative to the mixture's store root (else a path or URL of its own)."""
        return not (self.manifest.key.startswith("/") or _SCHEME.match(self.manifest.key))

    def repeats(self, split: str, tokens_per_epoch: int) -> float:
        """Passes over this component's `split` that one mixture epoch of `tokens_per_epoch` tokens takes."""
        held = self.tokens.get(split, 0)
        return self.weight * tokens_per_epoch / held if held else float("inf")

    def to_json(self) -> dict[str, Any]:
        pinned = {"url": self.manifest.key, "size": self.manifest.size, "sha256": self.manifest.sha256}
        return {**asdict(self), "manifest": pinned, "tokens": dict(self.tokens)}


@dataclass(frozen=True)
class MixtureFile:
    name: str
    version: str
    created_at: str
    tokenizer: MixtureTokenizer
    tokens_per_epoch: dict[str, int]
    components: tuple[Component, ...]
    lineage: dict[str, Any] = field(default_factory=dict)

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
        return {
            "format": MIXTURE_FORMAT,
            "format_version": MIXTURE_FORMAT_VERSION,
            "mixture": {"name": self.name, "version": self.version},
            "created_at": self.created_at,
            "tokenizer": asdict(self.tokenizer),
            "tokens_per_epoch": dict(self.tokens_per_epoch),
            "components": [c.to_json() for c in self.components],
            "lineage": self.lineage,
        }

    def dumps(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()


def _component(obj: Any, where: str) -> Component:
    pinned = get_field(obj, "manifest", dict, where)
    url = text(pinned, "url", f"{where}.manifest")
    sha = get_field(pinned, "sha256", str, f"{where}.manifest")
    if not SHA256_HEX.match(sha):
        raise ManifestError(f"{where}.manifest.sha256: {sha!r} is not 64 lowercase hex digits ({url})")
    weight = get_field(obj, "weight", (int, float), where)
    if not math.isfinite(weight) or weight <= 0:
        raise ManifestError(f"{where}.weight: must be a positive number, got {weight!r}")
    repeats = obj.get("max_repeats")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, (int, float)) or repeats <= 0):
        raise ManifestError(f"{where}.max_repeats: must be a positive number or null, got {repeats!r}")
    component = Component(
        name=text(obj, "name", where),
        weight=float(weight),
        manifest=FileRef(url, count(pinned, "size", f"{where}.manifest"), sha),
        dataset=text(obj, "dataset", where),
        version=text(obj, "version", where),
        tokens=counts(obj, "tokens", where),
        max_repeats=None if repeats is None else float(repeats),
    )
    if component.relative:
        check_key(url, f"{where}.manifest.url")
    return component


def parse_mixture(raw: bytes | str, origin: str = "mixture") -> MixtureFile:
    """Parse and validate a mixture file; `origin` (its URL) names it in every error."""
    doc = parse_json(raw, origin)  # nesting bounded, as a manifest's
    format_version(doc, origin, MIXTURE_FORMAT, MIXTURE_VERSIONS)
    mix = get_field(doc, "mixture", dict, origin)
    tok = get_field(doc, "tokenizer", dict, origin)
    tokenizer = MixtureTokenizer(
        fingerprint=text(tok, "fingerprint", f"{origin}.tokenizer"),
        vocab_size=count(tok, "vocab_size", f"{origin}.tokenizer"),
        eod_id=count(tok, "eod_id", f"{origin}.tokenizer"),
        token_dtype=text(tok, "token_dtype", f"{origin}.tokenizer"),
    )
    if tokenizer.token_dtype not in TOKEN_DTYPES:
        raise ManifestError(
            f"{origin}.tokenizer.token_dtype: {tokenizer.token_dtype!r} is not one of {sorted(TOKEN_DTYPES)}"
        )
    entries = get_field(doc, "components", list, origin)
    if not entries:
        raise ManifestError(f"{origin}.components: a mixture needs at least one component")
    if len(entries) > MAX_COMPONENTS:
        raise ManifestError(
            f"{origin}.components: {len(entries):,} components, more than the {MAX_COMPONENTS:,} a mixture may have "
            "(each is a dataset every worker opens); merge components into datasets"
        )
    components = tuple(_component(c, f"{origin}.components[{i}]") for i, c in enumerate(entries))
    seen: dict[str, int] = {}
    for i, c in enumerate(components):
        if c.name in seen:
            raise ManifestError(
                f"{origin}.components[{i}].name: {c.name!r} is also components[{seen[c.name]}]; names must be unique"
            )
        seen[c.name] = i
    total = sum(c.weight for c in components)
    if abs(total - 1) > WEIGHT_TOLERANCE:
        raise ManifestError(
            f"{origin}.components: weights sum to {total:.6g}, not 1 (the builder writes them normalised)"
        )
    lineage = doc.get("lineage", {})
    if not isinstance(lineage, dict):
        raise ManifestError(f"{origin}.lineage: expected an object")
    return MixtureFile(
        name=text(mix, "name", f"{origin}.mixture"),
        version=text(mix, "version", f"{origin}.mixture"),
        created_at=get_field(doc, "created_at", str, origin),
        tokenizer=tokenizer,
        tokens_per_epoch=counts(doc, "tokens_per_epoch", origin),
        components=components,
        lineage=lineage,
    )
