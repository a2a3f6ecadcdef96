"""The examples run as users would run them."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_console_trace_example_draws_a_parallel_turn_as_siblings() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "trace_console.py"), "--tree"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    tree = done.stdout.splitlines()
    names = [line.strip().split("  ")[0] for line in tree]
    depths = [(len(line) - len(line.lstrip())) // 2 for line in tree]
    assert list(zip(names, depths, strict=True)) == [
        ("agent turn", 0),
        ("execute_tool get_weather", 1),
        ("weather api", 2),
        ("execute_tool search_docs", 1),
        ("execute_tool get_wether", 1),
    ]
    assert "ERROR" in tree[-1]
    assert "did you mean 'get_weather'" in done.stderr


def test_the_demo_shows_every_outcome_of_a_parallel_turn_and_its_spans() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runtime", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    out = done.stdout
    for outcome in ("ok", "rejected", "unknown_tool", "invalid_arguments", "error", "timeout"):
        assert f"  {outcome}  " in out, outcome
    assert "7 tool messages go back to the model, in call order." in out
    assert "agent turn" in out
    assert out.count("  execute_tool ") == 7
    assert "Traceback" not in out + done.stderr


# -- the agent servers, over real HTTP on 127.0.0.1 -------------------------------------------

ASSISTANT_MESSAGE = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}} | {"id": f"c{i}"}
        for i, (name, arguments) in enumerate(
            [
                ("search_docs", '{"query": "trio", "limit": 2}'),
                ("checksum", '{"text": "abc", "rounds": 3}'),
                ("convert", '{"amount": 10, "currency": "EUR"}'),
                ("convert", '{"amount": 10, "currency": "JPY"}'),
                ("convert", '{"amount": "ten"'),
                ("get_wether", "{}"),
            ],
            start=1,
        )
    ],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _server(args: list[str]) -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, *args, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # up to 30 s for the process to import and bind
            if process.poll() is not None:
                raise AssertionError(f"the server exited: {process.communicate()[0]}")
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                threading.Event().wait(0.1)  # another process: nothing to await here
        else:
            raise AssertionError("the server did not start within 30 s")
        yield base
    finally:
        process.send_signal(signal.SIGINT)
        try:
            output = process.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            process.kill()
            output = process.communicate()[0]
    assert "Traceback" not in output, output


def _check_tool_messages(base: str) -> dict[str, object]:
    reply = httpx.post(f"{base}/v1/tool_calls", json={"message": ASSISTANT_MESSAGE}, timeout=30)
    assert reply.status_code == 200, reply.text
    messages = reply.json()["messages"]
    assert [m["role"] for m in messages] == ["tool"] * 6
    assert [m["tool_call_id"] for m in messages] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    contents = [m["content"] for m in messages]
    assert contents[0] == '["trio #0","trio #1"]'
    assert len(contents[1]) == 16
    assert contents[2] == "9.00 EUR"
    assert contents[3] == "Error: unsupported currency 'JPY'; use EUR or GBP"
    assert contents[4].startswith("Error: invalid arguments for tool 'convert'")
    assert contents[5].startswith("Error: no tool named 'get_wether'")
    health = httpx.get(f"{base}/health", timeout=5).json()
    assert health["unknown_tool_calls"] == 1
    assert health["tools"]["convert"]["failures"] == {"rejected": 1, "invalid_arguments": 1}
    assert health["tools"]["checksum"]["succeeded"] == 1
    return health  # type: ignore[no-any-return]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_fastapi_agent_server_answers_openai_tool_calls_over_http(loop: str) -> None:
    with _server(["examples/fastapi_agent_server.py", "--loop", loop]) as base:
        _check_tool_messages(base)
        quote = {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "q",
                    "type": "function",
                    "function": {"name": "get_quote", "arguments": '{"symbol": "acme"}'},
                }
            ],
        }
        reply = httpx.post(f"{base}/v1/tool_calls", json={"message": quote}, timeout=30).json()
        assert reply["messages"] == [
            {"role": "tool", "tool_call_id": "q", "content": '{"symbol":"ACME","price":104}'}
        ]
        assert [t["function"]["name"] for t in httpx.get(f"{base}/v1/tools", timeout=5).json()] == [
            "get_quote",
            "search_docs",
            "checksum",
            "convert",
        ]


def test_the_trio_agent_server_on_hypercorn_answers_over_http() -> None:
    with _server(["examples/trio_agent_server.py"]) as base:
        _check_tool_messages(base)
