"""Encoders: the reference tokenization (HF `tokenizers`) and fast engines proven equal to it.

The reference encodes each whole document with `encode_special_tokens = True` and `add_special_tokens=False`, so a
literal special-token string is ordinary text. A fast engine is chosen from the tokenizer.json itself, only for shapes
it is verified to encode exactly, and every partition runs behind an `ExactnessGuard` that re-encodes a sample with the
reference, long documents in pieces cut where the verified split regexes always split."""

from __future__ import annotations

import itertools
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from typing import Any

import numpy as np

from .background import Background
from .errors import BuildError
from .records import GuardResult

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# each is in tests/builder/test_encoders.py
VERIFIED_PATTERNS = {"gpt2": GPT2_PATTERN, "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN}
# Where each verified split regex always splits whatever precedes or follows (no match spans the position, none before
# it reads past it), so the reference's ids of a document are its ids of the pieces between such cuts, joined
# (tests/builder/test_encoders.py proves it over adversarial text). GPT-2: a non-space then a space, tab or line break
# (no alternative carries a non-space run into whitespace). Llama 3 / Qwen2: a non-space then a space or tab
# (punctuation there takes only line breaks), and a line break then a non-space (a run ending in a line break is one
# match that nothing extends). Python's \S also counts \x1c-\x1f as space, so it never cuts where the reference sees
# whitespace; and NFC composes nothing across a space, tab or line break, so normalising the pieces equals normalising
# the whole.
_CUT_BEFORE_SPACE = r"(?<=\S)(?=[\t ])"
SAFE_CUTS = {
    GPT2_PATTERN: re.compile(r"(?<=\S)(?=[\t\n\r ])"),
    LLAMA3_PATTERN: re.compile(rf"{_CUT_BEFORE_SPACE}|(?<=[\r\n])(?=\S)"),
    QWEN2_PATTERN: re.compile(rf"{_CUT_BEFORE_SPACE}|(?<=[\r\n])(?=\S)"),
}
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
            raise EncoderError(
                f"{where}: document {doc} of the batch encodes to the end-of-document id {eod_id} inside its text"
            )

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
            where = str(exc) if bad is None else f"document {bad} of the batch is not valid Unicode (a lone surrogate)"
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
    """HF `tokenizers`: the definition of the correct ids (whole documents, special-token strings as text).

    `cuts` finds where a document may be cut without changing its ids: for a verified shape its split
    regex's `SAFE_CUTS`, otherwise None (no cut is known to be safe)."""

    name = "tokenizers"

    def __init__(self, tokenizer_json: str, reason: str = "the reference"):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.tokenizer.encode_special_tokens = True
        self.version = metadata.version("tokenizers")
        self.reason = reason
        config = json.loads(tokenizer_json)
        pattern = _pattern(config["pre_tokenizer"])
        self.cuts = None if unsupported_reason(config) or pattern is None else SAFE_CUTS[pattern]

    def _encode(self, texts: list[str]) -> Encoded:
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        ids = np.fromiter(
            itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.uint32, count=int(lengths.sum())
        )
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


def _pattern(pre_tokenizer: dict[str, Any]) -> str | None:
    """The split regex of a byte-level pre-tokenizer, or None when it is not a byte-level shape."""
    kind = pre_tokenizer.get("type")
    if kind == "ByteLevel":
        plain = pre_tokenizer.get("use_regex", True) and not pre_tokenizer.get("add_prefix_space")
        return GPT2_PATTERN if plain else None
    parts = pre_tokenizer.get("pretokenizers", []) if kind == "Sequence" else []
    if len(parts) != 2:
        return None
    split, byte_level = parts
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    if byte_level.get("type") != "ByteLevel" or byte_level.get("use_regex", True) or byte_level.get("add_prefix_space"):
        return None
    regex = split.get("pattern", {}).get("Regex")
    return regex if isinstance(regex, str) else None


def _normalizer(normalizer: dict[str, Any] | None) -> str | None:
    """The normalizer's type, or 'Sequence[...]' for a sequence; a one-element sequence counts as its element."""
    if normalizer is None:
        return None
    if normalizer.get("type") == "Sequence":
        inner = normalizer.get("normalizers", [])
        return _normalizer(inner[0]) if len(inner) == 1 else f"Sequence{[n.get('type') for n in inner]}"
    kind = normalizer.get("type")
    return kind if kind is None or isinstance(kind, str) else str(kind)


def unsupported_reason(config: dict[str, Any]) -> str | None:
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


def piece_bounds(text: str, cuts: re.Pattern[str] | None, size: int) -> list[int]:
    """0, then the first safe cut at least `size` characters after the previous bound, and so on, then len(text):
    the bounds of `text`'s pieces (one piece when it is short or `cuts` finds none)."""
    bounds = [0]
    while cuts is not None and len(text) - bounds[-1] > size and (cut := cuts.search(text, bounds[-1] + size)):
        bounds.append(cut.start())
    return bounds + [len(text)]


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


_BUILT: dict[str, tuple[Encoder, ReferenceEncoder]] = {}  # by tokenizer fingerprint, the latest last
KEEP_BUILT = 2  # a worker serves one tokenizer, two while it changes


def encoders_of(fingerprint: str, load: Callable[[], str]) -> tuple[Encoder, ReferenceEncoder]:
    """`encoders_for` the tokenizer whose file has this fingerprint (its content hash, so the file never changes under
    it), built once per process and reused by every partition and run after it; `load` reads the file when they are
    not built yet."""
    if fingerprint not in _BUILT:
        while len(_BUILT) >= KEEP_BUILT:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[fingerprint] = encoders_for(load())
    return _BUILT[fingerprint]


GUARD_DEPTH = 8  # sampled batches the guard's thread may lag behind the engine (their sampled text, and its ids)
# The reference's share of a partition's tokens, above GUARD_FLOOR_TOKENS. The reference is ~120x slower than the
# engine, so a share s costs ~120s of the engine's time (benchmarks/bench_guard.py, web-like partitions of 9.4M tokens:
# the guard at 0.02 / 0.005 / 0.002 / 0.001 cost 1.64 / 0.65 / 0.30 / 0.27 engine-times, comparing 49 / 15 / 10 / 8
# documents a partition; the planted classes (1 in 100 documents, documents of one script, the ends of documents over
# 64K characters) were caught in the same partitions at 0.005 and 0.002, 1 in 100 in fewer at 0.001). Below 0.002 the
# floor and the longest document's piece are most of the cost. A class of difference in a share f of documents escapes
# a build comparing n documents in all with probability (1 - f)^n: at 2T tokens in 1B-token partitions ~600K
# documents, so f = 1e-5 is caught with 1 - e^-6.
GUARD_BUDGET = 0.002
GUARD_FLOOR_TOKENS = 1 << 13  # compared whatever the partition's size (a partition this small is compared whole)
PIECE_CHARS = 1 << 15  # a longer document is compared in pieces of about this many characters (~8K tokens)
# text this long without a safe cut (one pre-token, a whitespace run) is not given to the reference
MAX_PIECE_CHARS = 1 << 20
ENGINE_GROUP_CHARS = 4 << 20  # the engine re-encodes a long document's pieces this much text at a time
# the reference encodes at most this much text per call (~400 bytes a token while it does)
REFERENCE_GROUP_CHARS = 1 << 18


@dataclass(frozen=True)
class _Sample:
    """A document queued for comparison: its place in the partition, its text, the engine's ids, how many of its pieces
    the reference compares, and whether it counts as a sampled document (not when the strided sample holds it
    already)."""

    index: int
    text: str
    ids: np.ndarray
    pieces: int = 1
    counted: bool = True


@dataclass(frozen=True)
class _Piece:
    """Characters `start`-`stop` of a sampled document, and the engine's ids of them within its ids of the whole
    document."""

    sample: _Sample
    start: int
    stop: int
    ids: np.ndarray

    @property
    def text(self) -> str:
        return self.sample.text[self.start : self.stop]

    @property
    def where(self) -> str:
        """'document N', and the characters when the piece is not the whole document."""
        n = len(self.sample.text)
        return f"document {self.sample.index}" + (
            f", characters {self.start:,}-{self.stop:,} of {n:,}" if self.stop - self.start < n else ""
        )


def _runs(sizes: Sequence[int], limit: int) -> list[range]:
    """Consecutive index ranges whose sizes add up to at most `limit` (at least one index each)."""
    runs, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > limit:
            runs.append(range(start, i))
            start, total = i, 0
        total += size
    return runs + [range(start, len(sizes))] if sizes else runs


def _spread(candidates: list[int], k: int, seed: int) -> list[int]:
    """`k` of `candidates`: all of them, or one picked by `seed`, or the first, the last and evenly between."""
    if k >= len(candidates):
        return candidates
    if k == 1:
        return [candidates[seed % len(candidates)]]
    return [candidates[round(i * (len(candidates) - 1) / (k - 1))] for i in range(k)]


@dataclass
class ExactnessGuard:
    """Re-encodes a deterministic sample of a partition's documents with the reference and compares ids.

    Of the partition's `total` documents it samples every `stride`-th from the first, the stride chosen so that at least
    max(`minimum`, `fraction` of them) are sampled while the budget allows, and the longest one. The budget: the
    reference's tokens stay within GUARD_FLOOR_TOKENS + `budget` of the tokens seen so far (estimated from the engine's
    counts, so the sample depends only on the data), plus one piece of the longest document, which is compared at least
    in part whatever the budget. A document longer than PIECE_CHARS is compared in pieces cut at the reference's safe
    cuts (its ids are its pieces' ids joined), so the reference never holds a whole long document: the engine re-encodes
    every piece to find each one's ids within the whole document's (a mismatch there is a difference too), and the
    reference compares one piece of a strided document and as many pieces of the longest as the budget leaves, spread
    over it from its first to its last. The reference runs on the guard's own thread (it releases the GIL), beside the
    engine; `finish` waits for it, and a difference is raised by the next `check` or by `finish`."""

    engine: Encoder
    reference: ReferenceEncoder
    partition: str
    total: int
    fraction: float = 0.01
    minimum: int = 64
    policy: str = "fail"
    budget: float = GUARD_BUDGET
    documents: int = 0
    tokens: int = 0
    sampled: int = 0
    sampled_tokens: int = 0
    differing: int = 0
    first_differing: int | None = None
    _where: str = field(default="", repr=False)
    _planned: float = field(default=0.0, repr=False)
    _queued: set[int] = field(default_factory=set, repr=False)
    _longest: tuple[int, int, str, np.ndarray] | None = field(default=None, repr=False)
    _thread: Background | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.policy not in ON_MISMATCH:
            raise BuildError(
                f"partition {self.partition}: on_mismatch policy {self.policy!r} is not one of {ON_MISMATCH}"
            )
        # ceil(total / stride) >= both bounds
        self.stride = max(1, min(math.floor(1 / self.fraction), self.total // self.minimum))
        if self.checks:
            self._thread = Background(f"guard-{self.partition}", GUARD_DEPTH)

    @property
    def checks(self) -> bool:
        """False only when the engine is the reference itself: there is nothing to compare."""
        return self.engine is not self.reference

    @property
    def allowance(self) -> float:
        """The reference's tokens allowed so far: the floor and `budget` of the tokens seen."""
        return GUARD_FLOOR_TOKENS + self.budget * self.tokens

    def check(self, texts: Sequence[str], encoded: Encoded) -> None:
        """Queue the sampled documents of this batch (the next ones of the partition) for comparison; ExactnessError for
        an earlier difference."""
        first, n = self.documents, len(texts)
        self.documents += n
        self.tokens += int(encoded.lengths.sum())
        if self._thread is None or not n:
            return
        chars = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        samples = []
        for i in np.flatnonzero(np.arange(first, first + n) % self.stride == 0).tolist():
            cost = _piece_tokens(int(chars[i]), int(encoded.lengths[i]))
            if self._planned + cost <= self.allowance:
                self._planned += cost
                self._queued.add(first + i)
                samples.append(_Sample(first + i, texts[i], encoded.document(i).copy()))
        if samples:
            self._thread.submit(self._compare, samples)
        longest = int(chars.argmax())
        if self._longest is None or chars[longest] > self._longest[0]:
            self._longest = (int(chars[longest]), first + longest, texts[longest], encoded.document(longest).copy())

    def end(self) -> None:
        """No more documents: queue the partition's longest one (what the budget leaves of it, at least a piece) without
        waiting."""
        if self._thread is None or self._longest is None:
            return
        chars, at, text, ids = self._longest
        self._longest = None
        if at in self._queued and chars <= PIECE_CHARS:  # compared whole already
            return
        cost = _piece_tokens(chars, len(ids))
        pieces = max(1, int((self.allowance - self._planned) // cost))
        self._planned += min(pieces * cost, len(ids))
        self._thread.submit(self._compare, [_Sample(at, text, ids, pieces, counted=at not in self._queued)])

    def _compare(self, samples: list[_Sample]) -> None:
        """On the guard's thread: the reference's ids of the samples' pieces against the engine's; ExactnessError at the
        first call that differs."""
        if self.differing:  # the partition is failed or redone anyway: compare no more
            return
        pieces: list[_Piece] = []
        differs: dict[int, str] = {}
        for sample in samples:
            mine, where = self._pieces(sample)
            pieces += mine
            if where:
                differs[sample.index] = where
        for run in _runs([p.stop - p.start for p in pieces], REFERENCE_GROUP_CHARS):
            expected = self.reference.encode([pieces[k].text for k in run])
            self.sampled_tokens += int(expected.lengths.sum())
            for j, k in enumerate(run):
                piece = pieces[k]
                if piece.sample.index not in differs and not np.array_equal(piece.ids, expected.document(j)):
                    differs[piece.sample.index] = piece.where
        compared = {p.sample.index for p in pieces} | set(differs)
        self.sampled += sum(s.counted and s.index in compared for s in samples)
        if differs:
            self.differing += len(differs)
            if self.first_differing is None:
                self.first_differing, self._where = next(iter(sorted(differs.items())))
            raise ExactnessError(
                f"partition {self.partition}: {self.engine.name} {self.engine.version} differs from the reference "
                f"on {self.differing} of {self.sampled} sampled documents (first: {self._where})"
            )

    def _pieces(self, sample: _Sample) -> tuple[list[_Piece], str]:
        """The pieces of `sample` the reference compares, each with the engine's ids of it within the whole document's,
        and where the engine's ids of the whole document differ from its ids of a piece alone ('' if nowhere): the
        engine re-encodes every piece, so it is checked at every cut (at its own speed: ~1% of the reference's)."""
        text, ids = sample.text, sample.ids
        bounds = piece_bounds(text, self.reference.cuts, PIECE_CHARS)
        comparable = [j for j in range(len(bounds) - 1) if bounds[j + 1] - bounds[j] <= MAX_PIECE_CHARS]
        chosen = set(_spread(comparable, sample.pieces, sample.index))
        if len(bounds) == 2:
            return [_Piece(sample, 0, len(text), ids)] if chosen else [], ""
        pieces: list[_Piece] = []
        offset = 0
        for run in _runs(np.diff(bounds).tolist(), ENGINE_GROUP_CHARS):
            encoded = self.engine.encode([text[bounds[j] : bounds[j + 1]] for j in run])
            for k, j in enumerate(run):
                piece = _Piece(sample, bounds[j], bounds[j + 1], ids[offset : offset + int(encoded.lengths[k])])
                if not np.array_equal(piece.ids, encoded.document(k)) or (
                    j == len(bounds) - 2 and offset + len(piece.ids) != len(ids)
                ):
                    why = "the engine's ids of the whole document differ there from its ids of this piece alone"
                    return pieces, f"{piece.where}: {why}"
                if j in chosen:
                    pieces.append(piece)
                offset += len(piece.ids)
        return pieces, ""

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

    def result(self) -> GuardResult:
        """The guard's counts so far."""
        e = self.engine
        counts = (self.documents, self.tokens, self.sampled, self.sampled_tokens, self.differing, self.first_differing)
        return GuardResult(e.name, e.version, e.reason, *counts, self.policy)


def _piece_tokens(chars: int, tokens: int) -> float:
    """The tokens of the piece of a document that the reference compares, estimated from the engine's count: all of a
    short document, PIECE_CHARS of a long one at its own rate."""
    return float(tokens) if chars <= PIECE_CHARS else tokens * PIECE_CHARS / chars
