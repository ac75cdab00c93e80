"""Decontamination against the team's eval sets: the eval passages' word n-grams as sorted arrays of 64-bit hashes
(the index: 36 to 52 bytes per n-gram in memory, bit filters included), and the check of a batch of documents
against it, on whole columns.

Words are compared as lm-evaluation-harness's janitor and NeMo Curator compare them: lower-cased, ASCII punctuation
removed, split on whitespace; a document sharing any run of `ngram` such words with a passage is contaminated. The
hashes are polynomial over bytes (mod 2**32, word_hash.py's, which near dedup shares) then words (mod 2**64),
computed with prefix sums so a batch costs a few passes over its bytes and no Python per word; a batch is checked
PIECE bytes at a time, and only one in `stride` of its runs of PROBE_WORDS words is looked up."""

from __future__ import annotations

import hashlib
import io
import string
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SourceError, SpecError
from ..layout import eval_index_key
from ..sources.listing import SourceFile, list_source_files
from ..sources.readers import iter_document_columns
from ..spec import DatasetSpec, SourceSpec
from ..store import ObjectStore
from ..text import normalise_column, text_buffers
from .word_hash import pieces, word_hashes

if TYPE_CHECKING:
    import pyarrow as pa

RULE = "ngram-v1"  # the word rule and hash; a change of either is a new eval index version
# ASCII letters lower-cased (the janitor lower-cases ASCII only) and whitespace to 0, which adds nothing to a hash
WORD_BYTES = bytes(0 if chr(i) in string.whitespace else ord(chr(i).lower()) if i < 128 else i for i in range(256))
PUNCTUATION = string.punctuation.encode()  # removed, as the janitor's translation table removes it
SEPARATOR = b" \x01 "  # before each document: its own word (normalised text holds no \x01), so no n-gram spans two
WORD_BASE = 0x9E3779B97F4A7C15
FILTER_BITS_PER_NGRAM = 64  # the bit filter's size: about 1.5% of the hashes looked up reach the binary search
PROBE_WORDS = 8  # the words of a run looked up first (EvalIndex): rare enough that few documents are checked further
READ_BATCH = 1000
PIECE = 1 << 20  # bytes of text checked at once: its arrays stay in the CPU's cache (37 MB at once cost 1.5x)


def _runs(words: np.ndarray, n: int, at: slice | np.ndarray = slice(None)) -> np.ndarray:
    """A hash of each run of n consecutive word hashes starting at `at` (every run by default): their polynomial in
    WORD_BASE (mod 2**64), by Horner's rule over a strided view, so runs not asked for cost nothing."""
    if len(words) < n:
        return words[:0]
    windows = np.lib.stride_tricks.sliding_window_view(words, n)[at]
    out: np.ndarray = windows[:, 0].copy()
    for k in range(1, n):
        out *= np.uint64(WORD_BASE)
        out += windows[:, k]
    return out


