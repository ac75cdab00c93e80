"""Small SVG bar charts for asset metadata: a picture of a distribution reads at a glance where a table does not.

Hand-written rather than matplotlib: a few dozen lines of SVG avoid a heavy plotting dependency in every run."""

from __future__ import annotations

import base64
from html import escape

WIDTH, HEIGHT, BAR_AREA = 520, 220, 160
COLOURS = ("#4f43dd", "#f29d38", "#2ca58d", "#d6455d")


def _svg_header(title: str) -> list[str]:
    """The opening of a chart's SVG document, with its title."""
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
    heading = f'<text x="{WIDTH / 2}" y="14" text-anchor="middle" font-size="12">{escape(title)}</text>'
    return [svg + 'font-size="10">', heading]


def bar_chart_svg(labels: list[str], values: list[int], title: str, unit: str) -> str:
    """A labelled vertical bar chart of `values` as an SVG document."""
    top = max(values, default=0) or 1
    step = (WIDTH - 40) / max(len(values), 1)
    parts = _svg_header(title)
    for i, (label, value) in enumerate(zip(labels, values)):
        h = BAR_AREA * value / top
        x = 20 + i * step
        parts.append(
            f'<rect x="{x + 2:.1f}" y="{20 + BAR_AREA - h:.1f}" width="{step - 4:.1f}" height="{h:.1f}" '
            'fill="#4f43dd"/>'
        )
        parts.append(f'<text x="{x + step / 2:.1f}" y="{16 + BAR_AREA - h:.1f}" text-anchor="middle">{value:,}</text>')
        parts.append(f'<text x="{x + step / 2:.1f}" y="{34 + BAR_AREA}" text-anchor="middle">{escape(label)}</text>')
    parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 4}" text-anchor="middle" fill="#666">{escape(unit)}</text></svg>')
    return "".join(parts)


def grouped_bar_chart_svg(labels: list[str], series: dict[str, list[float]], title: str) -> str:
    """Bars side by side per label, one colour per series, named in a legend along the bottom: e.g. each
    component's weight against its natural share."""
    top = max((v for values in series.values() for v in values), default=0) or 1
    step = (WIDTH - 40) / max(len(labels), 1)
    bar = (step - 8) / max(len(series), 1)
    parts = _svg_header(title)
    for j, (name, values) in enumerate(series.items()):
        colour = COLOURS[j % len(COLOURS)]
        parts.append(
            f'<rect x="{20 + 120 * j}" y="{HEIGHT - 13}" width="10" height="10" fill="{colour}"/><text '
            f'x="{34 + 120 * j}" y="{HEIGHT - 4}">{escape(name)}</text>'
        )
        for i, value in enumerate(values):
            h = BAR_AREA * value / top
            x = 24 + i * step + j * bar
            parts.append(
                f'<rect x="{x:.1f}" y="{20 + BAR_AREA - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                f'fill="{colour}"/>'
            )
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{16 + BAR_AREA - h:.1f}" text-anchor="middle">{value:.3g}</text>'
            )
    for i, label in enumerate(labels):
        parts.append(
            f'<text x="{20 + i * step + step / 2:.1f}" y="{34 + BAR_AREA}" text-anchor="middle">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def markdown_image(svg: str, alt: str) -> str:
    """The SVG as a markdown image (a data URI), which Dagster's metadata view renders inline."""
    return f"![{escape(alt)}](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})"
