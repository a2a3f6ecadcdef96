"""A raw MCP server (JSON-RPC lines on stdin/stdout, no SDK) that writes down the `_meta` of each
`tools/call` it gets, for tests/test_hostile_mcp.py.

    python keys.py LOG

It serves `charge(order, hang)`, said idempotent (`idempotentHint`), and `quote(order, hang)`,
said read-only (`readOnlyHint`). Each call appends `{"order", "meta"}` to LOG as a JSON line; a call with `hang` true is never answered the first
time its order is seen (the client's timeout ends it, and its Retry sends it again).
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOL = {
    "name": "charge",
    "description": "Charge an order.",
    "inputSchema": {
        "type": "object",
        "properties": {"order": {"type": "string"}, "hang": {"type": "boolean"}},
        "required": ["order"],
    },
    "annotations": {"idempotentHint": True},
}
QUOTE = {**TOOL, "name": "quote", "description": "Quote an order.", "annotations": {"readOnlyHint": True}}


def main() -> None:
    log = sys.argv[1]
    seen: set[str] = set()
    for line in sys.stdin:
        message: dict[str, Any] = json.loads(line)
        if "id" not in message:
            continue  # a notification (initialized, cancelled)
        method, params = message.get("method"), message.get("params") or {}
        result: dict[str, Any]
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "keys", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [TOOL, QUOTE]}
        elif method == "tools/call":
            arguments = params.get("arguments") or {}
            order = arguments.get("order", "")
            with open(log, "a") as f:
                f.write(json.dumps({"order": order, "meta": params.get("_meta") or {}}) + "\n")
            if arguments.get("hang") and order not in seen:
                seen.add(order)
                continue  # never answered
            result = {"content": [{"type": "text", "text": f"charged {order}"}], "isError": False}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
