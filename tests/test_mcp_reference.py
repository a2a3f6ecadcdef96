"""The runtime as an MCP client of the reference servers, and of itself.

- `@modelcontextprotocol/server-everything` (npm, pinned in conformance/package.json, run on
  the Node 22 that `make` installs there) over stdio and over streamable HTTP: listing, calls,
  progress, image and resource content, resource links, kill and reconnect.
- `mcp-server-time` (PyPI, the dev extra) over stdio: an open `inputSchema` (no
  `additionalProperties`) takes arguments it does not name.
- Our own server (`serve_http`) through our client: audio and resources both ways, progress
  and log messages from a remote tool, the same value and text as a local call.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from runtime import (
    AudioPart,
    CallContext,
    ContentPart,
    FailureKind,
    ImagePart,
    ResourceLinkPart,
    ResourcePart,
    TextPart,
    Tool,
    ToolCall,
    ToolFailure,
    ToolRegistry,
    ToolSuccess,
    fail,
    mcp,
    open_runtime,
    reporting,
    tool,
)
from runtime.mcp import serve_http

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
NODE_BIN = ROOT / "conformance" / "node_modules" / ".bin"
EVERYTHING = NODE_BIN / "mcp-server-everything"
NODE_ENV = {"PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
LIMIT = 30

needs_node = pytest.mark.skipif(
    not EVERYTHING.exists(), reason="run `make node` (make test does) to install the reference server"
)


def call(name: str, arguments: Any = None, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments if arguments is not None else {})


def ok(result: Any) -> ToolSuccess:
    assert isinstance(result, ToolSuccess), result
    return result


def failed(result: Any, kind: FailureKind) -> ToolFailure:
    assert isinstance(result, ToolFailure), result
    assert result.kind is kind, result
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def everything_stdio() -> mcp.StdioServer:
    return mcp.stdio(str(EVERYTHING), ["stdio"], env=NODE_ENV, name="everything", backoff=0.05)


class EverythingHttp:
    """server-everything's streamable HTTP transport as a process on a fixed port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EverythingHttp:
        self.proc = subprocess.Popen(
            [str(EVERYTHING), "streamableHttp"],
            env={**os.environ, **NODE_ENV, "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server-everything exited with {self.proc.returncode}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return self
            time.sleep(0.05)
        raise RuntimeError("server-everything did not start within 15 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


async def check_everything(rt: Any) -> None:
    """Listing, a plain call, content kinds, progress: what both transports must show."""
    names = {t.name for t in rt.registry}
    assert {"echo", "get-sum", "get-tiny-image", "get-resource-reference", "get-resource-links"} <= names
    assert ok(await rt.call(call("echo", {"message": "hi"}))).content == "Echo: hi"
    assert "5" in ok(await rt.call(call("get-sum", {"a": 2, "b": 3}))).content
    failed(await rt.call(call("get-sum", {"a": "two", "b": 3})), FailureKind.INVALID_ARGUMENTS)

    image = ok(await rt.call(call("get-tiny-image")))
    images = [p for p in image.parts if isinstance(p, ImagePart)]
    assert images
    assert images[0].mime_type == "image/png"
    assert images[0].data.startswith(b"\x89PNG")

    text = ok(await rt.call(call("get-resource-reference", {"resourceType": "Text", "resourceId": 1})))
    resources = [p for p in text.parts if isinstance(p, ResourcePart)]
    assert resources
    assert resources[0].text is not None
    assert resources[0].uri.startswith("demo://")
    blob = ok(await rt.call(call("get-resource-reference", {"resourceType": "Blob", "resourceId": 2})))
    blobs = [p for p in blob.parts if isinstance(p, ResourcePart) and p.blob is not None]
    assert blobs
    assert blobs[0].blob
    assert f"[binary resource {blobs[0].uri}" in blob.content  # what a model that reads text sees

    links = ok(await rt.call(call("get-resource-links", {"count": 2})))
    assert not [p for p in links.parts if isinstance(p, ResourceLinkPart)]
    read = [p for p in links.parts if isinstance(p, ResourcePart)]  # the links were read (resources/read)
    assert len(read) == 2
    assert all(p.uri.startswith("demo://") for p in read)

    seen: list[tuple[float, float | None]] = []

    async def on_progress(
        ctx: CallContext, progress: float, total: float | None, message: str | None
    ) -> None:
        assert ctx.tool_name == "trigger-long-running-operation"
        seen.append((progress, total))

    with reporting(on_progress=on_progress):
        ok(await rt.call(call("trigger-long-running-operation", {"duration": 0.3, "steps": 3})))
    assert seen == [(1, 3), (2, 3), (3, 3)]


@needs_node
async def test_server_everything_over_stdio() -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[everything_stdio()]) as rt:
            await check_everything(rt)


@needs_node
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_server_everything_over_http_killed_and_restarted(mode: str) -> None:
    server = EverythingHttp().start()
    try:
        with trio.fail_after(LIMIT):
            spec = mcp.http(server.url, mode=mode, name="everything", backoff=0.05, max_backoff=0.2)
            async with open_runtime(mcp_servers=[spec]) as rt:
                await check_everything(rt)
                server.stop()
                # Gone: calls fail UNAVAILABLE at once (none hang), and the reason is today's.
                while True:
                    result = await rt.call(call("echo", {"message": "x"}))
                    if not result.ok:
                        break
                    await trio.sleep(0.05)
                down = failed(result, FailureKind.UNAVAILABLE)
                assert "it has not connected yet" not in down.message
                server.start()
                while True:  # polling a real process's return: no event to wait on
                    result = await rt.call(call("echo", {"message": "back"}))
                    if result.ok:
                        break
                    await trio.sleep(0.05)
                assert ok(result).content == "Echo: back"
    finally:
        server.stop()


@pytest.mark.skipif(
    shutil.which("mcp-server-time", path=str(Path(sys.executable).parent)) is None, reason="dev extra"
)
async def test_mcp_server_time_keeps_its_open_schema() -> None:
    command = str(Path(sys.executable).parent / "mcp-server-time")
    spec = mcp.stdio(command, ["--local-timezone", "UTC"], name="time")
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec]) as rt:
            assert {"get_current_time", "convert_time"} <= {t.name for t in rt.registry}
            schema = rt.registry.get("get_current_time").json_schema
            assert "additionalProperties" not in schema  # open, as the server wrote it
            now = ok(await rt.call(call("get_current_time", {"timezone": "Europe/Paris"})))
            assert now.value["timezone"] == "Europe/Paris"
            # An argument the schema does not name goes through (the server ignores it).
            extra = ok(await rt.call(call("get_current_time", {"timezone": "UTC", "note": "extra"})))
            assert extra.value["timezone"] == "UTC"
            failed(await rt.call(call("get_current_time", {})), FailureKind.INVALID_ARGUMENTS)


