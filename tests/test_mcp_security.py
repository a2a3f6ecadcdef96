"""`serve_http` and `python -m runtime serve --http` are safe by default.

Host and Origin allow-lists on every bind (0.0.0.0 included), no empty token, a non-loopback
bind needs a token (or `--insecure-no-auth`), bearer tokens checked through the SDK's
`TokenVerifier`, an oversize body is 413, a connection that sends nothing is closed after the
read timeout, and every refusal is logged. Real servers on free ports, real HTTP requests.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
import trio

from runtime import Runtime, open_runtime
from runtime.mcp import serve_http
from runtime.mcp._server_http import StaticToken, security_settings
from tests.mcp_fixtures import registry

LIMIT = 20
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "security-test", "version": "1"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@asynccontextmanager
async def serving(host: str = "127.0.0.1", **options: Any) -> AsyncIterator[tuple[Runtime, int]]:
    async with open_runtime(registry) as rt, trio.open_nursery() as nursery:
        _, port = await nursery.start(
            lambda task_status: serve_http(rt, host, 0, task_status=task_status, **options)
        )
        yield rt, port
        nursery.cancel_scope.cancel()


async def post(port: int, body: Any = INITIALIZE, **headers: str) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=5) as client:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await client.post(
            f"http://127.0.0.1:{port}/mcp", content=content, headers={**HEADERS, **headers}
        )


async def raw_status(port: int, extra_headers: bytes) -> int:
    """The status of a POST written by hand (httpx refuses a header value with trailing space)."""
    body = json.dumps(INITIALIZE).encode()
    request = (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: application/json, text/event-stream\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
        % (port, len(body), extra_headers)
    )
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request + body)
        reply = await stream.receive_some(4096)
    return int(reply.split(b" ", 2)[1])


async def test_a_wildcard_bind_refuses_foreign_host_and_origin(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="runtime.mcp")
    auth = {"Authorization": "Bearer s3cret"}
    with trio.fail_after(LIMIT):
        async with serving("0.0.0.0", token="s3cret", allowed_hosts=["mcp.example.com"]) as (_, port):
            assert (await post(port, **auth)).status_code == 200
            assert (await post(port, Host="evil.example", **auth)).status_code == 421
            assert (await post(port, Host=f"evil.example:{port}", **auth)).status_code == 421
            assert (await post(port, Origin="http://evil.example", **auth)).status_code == 403
            # Names given with allowed_hosts (and loopback names) are let in.
            assert (await post(port, Host="mcp.example.com", **auth)).status_code == 200
            ok = await post(port, Host=f"localhost:{port}", Origin=f"http://localhost:{port}", **auth)
            assert ok.status_code == 200
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("MCP HTTP")]
    assert "421 Host header not allowed" in refusals[0]  # the first at once, the rest in one line
    assert "2 more requests refused" in refusals[1]
    assert "403 forbidden" in refusals[1]
    assert len(refusals) == 2
    assert not [r for r in caplog.records if r.name.startswith("mcp.server")]  # said once, by us


async def test_a_loopback_bind_refuses_foreign_host_too() -> None:
    with trio.fail_after(LIMIT):
        async with serving("127.0.0.2") as (_, port), httpx2.AsyncClient(timeout=5) as client:
            url = f"http://127.0.0.2:{port}/mcp"
            body = json.dumps(INITIALIZE).encode()
            assert (await client.post(url, content=body, headers=HEADERS)).status_code == 200
            evil = {**HEADERS, "Host": "attacker.example"}
            assert (await client.post(url, content=body, headers=evil)).status_code == 421


async def test_the_bearer_token_is_checked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="runtime.mcp")
    with trio.fail_after(LIMIT):
        async with serving(token="s3cret") as (_, port):
            assert (await post(port)).status_code == 401
            assert await raw_status(port, b"Authorization: Bearer \r\n") == 401  # empty token
            assert (await post(port, Authorization="Bearer s3cre")).status_code == 401
            assert (await post(port, Authorization="Basic s3cret")).status_code == 401
            assert (await post(port, Authorization="Bearer s3cret")).status_code == 200
    assert any("401 not authenticated" in r.getMessage() for r in caplog.records)


async def test_unsafe_options_are_refused_before_binding() -> None:
    async with open_runtime(registry) as rt:
        with pytest.raises(ValueError, match="token is empty"):
            await serve_http(rt, "127.0.0.1", 0, token="")
        with pytest.raises(ValueError, match="token is empty"):
            await serve_http(rt, "127.0.0.1", 0, token="  ")
        with pytest.raises(ValueError, match=r"0\.0\.0\.0 \(not loopback\) needs a token"):
            await serve_http(rt, "0.0.0.0", 0)
        with pytest.raises(ValueError, match="max_body must be a positive number"):
            await serve_http(rt, "127.0.0.1", 0, max_body=0)
    with pytest.raises(ValueError, match="empty"):
        StaticToken("")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--http", "127.0.0.1:0", "--token", ""], "error: the MCP bearer token is empty"),
        (["--http", "0.0.0.0:0"], "error: serving MCP on 0.0.0.0 (not loopback) needs a token"),
    ],
)
def test_the_command_line_refuses_unsafe_serving_in_one_line(options: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runtime", "serve", "tests.mcp_fixtures:registry", *options],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "."},
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(message)


async def test_an_oversize_body_gets_413() -> None:
    with trio.fail_after(LIMIT):
        async with serving(max_body=2000) as (_, port):
            assert (await post(port)).status_code == 200
            big = dict(INITIALIZE, params={**INITIALIZE["params"], "padding": "x" * 5000})  # type: ignore[dict-item]
            assert (await post(port, big)).status_code == 413


async def test_a_connection_that_sends_nothing_is_closed_after_the_read_timeout() -> None:
    with trio.fail_after(LIMIT):
        async with serving(read_timeout=0.3) as (_, port):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                began = trio.current_time()
                with trio.fail_after(5):
                    assert await stream.receive_some(1024) == b""  # closed by the server
                assert trio.current_time() - began >= 0.25


def test_the_allow_lists_name_the_bound_host_and_loopback() -> None:
    settings = security_settings("0.0.0.0", ["mcp.example.com", "10.0.0.5:8000"])
    assert {"0.0.0.0:*", "localhost:*", "127.0.0.1:*", "[::1]:*", "mcp.example.com", "10.0.0.5:8000"} <= set(
        settings.allowed_hosts
    )
    assert "10.0.0.5:8000:*" not in settings.allowed_hosts
    assert "https://mcp.example.com" in settings.allowed_origins
    assert settings.enable_dns_rebinding_protection
