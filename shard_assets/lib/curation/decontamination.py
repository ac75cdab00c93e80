"""Decontamination against the team's eval sets: the eval passages' word n-grams as a sorted array of 64-bit hashes
(the index, in memory about 10 bytes per n-gram plus an 8-byte-per-n-gram bit filter), and the check of a batch of
documents against it, on whole columns.

Words are compared as lm-evaluation-harness's janitor and NeMo Curator compare them: lower-cased, ASCII punctuation
removed, split on whitespace; a document sharing any run of `ngram` such words with a passage is contaminated. The
hashes are polynomial over bytes then words (mod 2**64), computed with prefix sums so a batch costs a few passes
over its bytes and no Python per word."""

from __future__ import annotations

import functools
import hashlib
import io
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SourceError, SpecError
from ..layout import eval_index_key
from ..sources.listing import SourceFile, list_source_files
from ..sources.readers import iter_document_columns
from ..spec import DatasetSpec, SourceSpec
from ..store import ObjectStore
from ..text import normalise_column

if TYPE_CHECKING:
    import pyarrow as pa

RULE = "ngram-v1"  # the word rule and hash; a change of either is a new eval index version
SPACES = bytes(32 if chr(i) in string.whitespace else i for i in range(256))  # ASCII whitespace to a space
PUNCTUATION = string.punctuation.encode()  # removed, as the janitor's translation table removes it
SEPARATOR = b" \x00 "  # between documents: its own word (normalised text holds no NUL), so no n-gram spans two
CHUNK = 1 << 20  # bytes hashed per prefix sum: the power tables stay 16 MiB
BYTE_BASE, WORD_BASE = 0x100000001B3, 0x9E3779B97F4A7C15
FILTER_BITS_PER_NGRAM = 64  # the bit filter's size: about 1.5% of a document's n-grams reach the exact search
READ_BATCH = 1000


@functools.cache
def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """BYTE_BASE**i and its inverse**i mod 2**64 for i < n."""
    up, down = (np.full(n, base, dtype=np.uint64) for base in (BYTE_BASE, pow(BYTE_BASE, -1, 1 << 64)))
    up[0] = down[0] = 1
    return np.cumprod(up, dtype=np.uint64), np.cumprod(down, dtype=np.uint64)


def _word_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A hash of each word's bytes (data[starts[i]:ends[i]]), a chunk of at most CHUNK bytes (or one word) at a time."""
    out = np.empty(len(starts), dtype=np.uint64)
    first = 0
    while first < len(starts):
        lo = int(starts[first])
        last = max(first + 1, int(np.searchsorted(ends, lo + CHUNK, side="right")))
        hi = int(ends[last - 1])
        up, down = _powers(max(CHUNK, 1 << (hi - lo).bit_length()))
        sums = np.zeros(hi - lo + 1, dtype=np.uint64)
        np.cumsum(data[lo:hi].astype(np.uint64) * up[: hi - lo], out=sums[1:])
        s, e = starts[first:last] - lo, ends[first:last] - lo
        out[first:last] = (sums[e] - sums[s]) * down[s]
        first = last
    return out


def _windows(words: np.ndarray, n: int) -> np.ndarray:
    """A hash of every run of n consecutive word hashes (len(words) - n + 1 of them), by doubling: 2 log2(n) passes."""

    def join(a: np.ndarray, width_a: int, b: np.ndarray, width_b: int) -> np.ndarray:
        k = max(len(words) - width_a - width_b + 1, 0)
        joined: np.ndarray = a[:k] * np.uint64(pow(WORD_BASE, width_b, 1 << 64)) + b[width_a : width_a + k]
        return joined

    out: np.ndarray | None = None
    width, power, span = 0, words, 1
    while True:
        if n & 1:
            out, width = (power, span) if out is None else (join(out, width, power, span), width + span)
        n >>= 1
        if not n:
            return out if out is not None else words[:0]
        power, span = join(power, span, power, span), 2 * span


