"""A server for tests/test_mcp_artifacts.py: `serve_http` with one bearer token per principal, a
runtime that keeps results over the limit whole (`Artifacts`), a tool whose result is large, and
a tool that streams. Prints its URL on stdout once it serves; serves until killed.

Run: `python artifacts.py` (with the project on PYTHONPATH).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import trio
import trio.lowlevel

from runtime import Artifacts, open_runtime, tool
from runtime.mcp import serve_http

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
LIMIT = 100_000  # max_result_chars


def big_text(megabytes: int) -> str:
    """`megabytes` MB of text that differs along its length (a misplaced page would show)."""
    line = "".join(f"{i:08d} the quick brown fox jumps over the lazy dog\n" for i in range(20_000))
    text = line * (megabytes * 1_000_000 // len(line) + 1)
    return text[: megabytes * 1_000_000]


@tool
async def report(megabytes: int) -> str:
    """A report of `megabytes` MB."""
    await trio.lowlevel.checkpoint()
    return big_text(megabytes)


@tool
async def count(n: int) -> AsyncIterator[str]:
    """Count to `n`, one line at a time."""
    for i in range(1, n + 1):
        await trio.sleep(0.001)
        yield f"{i}\n"


async def main() -> None:
    async with (
        open_runtime(
            [report, count], tracing=False, max_result_chars=LIMIT, artifacts=Artifacts(tools=False)
        ) as rt,
        trio.open_nursery() as nursery,
    ):
        host, port = await nursery.start(functools.partial(serve_http, rt, port=0, tokens=TOKENS))
        print(f"http://{host}:{port}/mcp", flush=True)


if __name__ == "__main__":
    trio.run(main)