# -- our client on our server -------------------------------------------------------------------

WAV = b"RIFF\x26\x00\x00\x00WAVEfmt "


class NoArgs(msgspec.Struct, frozen=True):
    """No arguments."""


class MediaTool(Tool[NoArgs, list[ContentPart]]):
    """Return audio, an embedded text and binary resource and a resource link."""

    name = "media"

    async def execute(self, args: NoArgs) -> list[ContentPart]:
        return [
            TextPart(text="here"),
            AudioPart(data=WAV, mime_type="audio/wav"),
            ResourcePart(uri="file:///a.txt", mime_type="text/plain", text="inside"),
            ResourcePart(uri="file:///b.bin", mime_type="application/octet-stream", blob=b"\x00\x01"),
            ResourceLinkPart(uri="file:///c", name="c", description="more"),
        ]

    def result_to_text(self, result: list[ContentPart]) -> str:
        return "here"

    def result_to_parts(self, result: list[ContentPart]) -> list[ContentPart]:
        return result


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def refuse(reason: str) -> str:
    """Always refuse."""
    fail(f"no: {reason}")


@tool
async def work(ctx: CallContext, steps: int) -> str:
    """Report progress and log as it goes."""
    await ctx.log("info", "starting", steps=steps)
    for step in range(1, steps + 1):
        await ctx.report_progress(step, total=steps, message=f"step {step}")
    await ctx.log("debug", "done")
    return "worked"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_runtime_to_runtime_round_trip(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime")
    registry = ToolRegistry([add, refuse, work, MediaTool()])
    with trio.fail_after(LIMIT):
        async with open_runtime(registry) as served, trio.open_nursery() as nursery:
            host, port = await nursery.start(serve_http, served, "127.0.0.1", 0)
            spec = mcp.http(f"http://{host}:{port}/mcp", mode=mode, prefix="remote")
            async with open_runtime(mcp_servers=[spec]) as rt:
                local = ok(await served.call(call("add", {"a": 2, "b": 2})))
                remote = ok(await rt.call(call("remote_add", {"a": 2, "b": 2})))
                assert (remote.value, remote.content) == (local.value, local.content) == (4, "4")

                local_no = failed(await served.call(call("refuse", {"reason": "x"})), FailureKind.REJECTED)
                remote_no = failed(
                    await rt.call(call("remote_refuse", {"reason": "x"})), FailureKind.REJECTED
                )
                assert remote_no.content == local_no.content == "Error: no: x"

                media = ok(await rt.call(call("remote_media")))
                assert media.parts == (
                    TextPart(text="here"),
                    AudioPart(data=WAV, mime_type="audio/wav"),
                    ResourcePart(uri="file:///a.txt", mime_type="text/plain", text="inside"),
                    ResourcePart(uri="file:///b.bin", mime_type="application/octet-stream", blob=b"\x00\x01"),
                    ResourceLinkPart(uri="file:///c", name="c", description="more"),
                )

                progress: list[tuple[float, float | None, str | None]] = []

                async def on_progress(
                    ctx: CallContext, p: float, total: float | None, message: str | None
                ) -> None:
                    progress.append((p, total, message))

                with reporting(on_progress=on_progress):
                    assert ok(await rt.call(call("remote_work", {"steps": 3}))).content == "worked"
                assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
            nursery.cancel_scope.cancel()
    # The remote tool's log messages (info and above: what the client asks for) reach our logging.
    remote_logs = [r.getMessage() for r in caplog.records if r.name == "runtime.mcp.remote"]
    assert any("starting" in m for m in remote_logs), remote_logs
    assert not any("done" in m for m in remote_logs), remote_logs


@tool
async def slow(seconds: float) -> str:
    """Take a while."""
    await trio.sleep(seconds)
    return "finally"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_long_call_lets_go_of_its_stream_and_the_client_polls(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp.server.streamable_http")
    with trio.fail_after(LIMIT):
        async with open_runtime([slow]) as served, trio.open_nursery() as nursery:
            host, port = await nursery.start(
                lambda task_status: serve_http(
                    served, "127.0.0.1", 0, sse_poll_after=0.1, task_status=task_status
                )
            )
            spec = mcp.http(f"http://{host}:{port}/mcp", mode=mode)
            async with open_runtime(mcp_servers=[spec]) as rt:
                # The stream closes after 0.1 s; the result comes back on the client's reconnect.
                assert ok(await rt.call(call("slow", {"seconds": 0.6}))).content == "finally"
                closed = [r for r in caplog.records if "closed by close_sse_stream" in r.getMessage()]
                # The server let go of the stream mid-call (the SDK offers it to handshake-era
                # sessions; a 2026-07-28 request keeps its stream).
                assert bool(closed) is (mode == "legacy")
                assert ok(await rt.call(call("slow", {"seconds": 0}))).content == "finally"
            nursery.cancel_scope.cancel()
