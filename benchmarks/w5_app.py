"""W5's agent server: one FastAPI endpoint, OpenAI `tool_calls` in, tool messages out.

    python -m benchmarks.w5_app --server uvicorn --loop uvloop --mode runtime --port 8000

Modes (the same tools, the same endpoint, the same JSON out):
- floor: the handler calls the functions directly: `json.loads` the arguments, await the
  async ones, run the sync ones with `asyncio.to_thread` (trio: `trio.to_thread`), as any
  server must so as not to block its loop; exceptions become "Error: ..." texts.
- openai-agents: each call through the peer's `FunctionTool.on_invoke_tool`.
- runtime: `runtime.embed.open_asyncio_runtime` in the lifespan (trio as the loop's guest),
  `await rt.call_many(calls)`; on hypercorn's trio worker, `open_runtime` in the lifespan.
- runtime-thread: `RuntimeThread` in the lifespan, `await rt.acall_many(calls)`.

The tools: an async I/O call (2 ms), a CPU-bound sync function (SHA-256 rounds), a small
sync function, and an async function that raises for one argument in ten.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from fastapi import FastAPI, Request

from runtime import ToolCall, ToolRegistry, open_runtime, tool
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.providers import openai

IO_SECONDS = 0.002
TABLE = {f"k{i}": f"value {i}" for i in range(100)}


async def fetch(key: str) -> dict[str, Any]:
    """Fetch a record (async I/O)."""
    await anyio.sleep(IO_SECONDS)  # asyncio or trio, whichever runs it
    return {"key": key, "size": len(key)}


def digest(text: str, rounds: int = 100) -> str:
    """Iterated SHA-256 (CPU)."""
    data = text.encode()
    for _ in range(rounds):
        data = hashlib.sha256(data).digest()
    return data.hex()[:16]


def lookup(key: str) -> str:
    """A table lookup (small sync work)."""
    return TABLE.get(key, "missing")


async def risky(n: int) -> int:
    """Fails for multiples of ten."""
    if n % 10 == 0:
        raise ValueError(f"{n} is unlucky")
    return n * 2


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "fetch": fetch,
    "digest": digest,
    "lookup": lookup,
    "risky": risky,
}
# fetch is anyio code: it runs on whichever loop calls it (the server's asyncio loop under
# open_asyncio_runtime, trio under hypercorn's trio worker or RuntimeThread).
REGISTRY = ToolRegistry([tool(f, loop="any") if f is fetch else tool(f) for f in FUNCTIONS.values()])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


# -- the modes' handlers: calls -> tool messages --------------------------------------------

Handler = Callable[[list[ToolCall]], Awaitable[list[dict[str, Any]]]]


async def _floor_one(call: ToolCall, to_thread: Callable[..., Awaitable[Any]]) -> dict[str, Any]:
    try:
        fn = FUNCTIONS[call.name]
        raw = call.arguments
        kwargs = json.loads(raw) if isinstance(raw, str) else raw
        if asyncio.iscoroutinefunction(fn):
            value = await fn(**kwargs)
        else:
            value = await to_thread(lambda: fn(**kwargs))
        content = _text(value)
    except Exception as exc:
        content = f"Error: {type(exc).__name__}: {exc}"
    return {"role": "tool", "tool_call_id": call.id, "content": content}


def floor_handler(to_thread: Callable[..., Awaitable[Any]], on_trio: bool = False) -> Handler:
    async def handle(calls: list[ToolCall]) -> list[dict[str, Any]]:
        if not on_trio:
            return list(await asyncio.gather(*(_floor_one(c, to_thread) for c in calls)))
        results: list[dict[str, Any]] = [{} for _ in calls]

        async def one(i: int, call: ToolCall) -> None:
            results[i] = await _floor_one(call, to_thread)

        async with anyio.create_task_group() as tg:
            for i, call in enumerate(calls):
                tg.start_soon(one, i, call)
        return results

    return handle


def openai_agents_handler() -> Handler:
    from agents import function_tool
    from agents.tool_context import ToolContext

    tools = {name: function_tool(fn) for name, fn in FUNCTIONS.items()}

    async def one(call: ToolCall) -> dict[str, Any]:
        raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        fn_tool = tools.get(call.name)
        if fn_tool is None:
            content = f"Error: tool {call.name} not found"
        else:
            ctx = ToolContext(None, tool_name=call.name, tool_call_id=call.id, tool_arguments=raw)
            content = _text(await fn_tool.on_invoke_tool(ctx, raw))
        return {"role": "tool", "tool_call_id": call.id, "content": content}

    async def handle(calls: list[ToolCall]) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(one(c) for c in calls)))

    return handle


# -- the app ---------------------------------------------------------------------------------


def create_app(mode: str, flavour: str = "asyncio") -> FastAPI:
    """The W5 app for `mode`; `flavour` "trio" for hypercorn's trio worker."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if mode == "floor":
            if flavour == "trio":
                import trio

                app.state.handle = floor_handler(trio.to_thread.run_sync, on_trio=True)
            else:
                app.state.handle = floor_handler(asyncio.to_thread)
            yield
        elif mode == "openai-agents":
            app.state.handle = openai_agents_handler()
            yield
        elif mode == "runtime" and flavour == "trio":
            async with open_runtime(REGISTRY, tracing=False) as rt:
                app.state.handle = lambda calls: _messages(rt.call_many(calls))
                yield
        elif mode == "runtime":
            async with open_asyncio_runtime(REGISTRY, tracing=False) as art:
                app.state.handle = lambda calls: _messages(art.call_many(calls))
                yield
        elif mode == "runtime-thread":
            with RuntimeThread(REGISTRY, tracing=False) as thread:
                app.state.handle = lambda calls: _messages(thread.acall_many(calls))
                yield
        else:
            raise ValueError(f"unknown mode {mode!r}")

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/tool_calls")
    async def run_tool_calls(request: Request) -> dict[str, Any]:
        body = await request.json()
        calls = openai.calls_from_message(body["message"])
        return {"messages": await request.app.state.handle(calls)}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"mode": mode}

    return app


async def _messages(results: Awaitable[list[Any]]) -> list[dict[str, Any]]:
    return openai.result_messages(await results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", choices=["uvicorn", "hypercorn"], default="uvicorn")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="uvloop")
    parser.add_argument("--mode", default=os.environ.get("W5_MODE", "runtime"))
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    if args.server == "uvicorn":
        import uvicorn

        uvicorn.run(
            create_app(args.mode),
            host="127.0.0.1",
            port=args.port,
            loop=args.loop,
            log_level="warning",
            access_log=False,
            backlog=4096,
        )
    else:
        import trio
        from hypercorn.config import Config
        from hypercorn.trio import serve

        config = Config()
        config.bind = [f"127.0.0.1:{args.port}"]
        config.accesslog = None
        config.backlog = 4096
        trio.run(serve, create_app(args.mode, "trio"), config)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
