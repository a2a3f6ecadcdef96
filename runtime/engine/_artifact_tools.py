"""The two tools `Artifacts(tools=True)` adds, which the model calls with a handle it read:
`read_artifact(handle, offset, length)` and `grep_artifact(handle, pattern)`, each within its
caller's principal (another's handle, or an expired one, is REJECTED with the reason)."""

from __future__ import annotations

import base64
from typing import Annotated, Any

from ..exceptions import ToolRejected
from ..stores import ArtifactStore
from ..tools import CallContext, Description, FunctionTool, tool
from ._outcome import truncate

__all__ = ["READ_TOOLS", "artifact_tools"]

READ_TOOLS = ("read_artifact", "grep_artifact")
"""The names of the built-in tools `Artifacts(tools=True)` adds."""


def _page_header(handle: str, unit: str, offset: int, end: int, total: int) -> str:
    """The first line of a page `read_artifact` returns."""
    more = f"; the rest from offset={end}" if end < total else "; that is the end"
    return f"[artifact {handle}: {unit} {offset:,} to {end:,} of {total:,}{more}]\n"


def artifact_tools(store: ArtifactStore, max_chars: int) -> list[FunctionTool[..., Any]]:
    """`read_artifact` and `grep_artifact` over `store`, for a runtime whose texts are cut at
    `max_chars` (a page is never longer)."""

    async def read_artifact(
        handle: Annotated[str, Description("the artifact's handle, as the result showed it (art_...)")],
        ctx: CallContext,
        offset: Annotated[
            int, Description("where to start: a character of a text, a byte of binary data")
        ] = 0,
        length: Annotated[int, Description("how many characters (or bytes) to read")] = 20000,
    ) -> str:
        """Read part of an artifact: a result too large to show whole, kept for this conversation.

        Returns one line saying which part this is, then that part as it is (binary data in base64).
        """
        info = await store.info(ctx.principal, handle)
        if length < 1:
            raise ToolRejected(f"length must be at least 1, got {length}")
        # the page and its first line fit under max_chars (its longest first line counted)
        longest = _page_header(handle, "bytes, in base64", info.length, info.length - 1, info.length)
        page = max(1, max_chars - len(longest))
        try:
            if info.is_text:
                length = min(length, page)
                data = await store.read(ctx.principal, handle, offset, length)
                assert isinstance(data, str)
                shown = data
                unit = "characters"
            else:
                length = min(length, page * 3 // 4)
                raw = await store.read(ctx.principal, handle, offset, length)
                assert isinstance(raw, bytes)
                shown = base64.b64encode(raw).decode("ascii")
                unit = "bytes, in base64"
                data = raw
        except ValueError as exc:
            raise ToolRejected(str(exc)) from None
        return _page_header(handle, unit, offset, offset + len(data), info.length) + shown

    async def grep_artifact(
        handle: Annotated[str, Description("the artifact's handle, as the result showed it (art_...)")],
        pattern: Annotated[
            str,
            Description(
                "a regular expression (RE2 syntax: no backreferences nor lookaround) to find in its lines"
            ),
        ],
        ctx: CallContext,
        max_matches: Annotated[int, Description("the most lines to return")] = 20,
    ) -> str:
        """Find the lines of a text artifact (a result too large to show whole) that match a pattern.

        Returns each matching line with its offset (for read_artifact) and its line number.
        """
        if max_matches < 1:
            raise ToolRejected(f"max_matches must be at least 1, got {max_matches}")
        try:
            found = await store.grep(ctx.principal, handle, pattern, max_matches=max_matches)
        except ValueError as exc:
            raise ToolRejected(str(exc)) from None
        if not found:
            return f"no line of artifact {handle} matches {pattern!r}"
        lines = [f"offset {m.offset} (line {m.line}): {m.text}" for m in found]
        return truncate("\n".join(lines), max_chars)

    return [
        tool(name="read_artifact", read_only=True)(read_artifact),
        tool(name="grep_artifact", read_only=True, timeout=30.0)(grep_artifact),
    ]
