"""A client process for tests/test_mcp_tasks_resume.py: a runtime on a SQLite journal that
detaches one call of a remote server's task tool, then waits to be killed.

    python tests/mcp_task_client.py URL DB NODE TOOL ARGUMENTS_JSON

It prints {"id": DETACHED_ID} once the call is detached, and {"journaled": TASK_ID} once the
remote task's id is in the call's journal record (the point a kill -9 is meant to come after).
"""

from __future__ import annotations

import json
import logging
import sys

import trio

from runtime import Durable, ToolCall, mcp, open_runtime
from runtime.stores import SQLiteStore


class _Journaled(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "journaled for detached call" in message:
            task = message.split(" task ", 1)[1].split(" ", 1)[0]
            print(json.dumps({"journaled": task}), flush=True)


async def main(url: str, db: str, node: str, tool: str, arguments: str) -> None:
    logger = logging.getLogger("runtime.mcp")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_Journaled())
    remote = mcp.http(
        url, headers={"Authorization": "Bearer tok-alice"}, name="tasks", mode="2026-07-28", backoff=0.05
    )
    async with open_runtime(
        mcp_servers=[remote],
        store=SQLiteStore(db),
        durable=Durable(node=node, poll_interval=0.1),
        tracing=False,
    ) as rt:
        handle = await rt.detach(ToolCall(id="c-1", name=tool, arguments=arguments))
        print(json.dumps({"id": handle.id}), flush=True)
        await trio.sleep_forever()


trio.run(main, *sys.argv[1:6])
