"""An MCP server written without any SDK: JSON-RPC lines on stdin/stdout, for what SDKs refuse to send.

- `tools/list` holds a tool whose `inputSchema.type` is 5 (`bad`, the MCP SDK refuses it), one
  with an oversize description (`wordy`), one with an oversize schema (`huge`) and two plain
  ones (`good`, `echo`); `--tools N` adds N more (`t0`, `t1`...).
- Results carry no `resultType`, on either protocol era (a 2025-era server's habit).
- `server/discover` is not known (-32601): `mode="auto"` falls back to `initialize`.
- `--lose` adds `hang` (never answered) and `lose` (answered with the error the SDK gives a call
  whose connection closed: the client takes its connection for lost, the process still runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

OBJECT = {"type": "object", "properties": {"x": {"type": "integer"}}}


LOSING = [
    {"name": "hang", "inputSchema": {"type": "object"}},
    {"name": "lose", "inputSchema": {"type": "object"}},
]


def tools(extra: int, lose: bool = False) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = [
        {"name": "good", "description": "A good tool.", "inputSchema": OBJECT},
        {"name": "bad", "description": "Refused by the SDK.", "inputSchema": {"type": 5}},
        {"name": "wordy", "description": "w" * 50_000, "inputSchema": OBJECT},
        {
            "name": "huge",
            "description": "A schema of 300 KB.",
            "inputSchema": {
                "type": "object",
                "properties": {f"p{i}": {"type": "string", "description": "d" * 300} for i in range(1000)},
            },
        },
        {"name": "echo", "description": "Echo the arguments.", "inputSchema": {"type": "object"}},
    ]
    listed.extend({"name": f"t{i}", "inputSchema": OBJECT} for i in range(extra))
    return listed + LOSING if lose else listed


def answer(message: dict[str, Any], extra: int, lose: bool = False) -> dict[str, Any] | None:
    method = message.get("method")
    params = message.get("params") or {}
    if "id" not in message:
        return None  # a notification
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": tools(extra, lose)}
    elif method == "tools/call" and params.get("name") == "hang":
        return None
    elif method == "tools/call" and params.get("name") == "lose":
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32000, "message": "Connection closed"},
        }
    elif method == "tools/call":
        text = json.dumps({"tool": params.get("name"), "arguments": params.get("arguments")}, sort_keys=True)
        result = {"content": [{"type": "text", "text": text}]}
    elif method == "ping":
        result = {}
    else:
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32601, "message": "Method not found"},
        }
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--lose", action="store_true")
    args = parser.parse_args()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line), args.tools, args.lose)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
