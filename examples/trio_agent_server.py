"""The agent's tool server on trio: hypercorn's trio worker, the runtime in the app's lifespan.

    .venv/bin/python examples/trio_agent_server.py --port 8000
    .venv/bin/hypercorn --worker-class trio examples.trio_agent_server:app --bind 127.0.0.1:8000

Under trio there is nothing to bridge: the lifespan opens the runtime with `open_runtime`,
and each request's handler (a trio task) awaits `rt.call_many` directly. FastAPI and
Starlette run on trio through anyio. Same endpoint as examples/fastapi_agent_server.py.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import signal
from collections.abc import AsyncIterator
from typing import Any

import trio
from fastapi import FastAPI, Request

from runtime import Runtime, ToolRegistry, open_runtime, tool, validate
from runtime.providers import openai


@tool(timeout=5)
async def search_docs(query: str, limit: int = 3) -> list[str]:
    """Search the documentation (trio I/O)."""
    await trio.sleep(0.001)
    return [f"{query} #{i}" for i in range(limit)]


@tool(timeout=5)
def checksum(text: str, rounds: int = 200) -> str:
    """SHA-256 of a text, iterated (CPU work, run in a worker thread)."""
    digest = text.encode()
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()[:16]


@tool
async def convert(amount: float, currency: str) -> str:
    """Convert an amount in USD to EUR or GBP."""
    validate(currency in ("EUR", "GBP"), f"unsupported currency {currency!r}; use EUR or GBP")
    rate = {"EUR": 0.9, "GBP": 0.8}[currency]
    return f"{amount * rate:.2f} {currency}"


registry = ToolRegistry([search_docs, checksum, convert])


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with open_runtime(registry, default_timeout=30) as rt:
        app.state.tools = rt
        yield


app = FastAPI(title="tool server (trio)", lifespan=lifespan)


@app.post("/v1/tool_calls")
async def run_tool_calls(request: Request) -> dict[str, Any]:
    """Run the tool calls of one assistant message; one tool message per call, in order."""
    body = await request.json()
    rt: Runtime = request.app.state.tools
    results = await rt.call_many(openai.calls_from_message(body["message"]), timeout=body.get("timeout"))
    return {"messages": openai.result_messages(results)}


@app.get("/health")
async def health() -> dict[str, Any]:
    rt: Runtime = app.state.tools
    return rt.statistics().to_dict()


async def serve(host: str, port: int) -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None

    async def stop_on_signal() -> None:  # Ctrl-C or SIGTERM: a graceful shutdown, lifespan included
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                return

    await hypercorn_serve(app, config, shutdown_trigger=stop_on_signal)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    trio.run(serve, args.host, args.port)


if __name__ == "__main__":
    main()
