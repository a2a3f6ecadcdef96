"""MCP call latency: a tool of an MCP server called through the runtime, against the SDK's own client.

subject: `rt.call(ToolCall(...))` on a runtime opened with `mcp_servers=[...]` (arguments
checked, an actor hop, the SDK client underneath, the result mapped).
floor: `mcp.Client.call_tool(...)` of the official SDK, straight, on the same server.

Same run, calls alternating one by one, medians; sequential calls (one in flight). Over stdio
each client starts its own process of the same server program; over streamable HTTP both
talk to one server process. Both protocol eras.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import trio
from mcp import Client, StdioServerParameters

from runtime import ToolCall, mcp, open_runtime

from ._harness import Report, Row

SERVER = str(Path(__file__).resolve().parent.parent / "tests" / "mcp_servers" / "demo.py")
ERAS = ("legacy", "2026-07-28")
ARGS = {"a": 1, "b": 2}


async def _timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1e6


async def _measure(transport: str, era: str, url: str | None, n: int) -> tuple[float, float]:
    if transport == "stdio":
        spec: mcp.ServerSpec = mcp.stdio(sys.executable, [SERVER], mode=era)
        target: StdioServerParameters | str = StdioServerParameters(command=sys.executable, args=[SERVER])
    else:
        assert url is not None
        spec, target = mcp.http(url, mode=era), url
    call = ToolCall(id="b", name="add", arguments='{"a": 1, "b": 2}')
    async with open_runtime(mcp_servers=[spec], tracing=False) as rt, Client(target, mode=era) as client:

        async def through_runtime() -> None:
            result = await rt.call(call)
            assert result.ok, result

        async def through_sdk() -> None:
            result = await client.call_tool("add", ARGS)
            assert not result.is_error, result

        # One call of each in turn, the order flipped every round (whichever goes second may
        # pay for the other's background work), so that drift hits both alike; the first tenth
        # warms both paths and is dropped.
        subject: list[float] = []
        floor: list[float] = []
        for i in range(n + n // 10):
            if i % 2:
                subject.append(await _timed(through_runtime))
                floor.append(await _timed(through_sdk))
            else:
                floor.append(await _timed(through_sdk))
                subject.append(await _timed(through_runtime))
    return statistics.median(subject[n // 10 :]), statistics.median(floor[n // 10 :])


@contextlib.contextmanager
def _http_server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the MCP HTTP server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=5)


def main(quick: bool = False) -> Report:
    n = 100 if quick else 1000
    report = Report("mcp")
    with _http_server() as url:
        for transport in ("stdio", "http"):
            for era in ERAS:
                subject, floor = trio.run(_measure, transport, era, url, n)
                report.add(
                    Row(
                        workload=f"mcp call {transport} {era}",
                        subject="runtime",
                        floor="sdk",
                        subject_us=subject,
                        floor_us=floor,
                        note=f"{subject - floor:+.0f} us per call; rt.call vs mcp.Client.call_tool",
                    )
                )
    return report


if __name__ == "__main__":
    report = main(quick="--quick" in sys.argv)
    report.print()
