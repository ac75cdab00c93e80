"""English web-like prose for the build benchmark (issue 48): a word-bigram chain over the English prose this machine
holds (tests/support/filter_corpus.py's paragraphs: Python's language reference, package descriptions, licenses,
docstrings), with the tail of rare words web text has (10% of words spliced from two others, 6% made of syllables, 3%
numbers), in paragraphs. Unique documents at any size; about 4.5 bytes per token with the benchmark's 50k BPE (real
English web text with the issue's BPE: 3.45, so this text's tokens are still a little longer)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

TAIL_SHARE, TAIL_WORDS = 0.15, 300_000  # words drawn from the tail, and its size (Zipf-weighted, so they repeat)
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + [c + v + "n" for c in "bdklmrst" for v in "aeio"]


def documents(rng: np.random.Generator, median_chars: int) -> Iterator[str]:
    """Endless documents of lognormal length around `median_chars`, paragraphs of about 60 words."""
    from tests.support.filter_corpus import _paragraphs

    words = [w for p in _paragraphs() for w in p.split()]
    names = list(dict.fromkeys(words))
    index = {w: i for i, w in enumerate(names)}
    ids = np.array([index[w] for w in words], dtype=np.int64)
    order = np.argsort(ids[:-1], kind="stable")
    successors = ids[1:][order]
    starts = np.searchsorted(ids[:-1][order], np.arange(len(names) + 1))
    tail = _tail(rng, names)
    weights = 1.0 / np.arange(1, len(tail) + 1)
    cumulative = np.cumsum(weights / weights.sum())
    while True:
        n = max(8, int(rng.lognormal(np.log(median_chars / 6.5), 0.9)))
        word, out = int(ids[int(rng.integers(len(ids)))]), []
        rare = np.searchsorted(cumulative, rng.random(n)).tolist()
        for x, roll, r in zip(rng.random(n).tolist(), rng.random(n).tolist(), rare):
            a, b = int(starts[word]), int(starts[word + 1])
            word = int(successors[a + int(x * (b - a))]) if b > a else int(ids[int(x * len(ids))])
            out.append(tail[min(r, len(tail) - 1)] if roll < TAIL_SHARE else names[word])
            if roll > 1 - 1 / 60:
                out[-1] += "\n\n"
        yield " ".join(out).replace("\n\n ", "\n\n")


def _tail(rng: np.random.Generator, names: list[str]) -> list[str]:
    """The rare words of web text: names and typos (two words spliced), made-up words of syllables, numbers."""
    tail = []
    for roll in rng.random(TAIL_WORDS).tolist():
        if roll < 0.6:
            a, b = names[int(rng.integers(len(names)))], names[int(rng.integers(len(names)))]
            tail.append(a[: max(2, len(a) // 2)] + b[len(b) // 2 :])
        elif roll < 0.9:
            tail.append("".join(rng.choice(SYLLABLES, int(rng.integers(2, 5)))))
        else:
            tail.append(str(int(rng.integers(0, 10 ** int(rng.integers(1, 7))))))
    return tail
