"""A TCP proxy a test runs in its own trio loop, between a client and a real server process, to
lose the connection on purpose: `cut()` breaks every open connection and refuses new ones until
`restore()` (optionally to another upstream: a server started again)."""

from __future__ import annotations

from typing import Any

import trio

__all__ = ["Proxy"]


class Proxy:
    """Forwards 127.0.0.1:`port` to `upstream` (host, port) while it is up."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.up = True
        self.accepted = 0
        self._open: set[trio.CancelScope] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)

    def cut(self) -> None:
        """Break every open connection; refuse new ones until `restore`."""
        self.up = False
        for scope in list(self._open):
            scope.cancel()

    def restore(self, upstream: tuple[str, int] | None = None) -> None:
        if upstream is not None:
            self.upstream = upstream
        self.up = True

    async def _handle(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        if not self.up:
            await client.aclose()
            return
        with trio.CancelScope() as scope:
            self._open.add(scope)
            try:
                server = await trio.open_tcp_stream(*self.upstream)
                async with client, server, trio.open_nursery() as nursery:
                    nursery.start_soon(_pump, client, server)
                    nursery.start_soon(_pump, server, client)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                self._open.discard(scope)
        await trio.aclose_forcefully(client)


async def _pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
    try:
        async for chunk in source:
            await sink.send_all(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(sink)