def _words(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The hash of every word of the texts in order, with a separator word before each text, and which words are
    separators: 32 bits (a collision matters only if every word of two n-grams collides or matches), spread over 64."""
    offsets, view = text_buffers(texts)
    bounds = offsets.tolist()
    texts_bytes = SEPARATOR.join([b"", *(view[a:b] for a, b in zip(bounds, bounds[1:]))])
    data = np.frombuffer(texts_bytes.translate(WORD_BYTES, PUNCTUATION), dtype=np.uint8)
    word = data != 0
    starts = np.flatnonzero(word[1:] > word[:-1]) + 1  # data[0] is whitespace, before every word
    spread: np.ndarray = word_hashes(data, starts) * np.uint64(WORD_BASE)
    return spread, data[starts] == SEPARATOR[1]


def ngram_hashes(texts: pa.Array, n: int) -> np.ndarray:
    """The hashes of every run of `n` words within one text of the texts (a large_string column), in order."""
    words, separators = _words(texts)
    hashes = _runs(words, n)
    docs = np.cumsum(separators)  # separators seen: the text each word belongs to
    whole = (docs[n - 1 : n - 1 + len(hashes)] == docs[: len(hashes)]) & ~separators[: len(hashes)]
    within: np.ndarray = hashes[whole]
    return within


@dataclass(frozen=True)
class HashSet:
    """Sorted unique 64-bit hashes, the eval set of each (the first by name when several hold it), and a bit filter
    (FILTER_BITS_PER_NGRAM bits each) that answers most absent hashes without a binary search."""

    hashes: np.ndarray
    sets: np.ndarray
    filter: np.ndarray = field(repr=False)

    @classmethod
    def of(cls, hashes: np.ndarray, sets: np.ndarray) -> HashSet:
        order = np.lexsort((sets, hashes))
        hashes, first = np.unique(hashes[order], return_index=True)
        sets = sets[order][first]
        bits = max(1 << 16, 1 << (len(hashes) * FILTER_BITS_PER_NGRAM - 1).bit_length())
        bitmap = np.zeros(bits // 64, dtype=np.uint64)
        slot = (hashes >> np.uint64(65 - bits.bit_length())).view(np.int64)
        np.bitwise_or.at(bitmap, slot >> 6, np.left_shift(np.uint64(1), (slot & 63).view(np.uint64)))
        return cls(hashes, sets, bitmap)

    @property
    def nbytes(self) -> int:
        return int(self.hashes.nbytes + self.sets.nbytes + self.filter.nbytes)

    def find(self, hashes: np.ndarray) -> np.ndarray:
        """The eval set of each hash found, -1 for the others."""
        found = np.full(len(hashes), -1, dtype=np.int64)
        slot = (hashes >> np.uint64(65 - (len(self.filter) * 64).bit_length())).view(np.int64)
        maybe = np.flatnonzero((self.filter[slot >> 6] >> (slot & 63).view(np.uint64)) & np.uint64(1))
        if len(maybe) and len(self.hashes):
            at = np.minimum(np.searchsorted(self.hashes, hashes[maybe]), len(self.hashes) - 1)
            hit = self.hashes[at] == hashes[maybe]
            found[maybe[hit]] = self.sets[at[hit]]
        return found


@dataclass(frozen=True)
class EvalIndex:
    """The eval sets' `ngram`-word runs (`grams`), and their runs of PROBE_WORDS words (`probes`): a document sharing
    an n-gram with a passage shares its every shorter run, and one of its runs of PROBE_WORDS starts at a word index
    divisible by ngram - PROBE_WORDS + 1 (the stride), so probing those alone finds every document that may be
    contaminated, with stride times fewer look-ups; only the n-grams holding a probe found are hashed and looked up.
    `version`: a hash of the passages read and the rule."""

    version: str
    ngram: int
    names: tuple[str, ...]
    passages: int
    grams: HashSet
    probes: HashSet

    @property
    def key(self) -> str:
        return eval_index_key(self.version)

    @property
    def nbytes(self) -> int:
        return self.grams.nbytes + self.probes.nbytes

    def matched(self, text: str, limit: int) -> tuple[str, ...]:
        """The first `limit` word runs `text` shares with the eval sets, as a person reads them."""
        import pyarrow as pa

        words = [w for w in text.encode().translate(WORD_BYTES, PUNCTUATION).decode().split("\0") if w]
        hashes = ngram_hashes(pa.array([text], pa.large_string()), self.ngram)
        at = np.flatnonzero(self.grams.find(hashes) >= 0)[:limit].tolist()
        return tuple(" ".join(words[j : j + self.ngram]) for j in at)

    def contaminated(self, texts: pa.Array) -> np.ndarray:
        """For each text (a large_string column), the eval set of the first n-gram it shares with one, else -1."""
        found, stride = np.full(len(texts), -1, dtype=np.int64), self.ngram - PROBE_WORDS + 1
        for first, last in pieces(text_buffers(texts)[0], PIECE):
            words, separators = _words(texts[first:last])
            probes = _runs(words, PROBE_WORDS, slice(None, None, stride))
            hits = np.flatnonzero(self.probes.find(probes) >= 0) * stride  # the first word of each probe found
            if not len(hits):
                continue
            at = np.unique(hits[:, None] - np.arange(stride))  # the n-grams holding one start up to stride - 1 before
            at = at[(at >= 0) & (at <= len(words) - self.ngram)]
            docs = np.cumsum(separators)  # separators seen: the text each word belongs to
            at = at[(docs[at + self.ngram - 1] == docs[at]) & ~separators[at]]
            sets = self.grams.find(_runs(words, self.ngram, at))
            hit_docs, hit = np.unique(docs[at][sets >= 0] - 1, return_index=True)
            found[first + hit_docs] = sets[sets >= 0][hit]
        return found


def build_eval_index(spec: DatasetSpec) -> EvalIndex:
    """The index of the spec's eval sets, each file read as a source of its format (by extension; text: one passage a
    line): a glob matching nothing is a SpecError, an unreadable file a SourceError, naming it."""
    assert spec.decontaminate is not None
    files: list[tuple[SourceSpec, SourceFile]] = []
    for glob in spec.decontaminate.against:
        name = glob.rsplit("/", 1)[-1]
        fmt = "parquet" if ".parquet" in name else "jsonl" if ".json" in name else "text"
        separator = "\n" if fmt == "text" else None
        source = SourceSpec("[decontaminate].against", glob, fmt, spec.decontaminate.text_column, separator)
        try:
            files += [(source, f) for f in list_source_files(source)]
        except SourceError as exc:
            raise SpecError(f"{spec.origin}: {exc}") from None
    key = (spec.decontaminate.ngram, *((s.format, s.text_column, f) for s, f in files))  # f: listing fingerprint
    if key not in _BUILT:  # a changed file (another fingerprint) is read again
        _BUILT.clear()
        _BUILT[key] = _built(files, spec.decontaminate.ngram)
    return _BUILT[key]


_BUILT: dict[tuple[object, ...], EvalIndex] = {}  # the last index built in this process: each partition uses it


def _built(files: list[tuple[SourceSpec, SourceFile]], n: int) -> EvalIndex:
    names = sorted({f.part for _, f in files})
    version, passages = hashlib.sha256(f"{RULE}:{n}".encode()), 0
    empty = (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint16))
    grams, probes = [empty], [empty]  # (hashes, eval set of each) per batch
    for source, f in files:
        for batch in iter_document_columns(source, f, READ_BATCH):
            texts = normalise_column(batch)
            passages += len(texts)
            version.update(f.part.encode() + b"\x00" + b"\x00".join(t.encode() for t in texts.to_pylist()))
            for out, width in ((grams, n), (probes, PROBE_WORDS)):
                hashes = ngram_hashes(texts, width)
                out.append((hashes, np.full(len(hashes), names.index(f.part), dtype=np.uint16)))
    grams_set, probes_set = (HashSet.of(*(np.concatenate(c) for c in zip(*parts))) for parts in (grams, probes))
    return EvalIndex(version.hexdigest()[:16], n, tuple(names), passages, grams_set, probes_set)


def store_eval_index(store: ObjectStore, index: EvalIndex) -> None:
    """Put the index's n-grams (hashes, eval set of each, set names) under its content-addressed key once."""
    if not store.exists(index.key):
        buf = io.BytesIO()
        np.savez(buf, hashes=index.grams.hashes, sets=index.grams.sets, names=np.array(index.names, dtype=str))
        store.put_bytes(index.key, buf.getvalue(), if_absent=True)
