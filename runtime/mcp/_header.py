"""SEP-2243 header parameters: an argument an MCP client also sends as an HTTP header."""

from __future__ import annotations

import re

import msgspec

__all__ = ["Header"]

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an HTTP header-name token (RFC 9110)


def Header(name: str) -> msgspec.Meta:
    """Mark a parameter as a header parameter: `Annotated[str, mcp.Header("Region")]`.

    Served over MCP its schema carries `"x-mcp-header": "Region"`; a 2026-07-28 client sends
    the argument as the `Mcp-Param-Region` header too (so a gateway can route on it), and the
    server refuses a call whose header and argument disagree (the SDK checks it). Use it on
    top-level string, number or boolean parameters.

    Raises:
        ValueError: `name` is not an HTTP header-name token.
    """
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"an MCP header parameter needs an HTTP header-name token, not {name!r}")
    return msgspec.Meta(extra_json_schema={"x-mcp-header": name})
