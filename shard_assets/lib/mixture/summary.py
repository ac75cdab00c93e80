"""What a published mixture amounts to, per component: its weight against its natural share, its tokens, and the
passes over it one mixture epoch takes. The asset's metadata and `shard-assets mix` both show these rows."""

from __future__ import annotations

from dataclasses import dataclass

from shard_loader.builder_api import MixtureFile

SPLIT = "train"  # the split weights are about


@dataclass(frozen=True)
class ComponentRow:
    name: str
    version: str
    weight: float
    natural: float  # the component's share of the components' tokens together
    tokens: int
    per_epoch: int  # tokens it serves in one mixture epoch
    epochs: float  # passes over its own tokens that takes
    max_repeats: float | None


def component_rows(m: MixtureFile, split: str = SPLIT) -> list[ComponentRow]:
    held = sum(c.tokens.get(split, 0) for c in m.components) or 1
    budget = m.tokens_per_epoch.get(split, 0)
    return [
        ComponentRow(
            c.name,
            c.version,
            c.weight,
            c.tokens.get(split, 0) / held,
            c.tokens.get(split, 0),
            round(c.weight * budget),
            c.repeats(split, budget),
            c.max_repeats,
        )
        for c in m.components
    ]


def _cap(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def markdown_table(rows: list[ComponentRow], split: str = SPLIT) -> str:
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


def text_table(rows: list[ComponentRow], split: str = SPLIT) -> str:
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
