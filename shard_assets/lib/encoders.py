"""Encoders: the reference tokenization (HF `tokenizers`) and fast engines proven equal to it.

The reference encodes each whole document with `encode_special_tokens = True` and
`add_special_tokens=False`, so a literal special-token string is ordinary text. A fast engine
is chosen from the tokenizer.json itself, only for shapes it is verified to encode exactly,
and every partition runs behind an `ExactnessGuard` that re-encodes a sample with the reference.
"""

from __future__ import annotations

import itertools
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata

import numpy as np

from .background import Background
from .errors import BuildError
from .records import GuardResult

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN2_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
VERIFIED_PATTERNS = {"gpt2": GPT2_PATTERN, "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN}  # each is in tests/test_encoders.py
VERIFIED_NORMALIZERS = (None, "NFC")
ON_MISMATCH = ("fail", "reference")


class EncoderError(BuildError):
    """A document cannot be encoded (not valid Unicode) or an engine failed."""


class ExactnessError(BuildError):
    """A fast engine's ids differ from the reference's on a sampled document."""


@dataclass(frozen=True)
class Encoded:
    """All documents' ids concatenated (uint32, no end-of-document ids) and each document's token count."""

    ids: np.ndarray
    lengths: np.ndarray

    @cached_property
    def offsets(self) -> np.ndarray:
        """`len(lengths) + 1` offsets into `ids`, first 0."""
        return np.concatenate(([0], np.cumsum(self.lengths)))

    def document(self, i: int) -> np.ndarray:
        """The ids of document `i`."""
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def check_no_eod(self, eod_id: int, where: str) -> None:
        """EncoderError if a document's text produced `eod_id` (each document must hold it once, at its end)."""
        inside = np.flatnonzero(self.ids == eod_id)
        if inside.size:
            doc = int(np.searchsorted(self.offsets, inside[0], side="right")) - 1
            raise EncoderError(f"{where}: document {doc} of the batch encodes to the end-of-document id {eod_id} inside its text")

    def with_eod(self, eod_id: int, dtype: str, where: str) -> tuple[np.ndarray, np.ndarray]:
        """Tokens with `eod_id` after each document, and lengths with it; EncoderError if a text produced `eod_id`."""
        self.check_no_eod(eod_id, where)
        return np.insert(self.ids.astype(dtype, copy=False), self.offsets[1:], eod_id), self.lengths + 1


class Encoder(ABC):
    """Encodes a batch of whole documents into flat ids; `name`, `version` and `reason` say which engine and why."""

    name: str
    version: str
    reason: str

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Flat ids and per-document lengths for `texts`; an invalid document is named in the error."""
        texts = list(texts)
        try:
            return self._encode(texts)
        except (TypeError, UnicodeError) as exc:
            bad = next((i for i, t in enumerate(texts) if not _is_valid_unicode(t)), None)
            where = f"document {bad} of the batch is not valid Unicode (a lone surrogate)" if bad is not None else str(exc)
            raise EncoderError(f"{self.name}: {where}") from None

    @abstractmethod
    def _encode(self, texts: list[str]) -> Encoded: ...


def _is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ReferenceEncoder(Encoder):
    """HF `tokenizers`: the definition of the correct ids (whole documents, special-token strings as text)."""

    name = "tokenizers"

    def __init__(self, tokenizer_json: str, reason: str = "the reference"):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.tokenizer.encode_special_tokens = True
        self.version = metadata.version("tokenizers")
        self.reason = reason

    def _encode(self, texts: list[str]) -> Encoded:
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.uint32, count=int(lengths.sum()))
        return Encoded(ids, lengths)


class FastokensEncoder(Encoder):
    """fastokens: loads tokenizer.json, encodes a batch into one flat uint32 buffer without Python objects per token."""

    name = "fastokens"

    def __init__(self, tokenizer_json: str, reason: str):
        import fastokens

        self.tokenizer = fastokens.Tokenizer.from_json_str(tokenizer_json)
        self.version = metadata.version("fastokens")
        self.reason = reason

    def _encode(self, texts: list[str]) -> Encoded:
        ids, offsets = self.tokenizer.encode_batch_flat(texts, add_special_tokens=False, split_special_tokens=True)
        return Encoded(np.frombuffer(ids, dtype="<u4"), np.diff(np.frombuffer(offsets, dtype="<u8")).astype(np.int64))


def _pattern(pre_tokenizer: dict) -> str | None:
    """The split regex of a byte-level pre-tokenizer, or None when it is not a byte-level shape."""
    kind = pre_tokenizer.get("type")
    if kind == "ByteLevel":
        return GPT2_PATTERN if pre_tokenizer.get("use_regex", True) and not pre_tokenizer.get("add_prefix_space") else None
    parts = pre_tokenizer.get("pretokenizers", []) if kind == "Sequence" else []
    if len(parts) != 2:
        return None
    split, byte_level = parts
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    if byte_level.get("type") != "ByteLevel" or byte_level.get("use_regex", True) or byte_level.get("add_prefix_space"):
        return None
    return split.get("pattern", {}).get("Regex")


def _normalizer(normalizer: dict | None) -> str | None:
    """The normalizer's type, or 'Sequence[...]' for a sequence; a one-element sequence counts as its element."""
    if normalizer is None:
        return None
    if normalizer.get("type") == "Sequence":
        inner = normalizer.get("normalizers", [])
        return _normalizer(inner[0]) if len(inner) == 1 else f"Sequence{[n.get('type') for n in inner]}"
    return normalizer.get("type")


def unsupported_reason(config: dict) -> str | None:
    """Why no fast engine is verified for this tokenizer.json shape, or None when fastokens is."""
    model = config.get("model") or {}
    if model.get("type") != "BPE":
        return f"model type {model.get('type')!r} is not BPE"
    for key in ("byte_fallback", "dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"BPE option {key}={model[key]!r}"
    normalizer = _normalizer(config.get("normalizer"))
    if normalizer not in VERIFIED_NORMALIZERS:
        return f"normalizer {normalizer!r} is not one of {VERIFIED_NORMALIZERS}"
    pattern = _pattern(config.get("pre_tokenizer") or {})
    if pattern is None:
        return "the pre-tokenizer is not ByteLevel or Split(regex) + ByteLevel(use_regex=false) without a prefix space"
    if pattern not in VERIFIED_PATTERNS.values():
        return f"the split regex {pattern[:60]!r} is not one of the verified ones ({', '.join(VERIFIED_PATTERNS)})"
    plain = [t["content"] for t in config.get("added_tokens", []) if not t.get("special")]
    if plain:
        return f"{len(plain)} added tokens are not special (first {plain[0]!r})"
    if config.get("truncation") or config.get("padding"):
        return "truncation or padding is set"
    return None


def select_encoder(tokenizer_json: str) -> Encoder:
    """The fastest engine verified for this tokenizer.json; the reference, with the reason, otherwise."""
    reason = unsupported_reason(json.loads(tokenizer_json))
    if reason is None:
        try:
            return FastokensEncoder(tokenizer_json, "fastokens: byte-level BPE of a verified shape")
        except ImportError:
            reason = "fastokens is not installed"
        except Exception as exc:  # an engine that cannot load this file falls back, saying why
            reason = f"fastokens cannot load the tokenizer: {exc}"
    return ReferenceEncoder(tokenizer_json, f"reference fallback: {reason}")


def encoders_for(tokenizer_json: str) -> tuple[Encoder, ReferenceEncoder]:
    """The selected engine and the reference that guards it (the same object when the engine is the reference)."""
    engine = select_encoder(tokenizer_json)
    return engine, engine if isinstance(engine, ReferenceEncoder) else ReferenceEncoder(tokenizer_json)


GUARD_DEPTH = 8  # sampled batches the guard's thread may lag behind the engine (1% of their text, and their ids)


@dataclass
class ExactnessGuard:
    """Re-encodes a deterministic sample of a partition's documents with the reference and compares ids.

    Of the partition's `total` documents it samples every `stride`-th from the first, the stride
    chosen so that at least max(`minimum`, `fraction` of them) are sampled, and the longest one.
    The reference runs on the guard's own thread (it releases the GIL), beside the engine; `finish`
    waits for it, and a difference is raised by the next `check` or by `finish`.
    """

    engine: Encoder
    reference: Encoder
    partition: str
    total: int
    fraction: float = 0.01
    minimum: int = 64
    policy: str = "fail"
    documents: int = 0
    tokens: int = 0
    sampled: int = 0
    sampled_tokens: int = 0
    differing: int = 0
    first_differing: int | None = None
    _longest: tuple[int, int, str, np.ndarray] | None = field(default=None, repr=False)
    _thread: Background | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.policy not in ON_MISMATCH:
            raise BuildError(f"partition {self.partition}: on_mismatch policy {self.policy!r} is not one of {ON_MISMATCH}")
        self.stride = max(1, min(math.floor(1 / self.fraction), self.total // self.minimum))  # ceil(total / stride) >= both bounds
        if self.checks:
            self._thread = Background(f"guard-{self.partition}", GUARD_DEPTH)

    @property
    def checks(self) -> bool:
        """False only when the engine is the reference itself: there is nothing to compare."""
        return self.engine is not self.reference

    def check(self, texts: Sequence[str], encoded: Encoded) -> None:
        """Queue the sampled documents of this batch (the next ones of the partition) for comparison; ExactnessError for an earlier difference."""
        first, n = self.documents, len(texts)
        self.documents += n
        self.tokens += int(encoded.lengths.sum())
        if self._thread is None or not n:
            return
        index = np.arange(first, first + n)
        picked = np.flatnonzero(index % self.stride == 0)
        if picked.size:
            self._thread.submit(self._compare, [texts[i] for i in picked], [encoded.document(int(i)).copy() for i in picked], index[picked])
        chars = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        longest = int(chars.argmax())
        if self._longest is None or chars[longest] > self._longest[0]:
            self._longest = (int(chars[longest]), first + longest, texts[longest], encoded.document(longest).copy())

    def _compare(self, texts: list[str], ids: list[np.ndarray], index: np.ndarray) -> None:
        """On the guard's thread: the reference's ids of `texts` against the engine's; ExactnessError at the first batch that differs."""
        if self.differing:  # the partition is failed or redone anyway: compare no more
            return
        expected = self.reference.encode(texts)
        self.sampled += len(texts)
        self.sampled_tokens += int(expected.lengths.sum())
        for i, got in enumerate(ids):
            if not np.array_equal(got, expected.document(i)):
                self.differing += 1
                self.first_differing = int(index[i]) if self.first_differing is None else self.first_differing
        if self.differing:
            raise ExactnessError(
                f"partition {self.partition}: {self.engine.name} {self.engine.version} differs from the reference "
                f"on {self.differing} of {self.sampled} sampled documents (first: document {self.first_differing})"
            )

    def end(self) -> None:
        """No more documents: queue the partition's longest one (unless already sampled) without waiting for it."""
        if self._thread is not None and self._longest is not None:
            _, at, text, ids = self._longest
            self._longest = None
            if at % self.stride:
                self._thread.submit(self._compare, [text], [ids], np.array([at]))

    def finish(self) -> GuardResult:
        """`end`, then wait for every comparison; the result, or ExactnessError."""
        if self._thread is None:
            return self.result()
        try:
            self.end()
            self._thread.drain()
        finally:
            self.close()
        return self.result()

    def close(self) -> None:
        """Stop the guard's thread without waiting for queued comparisons (the partition failed elsewhere)."""
        if self._thread is not None:
            self._thread.close()
            self._thread = None

    def result(self, reencoded: bool = False) -> GuardResult:
        """The guard's counts so far."""
        return GuardResult(
            self.engine.name, self.engine.version, self.engine.reason, self.documents, self.tokens, self.sampled,
            self.sampled_tokens, self.differing, self.first_differing, self.policy, reencoded,
        )
