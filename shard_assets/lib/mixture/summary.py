"""A published mixture's component summaries (`MixtureFile.summary`, the loader's one computation of them) as the
tables the asset's metadata and `shard-assets mix` show."""

from __future__ import annotations

from shard_loader.builder_api import ComponentSummary

SPLIT = "train"  # the split weights are about


def _cap(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def markdown_table(rows: list[ComponentSummary], split: str = SPLIT) -> str:
    lines = [
        f"| component | pinned version | weight | natural share | {split} tokens | per mixture epoch | implied epochs "
        "| max_repeats |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.name} | `{r.version}` | {r.weight:.3f} | {r.natural:.3f} | {r.tokens:,} | {r.per_epoch:,} | "
        f"{r.epochs:.3g} | {_cap(r.max_repeats)} |"
        for r in rows
    ]
    return "\n".join(lines)


def text_table(rows: list[ComponentSummary], split: str = SPLIT) -> str:
    width = max(9, *(len(r.name) for r in rows))
    head = (
        f"{'component':<{width}}  {'weight':>6}  {'natural':>7}  {split + ' tokens':>14}  {'per epoch':>12}  "
        f"{'epochs':>7}  {'cap':>5}  version"
    )
    body = [
        f"{r.name:<{width}}  {r.weight:>6.3f}  {r.natural:>7.3f}  {r.tokens:>14,}  {r.per_epoch:>12,}  "
        f"{r.epochs:>7.3g}  {_cap(r.max_repeats):>5}  {r.version}"
        for r in rows
    ]
    return "\n".join([head, *body])