def ngram_hashes(texts: pa.Array, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of every run of `n` words of each text, and the text each one belongs to."""
    import pyarrow.compute as pc

    lowered = pc.utf8_lower(texts)
    _, offsets_buffer, buffer = lowered.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[lowered.offset : lowered.offset + len(lowered) + 1]
    view, bounds = memoryview(buffer if buffer is not None else b""), offsets.tolist()
    joined = SEPARATOR.join([view[a:b] for a, b in zip(bounds, bounds[1:])]).translate(SPACES, PUNCTUATION)
    data = np.frombuffer(joined, dtype=np.uint8)
    in_word = data != 32
    edges = np.flatnonzero(np.diff(in_word, prepend=False, append=False))
    starts, ends = edges[0::2], edges[1::2]
    hashes = _windows(_word_hashes(data, starts, ends), n)
    docs = np.cumsum(data[starts] == 0)  # separators seen: the text each word belongs to (a separator: the next)
    whole = docs[n - 1 : n - 1 + len(hashes)] == docs[: len(hashes)]
    whole &= data[starts[: len(hashes)]] != 0
    return hashes[whole], docs[: len(hashes)][whole]


def words_of(text: str) -> list[str]:
    """One text's words as `ngram_hashes` sees them: for the samples of matched n-grams a person reads."""
    return [w for w in text.lower().encode().translate(SPACES, PUNCTUATION).decode(errors="replace").split(" ") if w]


@dataclass(frozen=True)
class EvalIndex:
    """The eval sets' n-grams: `hashes` sorted, `sets` the eval set of each (the first by name when several hold
    it), `version` a hash of the passages read and the rule."""

    version: str
    ngram: int
    names: tuple[str, ...]
    hashes: np.ndarray
    sets: np.ndarray
    passages: int
    filter: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0, dtype=np.uint8))

    @property
    def key(self) -> str:
        return eval_index_key(self.version)

    def matches(self, hashes: np.ndarray) -> np.ndarray:
        """The eval set of each n-gram hash found in the index, -1 for the others (most: a bit filter first)."""
        found = np.full(len(hashes), -1, dtype=np.int64)
        if not len(self.hashes):
            return found
        shift = np.uint64(64 - (len(self.filter) * 8).bit_length() + 1)
        slot = hashes >> shift
        maybe = np.flatnonzero((self.filter[slot >> np.uint64(3)] >> (slot & np.uint64(7)).astype(np.uint8)) & 1)
        at = np.minimum(np.searchsorted(self.hashes, hashes[maybe]), len(self.hashes) - 1)
        hit = self.hashes[at] == hashes[maybe]
        found[maybe[hit]] = self.sets[at[hit]]
        return found

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, hashes=self.hashes, sets=self.sets, names=np.array(self.names, dtype=str))
        return buf.getvalue()


def _with_filter(index: EvalIndex) -> EvalIndex:
    bits = max(1 << 16, 1 << (len(index.hashes) * FILTER_BITS_PER_NGRAM - 1).bit_length())
    slot = index.hashes >> np.uint64(64 - bits.bit_length() + 1)
    bitmap = np.zeros(bits // 8, dtype=np.uint8)
    np.bitwise_or.at(
        bitmap, (slot >> np.uint64(3)).astype(np.intp), np.left_shift(1, slot & np.uint64(7)).astype(np.uint8)
    )
    return EvalIndex(index.version, index.ngram, index.names, index.hashes, index.sets, index.passages, bitmap)


def eval_sources(spec: DatasetSpec) -> Iterator[tuple[SourceSpec, SourceFile]]:
    """Each eval file of [decontaminate].against, read as a source of its format (by extension; text: one passage
    a line), in order; a glob matching nothing is a SpecError naming it."""
    assert spec.decontaminate is not None
    for glob in spec.decontaminate.against:
        name = glob.rsplit("/", 1)[-1]
        fmt = "parquet" if ".parquet" in name else "jsonl" if ".json" in name else "text"
        separator = "\n" if fmt == "text" else None
        source = SourceSpec("[decontaminate].against", glob, fmt, spec.decontaminate.text_column, separator)
        try:
            files = list_source_files(source)
        except SourceError as exc:
            raise SpecError(f"{spec.origin}: {exc}") from None
        yield from ((source, f) for f in files)


def build_eval_index(spec: DatasetSpec) -> EvalIndex:
    """The index of the spec's eval sets, read from their files (an unreadable one is a SourceError naming it)."""
    assert spec.decontaminate is not None
    files = list(eval_sources(spec))
    key = (spec.decontaminate.ngram, *((s.format, s.text_column, f) for s, f in files))  # f: listing fingerprint
    if key not in _BUILT:  # a changed file (another fingerprint) is read again
        _BUILT.clear()
        _BUILT[key] = _built(files, spec.decontaminate.ngram)
    return _BUILT[key]


_BUILT: dict[tuple[object, ...], EvalIndex] = {}  # the last index built in this process: each partition uses it


def _built(files: list[tuple[SourceSpec, SourceFile]], n: int) -> EvalIndex:
    names = sorted({f.part for _, f in files})
    version, parts, passages = hashlib.sha256(f"{RULE}:{n}".encode()), [], 0
    for source, f in files:
        for batch in iter_document_columns(source, f, READ_BATCH):
            texts = normalise_column(batch)
            passages += len(texts)
            version.update(f.part.encode() + b"\x00" + b"\x00".join(t.encode() for t in texts.to_pylist()))
            hashes, _ = ngram_hashes(texts, n)
            parts.append((hashes, np.full(len(hashes), names.index(f.part), dtype=np.uint16)))
    hashes = np.concatenate([h for h, _ in parts]) if parts else np.zeros(0, dtype=np.uint64)
    sets = np.concatenate([s for _, s in parts]) if parts else np.zeros(0, dtype=np.uint16)
    order = np.lexsort((sets, hashes))
    hashes, sets = hashes[order], sets[order]
    first = np.ones(len(hashes), dtype=bool)
    first[1:] = hashes[1:] != hashes[:-1]
    return _with_filter(EvalIndex(version.hexdigest()[:16], n, tuple(names), hashes[first], sets[first], passages))


def store_eval_index(store: ObjectStore, index: EvalIndex) -> None:
    """Put the index under its content-addressed key once (the lineage names it)."""
    if not store.exists(index.key):
        store.put_bytes(index.key, index.to_bytes(), if_absent=True)
