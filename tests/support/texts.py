"""The published normalisation and document hash for Python texts, as tests state expectations (the build runs them
over Arrow columns)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from shard_assets.lib.text import column_hashes, normalise_column, to_arrow


def normalise(text: str) -> str:
    """The normalisation rule for one text."""
    return str(normalise_column(to_arrow([text]))[0].as_py())


def doc_hashes(texts: Iterable[str]) -> np.ndarray:
    """Each text's published document hash."""
    return column_hashes(to_arrow(list(texts)))


def doc_hash(text: str) -> int:
    """One text's published document hash."""
    return int(doc_hashes([text])[0])
