"""MCP in both directions: MCP servers' tools inside a runtime, and a runtime's tools served over MCP.

Client: `stdio(...)`, `http(...)`, `sse(...)` describe servers to connect to; pass them as
`open_runtime(..., mcp_servers=[...])`. Server: `serve_stdio(rt)` and `serve_http(rt, ...)`.
"""

from ._client_specs import HttpServer as HttpServer
from ._client_specs import HttpSettings as HttpSettings
from ._client_specs import ServerSettings as ServerSettings
from ._client_specs import ServerSpec as ServerSpec
from ._client_specs import SseServer as SseServer
from ._client_specs import StdioServer as StdioServer
from ._client_specs import http as http
from ._client_specs import sse as sse
from ._client_specs import stdio as stdio
from ._client_tool import McpTool as McpTool
from ._header import Header as Header
from ._oauth import MemoryTokenStorage as MemoryTokenStorage
from ._oauth import oauth as oauth
from ._pins import ToolChange as ToolChange
from ._schema_tool import JsonSchemaTool as JsonSchemaTool
from ._server import serve_stdio as serve_stdio
from ._server_http import serve_http as serve_http

__all__ = [
    "Header",
    "HttpServer",
    "HttpSettings",
    "JsonSchemaTool",
    "McpTool",
    "MemoryTokenStorage",
    "ServerSettings",
    "ServerSpec",
    "SseServer",
    "StdioServer",
    "http",
    "oauth",
    "serve_http",
    "serve_stdio",
    "sse",
    "stdio",
]
