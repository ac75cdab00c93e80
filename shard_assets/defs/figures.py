"""How the assets' figures read in the UI: one name per figure wherever it appears, the standard `dagster/row_count`,
byte counts as sizes with a unit, times in seconds."""

from collections.abc import Iterable, Mapping

import dagster as dg

from shard_loader.builder_api import SPLITS

from ..lib.plan import human_bytes

LIST_LIMIT = 20  # lines of a markdown list before it says how many more


def size(nbytes: int) -> dg.MetadataValue:
    """A byte count as a size: `1.2 MB (1,234,567 bytes)`."""
    return dg.MetadataValue.text(f"{human_bytes(nbytes)} ({nbytes:,} bytes)")


def split_figures(tokens: Mapping[str, int], documents: Mapping[str, int]) -> dict[str, int]:
    """Tokens and documents per split, named `train_tokens`, `val_documents`, ... in every asset."""
    return {
        f"{split}_{what}": counts[split]
        for what, counts in (("tokens", tokens), ("documents", documents))
        for split in SPLITS
    }


def markdown_list(lines: Iterable[str], limit: int = LIST_LIMIT) -> dg.MetadataValue:
    """Lines as a markdown list, the first `limit` of them and a count of the rest."""
    lines = list(lines)
    shown = [f"- {line}" for line in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"- ... and {len(lines) - limit:,} more")
    return dg.MetadataValue.md("\n".join(shown) or "none")
