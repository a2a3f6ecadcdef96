"""`serve_http`: a runtime's tools over MCP streamable HTTP, served by hypercorn on trio.

The SDK's streamable-HTTP app (an ASGI app) serves both protocol eras: a request that names
a 2026-07-28 `MCP-Protocol-Version` is one self-contained exchange, anything else joins or
opens a handshake-era session. With a token, every HTTP request must carry
`Authorization: Bearer <token>` or is answered 401 before it reaches the app.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app
from starlette.types import ASGIApp, Receive, Scope, Send

from ..engine import Runtime
from ._server import DEFAULT_NAME, ServedRuntime

__all__ = ["serve_http"]

log = logging.getLogger("runtime.mcp")

_UNAUTHORIZED = (
    b'{"error":"invalid_token","error_description":"this server needs Authorization: Bearer <token>"}'
)


async def serve_http(
    rt: Runtime,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    *,
    token: str | None = None,
    name: str = DEFAULT_NAME,
    instructions: str | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `rt`'s tools over MCP streamable HTTP at `http://host:port/path`, until cancelled.

    Start it with `await nursery.start(serve_http, rt, ...)` to learn the bound address.

    Args:
        rt: the runtime whose tools are served (tools registered later are served too).
        host: the address to bind; loopback by default. On a loopback address the SDK also
            refuses requests whose Host or Origin header is not local (DNS rebinding).
        port: the port; 0 picks a free one.
        path: the endpoint's path.
        token: when given, requests without `Authorization: Bearer <token>` get 401.
        name: the server's name in the handshake.
        instructions: text the client may show its model about these tools.
        task_status: receives the bound (host, port) once the server accepts connections.

    Raises:
        OSError: the address cannot be bound (in use, not local...).
    """
    if token is None and not _loopback(host):
        log.warning("serving MCP on %s without a token: whoever reaches it can call every tool", host)
    served = ServedRuntime(rt, name=name, instructions=instructions)
    app: ASGIApp = served.server.streamable_http_app(streamable_http_path=path, host=host)
    if token is not None:
        app = BearerToken(app, token)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # Bound here, before any task starts, so that a taken port is a plain OSError for the caller.
    sockets = config.create_sockets()
    try:
        for sock in sockets.insecure_sockets:
            sock.listen(config.backlog)
        bound: Any = sockets.insecure_sockets[0].getsockname()
        address = (str(bound[0]), int(bound[1]))
        async with trio.open_nursery() as nursery:

            async def run_server(*, task_status: trio.TaskStatus[list[str]]) -> None:
                try:
                    # cast: starlette and hypercorn spell the same ASGI callable with different types
                    await worker_serve(
                        wrap_app(cast(Any, app), config.wsgi_max_body_size, "asgi"),
                        config,
                        sockets=sockets,
                        task_status=task_status,
                    )
                finally:
                    nursery.cancel_scope.cancel()  # the server stopped: so does the announcer

            nursery.start_soon(served.announce_changes)
            await nursery.start(run_server)
            log.info("serving MCP at http://%s:%d%s", *address, path)
            task_status.started(address)
    finally:
        for sock in sockets.insecure_sockets:
            sock.close()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BearerToken:
    """ASGI middleware: an HTTP request without the bearer token is answered 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer error="invalid_token"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": _UNAUTHORIZED})
            return
        await self._app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for key, value in scope["headers"]:
            if key == b"authorization":
                scheme, _, credentials = bytes(value).partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), self._token)
        return False
