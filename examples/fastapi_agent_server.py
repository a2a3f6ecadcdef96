"""An agent's tool server on FastAPI: OpenAI `tool_calls` in, `role: "tool"` messages out.

    .venv/bin/uvicorn examples.fastapi_agent_server:app --port 8000          # uvloop if installed
    .venv/bin/uvicorn examples.fastapi_agent_server:app --port 8000 --loop asyncio
    .venv/bin/python examples/fastapi_agent_server.py --port 8000            # the same, via uvicorn.run

    curl -s localhost:8000/v1/tool_calls -H 'content-type: application/json' -d '{"message":
      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_quote", "arguments": "{\\"symbol\\": \\"ACME\\"}"}}]}}'

The runtime opens in the app's lifespan with `open_asyncio_runtime`: it runs on the server's
own event loop (trio as a guest of asyncio or uvloop), so no second thread competes with the
handlers. The tools: an asyncio tool (asyncio I/O, `loop="asyncio"`), a trio tool, a CPU-bound
sync tool (worker thread) and one that refuses bad input. Every call gets one tool message,
in call order, whatever happens (an unknown tool, malformed arguments, a tool that raises).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

import trio
from fastapi import FastAPI, Request

from runtime import Description, ToolRegistry, tool, validate
from runtime.embed import AsyncioRuntime, open_asyncio_runtime
from runtime.providers import openai


@tool(loop="asyncio", timeout=5)
async def get_quote(symbol: Annotated[str, Description("ticker symbol, e.g. ACME")]) -> dict[str, Any]:
    """Latest price for a ticker (asyncio I/O: a stand-in for an aiohttp or asyncpg call)."""
    await asyncio.sleep(0.001)
    return {"symbol": symbol.upper(), "price": 100 + len(symbol)}


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


registry = ToolRegistry([get_quote, search_docs, checksum, convert])


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with open_asyncio_runtime(registry, default_timeout=30) as rt:
        app.state.tools = rt
        yield


app = FastAPI(title="tool server", lifespan=lifespan)


@app.get("/v1/tools")
async def list_tools() -> list[dict[str, Any]]:
    """The tools, as OpenAI function schemas (strict mode)."""
    return registry.schemas("openai", strict=True)


@app.post("/v1/tool_calls")
async def run_tool_calls(request: Request) -> dict[str, Any]:
    """Run the tool calls of one assistant message; one tool message per call, in order."""
    body = await request.json()
    rt: AsyncioRuntime = request.app.state.tools
    calls = openai.calls_from_message(body["message"])
    results = await rt.call_many(calls, timeout=body.get("timeout"))
    return {"messages": openai.result_messages(results)}


@app.get("/health")
async def health() -> dict[str, Any]:
    """The runtime's counters, as plain JSON."""
    rt: AsyncioRuntime = app.state.tools
    return rt.statistics().to_dict()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, loop=args.loop, log_level="warning")


if __name__ == "__main__":
    main()
