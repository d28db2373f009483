"""The console's charts: SVG drawn on the server (no script, no style attributes: the
colours are presentation attributes, which a Content-Security-Policy without
``'unsafe-inline'`` allows)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from html import escape

from urlsieve.console.stream import Bucket

__all__ = ["activity", "categories", "durations"]

WIDTH, HEIGHT, PAD = 480, 160, 24
COLOURS = {"requests": "#9aa5b1", "blocked": "#c0392b", "unknown": "#e0a800"}


def _svg(body: list[str], label: str, height: int = HEIGHT) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(label)}">'
        + "".join(body)
        + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = 10) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="#333" '
        f'text-anchor="{anchor}">{escape(text)}</text>'
    )


def activity(buckets: Sequence[Bucket], step: str) -> str:
    """Requests, blocks and unknown URLs per bucket (oldest left): three bars a bucket."""
    top = max((b.requests for b in buckets), default=0)
    scale = (HEIGHT - 2 * PAD) / top if top else 0.0
    n = max(len(buckets), 1)
    slot = (WIDTH - 2 * PAD) / n
    body = [f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>']
    base = HEIGHT - PAD
    for i, b in enumerate(buckets):
        x = PAD + i * slot
        for k, (name, value) in enumerate(
            (("requests", b.requests), ("blocked", b.blocked), ("unknown", b.unknown))
        ):
            h = value * scale
            if h <= 0:
                continue
            w = max(slot / 3, 0.5)
            body.append(
                f'<rect class="{name}" x="{x + k * w:.2f}" y="{base - h:.2f}" width="{w:.2f}" '
                f'height="{h:.2f}" fill="{COLOURS[name]}"><title>{name}: {value}</title></rect>'
            )
    body.append(f'<line x1="{PAD}" y1="{base}" x2="{WIDTH - PAD}" y2="{base}" stroke="#333"/>')
    body.append(_text(PAD, PAD - 8, f"max {top} per {step}"))
    total = [sum(getattr(b, f) for b in buckets) for f in ("requests", "blocked", "unknown")]
    legend = f"requests {total[0]} · blocked {total[1]} · unknown {total[2]}"
    body.append(_text(WIDTH - PAD, PAD - 8, legend, "end"))
    return _svg(body, f"decisions per {step}: {legend}")


def categories(counts: Sequence[tuple[str, int]]) -> str:
    """Blocks by category: a horizontal bar each, the largest first."""
    row = 16
    height = max(len(counts), 1) * row + 2 * PAD
    top = max((c for _, c in counts), default=0)
    span = WIDTH - 2 * PAD - 120
    body = [f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#fff"/>']
    if not counts:
        body.append(_text(PAD, PAD + 10, "no blocks"))
    for i, (name, count) in enumerate(counts):
        y = PAD + i * row
        w = span * count / top if top else 0
        body.append(_text(PAD + 110, y + 11, name[:24], "end"))
        body.append(
            f'<rect class="category" x="{PAD + 115}" y="{y + 2}" width="{w:.2f}" '
            f'height="{row - 4}" '
            f'fill="{COLOURS["blocked"]}"><title>{escape(name)}: {count}</title></rect>'
        )
        body.append(_text(PAD + 118 + w, y + 11, str(count)))
    return _svg(body, "blocks by category", height)


_SPANS = ((60, "< 1 min"), (600, "< 10 min"), (3600, "< 1 h"), (6 * 3600, "< 6 h"))


def durations(seconds: Sequence[float]) -> str:
    """How long unknown URLs waited for a verdict: a histogram and the median."""
    labels = [label for _, label in _SPANS] + ["≥ 6 h"]
    counts = [0] * len(labels)
    for s in seconds:
        k = next((i for i, (limit, _) in enumerate(_SPANS) if s < limit), len(_SPANS))
        counts[k] += 1
    top = max(counts) or 1
    slot = (WIDTH - 2 * PAD) / len(labels)
    base = HEIGHT - PAD
    body = [f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>']
    for i, (label, count) in enumerate(zip(labels, counts, strict=True)):
        h = (HEIGHT - 2 * PAD - 10) * count / top
        x = PAD + i * slot
        body.append(
            f'<rect class="enforce" x="{x + 4:.1f}" y="{base - h:.1f}" width="{slot - 8:.1f}" '
            f'height="{h:.1f}" fill="#2e86c1"><title>{escape(label)}: {count}</title></rect>'
        )
        body.append(_text(x + slot / 2, base + 12, label, "middle"))
        body.append(_text(x + slot / 2, base - h - 3, str(count), "middle"))
    median = f"median {statistics.median(seconds):.0f} s" if seconds else "no verdicts learned"
    body.append(_text(PAD, PAD - 8, f"{len(seconds)} verdicts · {median}"))
    return _svg(body, f"time to enforce: {median}")
