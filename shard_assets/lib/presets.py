"""Named presets for well-known corpora: where they live on the Hub and how to read them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    uri: str
    format: str
    text_column: str
    typical_size: str
    description: str
    document_separator: str | None = None


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "dclm-baseline",
            "hf://datasets/mlfoundations/dclm-baseline-1.0-parquet/filtered/*/*.parquet",
            "parquet",
            "text",
            "~4T tokens, ~7 TB of parquet",
            "DCLM-baseline 1.0: Common Crawl filtered by a fastText quality classifier.",
        ),
        Preset(
            "fineweb",
            "hf://datasets/HuggingFaceFW/fineweb/data/*/*.parquet",
            "parquet",
            "text",
            "~15T tokens, ~45 TB of parquet",
            "FineWeb: deduplicated, filtered English Common Crawl.",
        ),
        Preset(
            "fineweb-edu",
            "hf://datasets/HuggingFaceFW/fineweb-edu/data/*/*.parquet",
            "parquet",
            "text",
            "~1.3T tokens, ~4 TB of parquet",
            "FineWeb-Edu: FineWeb filtered for educational content.",
        ),
        Preset(
            "tiny-shakespeare",
            "hf://datasets/karpathy/tiny_shakespeare/tiny_shakespeare.txt",
            "text",
            "text",
            "~1 MB, ~0.3M tokens",
            "Tiny Shakespeare: one plain-text file; documents are blank-line separated speeches.",
            document_separator="\n\n",
        ),
    )
}


def format_catalog() -> str:
    """The catalogue as a table for the `shard-assets presets` command."""
    rows = [("name", "format", "column", "typical size", "uri")]
    rows += [(p.name, p.format, p.text_column, p.typical_size, p.uri) for p in PRESETS.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
