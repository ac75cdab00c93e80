"""English words and sentences as datatrove's quality filters count them (spaCy's blank English tokenizer and
sentencizer) without spaCy: its rules, read from `english_words.json`, applied per whitespace-separated chunk with a
cache. Not reproduced: spaCy's second matcher pass across chunks (`x) :` read as `):`), and a whitespace run as the
only thing between a sentence end and the last punctuation of a line."""

from __future__ import annotations

import json
import re
import unicodedata
from functools import cache, lru_cache
from pathlib import Path

RULES_FILE = Path(__file__).with_name("english_words.json")
_CACHE_LIMIT = 1 << 18  # distinct chunks remembered (about 50 MB) before the cache starts again


class EnglishWords:
    """spaCy's blank English tokenizer, chunk by chunk; `words` and `sentences` as datatrove reads them."""

    def __init__(self) -> None:
        rules = json.loads(RULES_FILE.read_text())
        self._prefix = re.compile(rules["prefix"]).search
        self._suffix = re.compile(rules["suffix"]).search
        self._infix = re.compile(rules["infix"]).finditer
        self._url = re.compile(rules["url"]).match
        self._special: dict[str, list[str]] = rules["exceptions"]
        self.sentence_ends = frozenset(rules["sentence_ends"])
        self.punctuation_chars: str = rules["punctuation"] + rules["terminal_punctuation"]
        self.terminal = tuple(rules["terminal_punctuation"])
        self._chunks: dict[str, list[str]] = {}
        # each special case with affixes, as the affixes alone split it (spaCy's matcher)
        affixed = [k for k in self._special if self._prefix(k) or self._suffix(k) or next(self._infix(k), None)]
        self._patterns = {tuple(self._affixes(k, {})): k for k in affixed}
        self._last: tuple[str, list[str]] = ("", [])

    def words(self, text: str) -> list[str]:
        """The words of `text` (whitespace tokens left out, as datatrove strips them); the last text's are kept."""
        last = self._last
        if text == last[0]:
            return last[1]
        chunks, split = self._chunks, self._split
        if len(chunks) > _CACHE_LIMIT:
            chunks.clear()
        out: list[str] = []
        for chunk in text.split():
            toks = chunks.get(chunk)
            if toks is None:
                toks = chunks[chunk] = split(chunk)
            out += toks
        self._last = (text, out)
        return out

    def sentences(self, line: str) -> int:
        """spaCy's sentencizer on one line: a sentence starts at the first non-punctuation after a sentence end."""
        count, seen_end, ends = 1, False, self.sentence_ends
        for tok in self.words(line):
            is_end = tok in ends
            if seen_end and not is_end and not _is_punct(tok):
                count, seen_end = count + 1, False
            elif is_end:
                seen_end = True
        return count

    def _split(self, chunk: str) -> list[str]:
        """One whitespace-free chunk, as spaCy's Tokenizer splits it: affixes, then its special-case matcher."""
        if chunk.isalpha() and chunk not in self._special:  # no affix rule of spaCy's matches letters alone
            return [chunk]
        out = self._affixes(chunk, self._special)
        seen: set[int] = set()
        spans = []
        for n in range(min(len(out), 8), 0, -1):  # longest first, then leftmost
            for i in range(len(out) - n + 1):
                if tuple(out[i : i + n]) in self._patterns:
                    if i not in seen and i + n - 1 not in seen:
                        spans.append((i, i + n))
                    seen.update(range(i, i + n))
        for i, j in sorted(spans, reverse=True):
            out[i:j] = self._special[self._patterns[tuple(out[i:j])]]
        return out

    def _affixes(self, chunk: str, special: dict[str, list[str]]) -> list[str]:
        """spaCy's Tokenizer._split_affixes and _attach_tokens: special cases, prefixes and suffixes, infixes."""
        prefixes: list[str] = []
        suffixes: list[str] = []
        s, last = chunk, -1
        while s and len(s) != last and s not in special:  # a special case stops the peeling
            last = len(s)
            m = self._prefix(s)
            pre = m.end() if m else 0
            m = self._suffix(s[pre:])
            suf = m.end() - m.start() if m else 0
            if pre and s[pre:] in special:  # spaCy peels the prefix alone, then the suffix alone, into a special case
                suf = 0
            elif suf and s[:-suf] in special:
                pre = 0
            if pre:
                prefixes.append(s[:pre])
            if suf:
                suffixes.append(s[-suf:])
            s = s[pre : len(s) - suf]
        out = prefixes  # empty pieces are left out at the end
        if s in special:
            out += special[s]
        elif self._url(s):
            out.append(s)
        else:
            start = 0
            for m in self._infix(s):
                if m.start():
                    out.append(s[start : m.start()])
                    out.append(m.group())
                    start = m.end()
            out.append(s[start:])
        out += reversed(suffixes)
        return [t for t in out if t.strip()]


@lru_cache(maxsize=1 << 16)
def _is_punct(token: str) -> bool:
    """spaCy's IS_PUNCT: every character in a Unicode punctuation category."""
    return all(unicodedata.category(c).startswith("P") for c in token)


@cache
def english_words() -> EnglishWords:
    """The process's one splitter (its rules are read once, its chunk cache shared)."""
    return EnglishWords()
