"""The ToolSource protocol: how tools that come and go at run time (MCP) reach the engine.

The engine never imports an edge: an MCP connection is an object with this shape, passed
as `open_runtime(mcp_servers=[...])`. It registers and unregisters its tools through the
`ToolRegistrar` it is given.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..tools import ToolBase

__all__ = ["ToolRegistrar", "ToolSource"]


class ToolRegistrar(Protocol):
    """What a source may do to the runtime's routing table (the Runtime implements it)."""

    async def register(self, *tools: ToolBase[Any, Any], replace: bool = False) -> None: ...

    async def unregister(self, *names: str) -> None: ...


@runtime_checkable
class ToolSource(Protocol):
    """A supervised provider of tools: connects, registers its tools, keeps them current."""

    name: str

    async def run(self, registrar: ToolRegistrar, *, task_status: Any) -> None:
        """Serve until cancelled; call `task_status.started()` after the first tool listing
        (or once it has given up on the first attempt, so the runtime can start without it)."""
        ...
