"""An MCP server written without any SDK (JSON-RPC lines on stdin/stdout, the 2026-07-28 wire)
whose task-augmented tools (SEP-2663) answer what a real server should not, for
tests/test_mcp_tasks_client.py:

- `polled`: a task that is `working` for two tasks/get, then `completed` ("polled"); 0.1 s polls.
- `lying`: a task whose pollIntervalMs is 30 s; with `--listen`, each subscriptions/listen for it
  (and each tasks/get) is followed by a `notifications/tasks` saying it `completed` with "lie",
  while tasks/get says `working` once, then `completed` with "truth".
- `sleepy`: `polled` with a pollIntervalMs of 30 s (a server that asks for slow polls, as
  FastMCP's 5 s default does, of a task that ends at once).
- `odd`: a task whose status is "paused" (no status of SEP-2663).
- `mute`: a task that says `input_required` with no `inputRequests`, for ever.
- `huge`: a CreateTaskResult whose taskId is a megabyte.
- `seen`: (no task) what the server saw: tasks/get and tasks/cancel per task id (ids cut to 20
  characters), and the listens for task ids.

subscriptions/listen: without `--listen`, or without `taskIds`, -32601.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

TASKS = "io.modelcontextprotocol/tasks"
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
TOOLS = ["polled", "sleepy", "lying", "odd", "mute", "huge"]
gets: Counter[str] = Counter()
cancels: list[str] = []
listens: list[list[str]] = []
listening: dict[str, Any] = {}  # task id -> the id of the listen request for it
made = 0


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def task(task_id: str, status: str, poll: int, **extra: Any) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "status": status,
        "createdAt": "2026-07-28T00:00:00Z",
        "lastUpdatedAt": "2026-07-28T00:00:00Z",
        "ttlMs": 600000,
        "pollIntervalMs": poll,
        **extra,
    }


def lie(task_id: str) -> None:
    listen = listening.get(task_id)
    if listen is not None:
        params = task(task_id, "completed", 30000, result=text("lie"))
        send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/tasks",
                "params": {**params, "_meta": {SUBSCRIPTION: listen}},
            }
        )


def answer(message: dict[str, Any], can_listen: bool) -> dict[str, Any] | None:
    global made
    method = message.get("method")
    params = message.get("params") or {}
    if "id" not in message:
        return None  # a notification
    if method == "tools/list":
        listed = [
            {"name": name, "inputSchema": {"type": "object"}, "_meta": {TASKS: {"taskSupport": "required"}}}
            for name in TOOLS
        ]
        listed.append({"name": "seen", "inputSchema": {"type": "object"}})
        result: dict[str, Any] = {"resultType": "complete", "tools": listed}
    elif method == "tools/call" and params.get("name") == "seen":
        seen = {"gets": dict(gets), "cancels": cancels, "listens": listens}
        result = {"resultType": "complete", **text(json.dumps(seen))}
    elif method == "tools/call" and params.get("name") in TOOLS:
        made += 1
        name = params["name"]
        task_id = "x" * 1_000_000 if name == "huge" else f"{name}-{made}"
        result = {
            "resultType": "task",
            **task(task_id, "working", 30000 if name in ("lying", "sleepy") else 100),
        }
    elif method == "tasks/get":
        task_id = str(params.get("taskId"))
        gets[task_id[:20]] += 1
        n = gets[task_id[:20]]
        if task_id.startswith(("polled-", "sleepy-")):
            done = n > 2
            result = task(
                task_id,
                "completed" if done else "working",
                100 if task_id.startswith("polled-") else 30000,
                **({"result": text("polled")} if done else {}),
            )
        elif task_id.startswith("lying-"):
            done = n > 1
            result = task(
                task_id,
                "completed" if done else "working",
                30000,
                **({"result": text("truth")} if done else {}),
            )
        elif task_id.startswith("odd-"):
            result = task(task_id, "paused", 100)
        elif task_id.startswith("mute-"):
            result = task(task_id, "input_required", 100)
        else:
            return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "no task"}}
        result["resultType"] = "complete"
        send({"jsonrpc": "2.0", "id": message["id"], "result": result})
        if task_id.startswith("lying-") and not n > 1:
            lie(task_id)
        return None
    elif method == "tasks/cancel":
        cancels.append(str(params.get("taskId"))[:20])
        result = {"resultType": "complete"}
    elif method == "subscriptions/listen" and can_listen and "taskIds" in (params.get("notifications") or {}):
        ids = [str(t) for t in params["notifications"]["taskIds"]]
        listens.append([t[:20] for t in ids])
        meta = {SUBSCRIPTION: message["id"]}
        ack = {"notifications": {"taskIds": ids}, "_meta": meta}
        send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": ack})
        for task_id in ids:
            listening[task_id] = message["id"]
            if task_id.startswith("lying-"):
                lie(task_id)
        return None  # the stream stays open
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
    parser.add_argument("--listen", action="store_true")
    args = parser.parse_args()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line), args.listen)
        if reply is not None:
            send(reply)


if __name__ == "__main__":
    main()
