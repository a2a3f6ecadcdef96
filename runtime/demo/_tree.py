"""Draw finished spans as an indented tree (the demo and the examples print it)."""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

__all__ = ["span_tree"]


def span_tree(spans: Iterable[ReadableSpan]) -> str:
    """One line per span, children indented under parents, siblings by start time."""
    spans = list(spans)
    ids = {s.context.span_id for s in spans if s.context is not None}
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        children.setdefault(parent, []).append(s)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            ms = ((s.end_time or 0) - (s.start_time or 0)) / 1e6
            status = (
                "  ERROR " + (s.status.description or "") if s.status.status_code is StatusCode.ERROR else ""
            )
            lines.append(f"{'  ' * depth}{s.name}  {ms:.1f} ms{status}")
            if s.context is not None:
                walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)
