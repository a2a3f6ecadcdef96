"""The runtime against its peers (docs/ARCHITECTURE.md section 4), on the same tools, in one run.

W2: 1,000 concurrent calls of `add(a: int, b: int) -> int`, each starting from the JSON text
the model sends ('{"a": 1, "b": 2}'). The asyncio peers run under `asyncio.gather`; the runtime
runs `rt.call_many` under trio. Figures are microseconds per call.
W3: making a tool and its JSON schema from a realistic function (an Annotated description, a
default, a Literal), per tool.

Every row's floor is one floor measured once in this run, interleaved with all subjects, so
the ratios compare across rows: floor_a (cached msgspec decode + call + encode) for W2, and
msgspec defstruct + json.schema for W3. Each peer is driven through its normal public per-call
path, as its own agent loop would call it, with no tuning either way:

- pydantic-ai: `ToolManager.handle_call(ToolCallPart)` on a manager prepared for a run step.
- openai-agents: `FunctionTool.on_invoke_tool(ToolContext(...), json_text)`.
- langchain-core: `StructuredTool.ainvoke(dict)` on the `@tool` tool, after `json.loads`.
- fastmcp: `FunctionTool.run(dict)` on `Tool.from_function(fn)`, after `json.loads`.

What each call returns differs: pydantic-ai, openai-agents and langchain hand back the
Python value (their agent loops serialize it afterwards); fastmcp and the runtime return a
result with the value already serialized. So the peers' rows leave some work out.

The peers are the optional `bench` extra; each is imported only inside its own functions,
and a missing one is skipped with a one-line message.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import importlib.util
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import trio
from pydantic import Field  # a dependency of mcp, so present without the bench extra

from runtime import Description, ToolRegistry, tool

from . import bench_runtime
from ._harness import Report, Row, compare, per_op_sync

RAW = bench_runtime.RAW
BATCH = 1000

# name shown -> (import name, distribution for the version, claimed slower than us in W2, in W3)
PEERS: dict[str, tuple[str, str, bool, bool]] = {
    "pydantic-ai": ("pydantic_ai", "pydantic-ai-slim", True, True),
    "openai-agents": ("agents", "openai-agents", True, True),
    "langchain-core": ("langchain_core", "langchain-core", False, True),
    "fastmcp": ("fastmcp", "fastmcp", True, False),
}
SEVERAL = 3.0  # "several times faster" (W3) is taken to mean at least this factor


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# -- W2: per-call paths --------------------------------------------------------------------------
# Each `_*_caller` sets a peer up outside the timing and returns `call(i)`, the i-th call's
# awaitable. The model's tool-call message (our ToolCall, pydantic-ai's ToolCallPart) is built
# once, as bench_runtime.runtime_fanout does for ours; everything the framework does per call,
# including its per-call context object, is inside the timing.

Caller = Callable[[int], Awaitable[Any]]


async def _pydantic_ai_caller() -> Caller:
    from pydantic_ai import RunContext
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tool_manager import ToolManager
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import RunUsage

    # The lightest legitimate path, from pydantic_ai/agent/__init__.py: the agent builds
    # `ToolManager(toolset, root_capability=..., ...)` and prepares it per step with
    # `for_run_step(run_context)`. A RunContext needs a model instance (it is never called
    # here), so TestModel stands in. No root capability is given, so the hook layer an Agent
    # run adds around every call is skipped: this flatters pydantic-ai, if anything.
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    manager = await ToolManager(FunctionToolset([add])).for_run_step(ctx)
    parts = [ToolCallPart(tool_name="add", args=RAW, tool_call_id=f"c{i}") for i in range(BATCH)]
    return lambda i: manager.handle_call(parts[i])


async def _openai_agents_caller() -> Caller:
    from agents import function_tool
    from agents.tool_context import ToolContext

    # The runner makes one ToolContext per call and awaits `on_invoke_tool(ctx, arguments)`.
    fn_tool = function_tool(add)
    ids = [f"c{i}" for i in range(BATCH)]
    return lambda i: fn_tool.on_invoke_tool(
        ToolContext(None, tool_name="add", tool_call_id=ids[i], tool_arguments=RAW), RAW
    )


async def _langchain_caller() -> Caller:
    from langchain_core.tools import tool as lc_tool

    lc_add = lc_tool(add)  # a StructuredTool
    return lambda i: lc_add.ainvoke(json.loads(RAW))


async def _fastmcp_caller() -> Caller:
    from fastmcp.tools import Tool

    fm_add = Tool.from_function(add)  # a FunctionTool
    return lambda i: fm_add.run(json.loads(RAW))


def _check(peer: str, result: Any) -> None:
    value = getattr(result, "structured_content", None) or {"result": result}  # fastmcp's ToolResult
    if value.get("result") != 3:
        raise AssertionError(f"{peer}: unexpected result {result!r}")


async def _asyncio_fanout(peer: str, make: Callable[[], Awaitable[Caller]], rounds: int) -> float:
    call = await make()
    for result in await asyncio.gather(*(call(i) for i in range(BATCH))):  # warm-up and check
        _check(peer, result)
    gc.collect()
    start = time.perf_counter()
    for _ in range(rounds):
        await asyncio.gather(*(call(i) for i in range(BATCH)))
    elapsed = time.perf_counter() - start
    return elapsed / (BATCH * rounds) * 1e6


W2_CALLERS: dict[str, Callable[[], Awaitable[Caller]]] = {
    "pydantic-ai": _pydantic_ai_caller,
    "openai-agents": _openai_agents_caller,
    "langchain-core": _langchain_caller,
    "fastmcp": _fastmcp_caller,
}


# -- W3: tool + schema builds --------------------------------------------------------------------
# A fresh function object per build (defining it costs well under a microsecond with string
# annotations), so a cache keyed by the function (fastmcp caches a TypeAdapter per callable)
# cannot turn the second build into a lookup: a real program builds each tool once. The peers
# read the description from pydantic's Field, ours from runtime.Description.


def _peer_fn() -> Callable[..., list[str]]:
    def search(
        query: Annotated[str, Field(description="words to look for")],
        limit: int = 10,
        mode: Literal["fast", "exact"] = "fast",
    ) -> list[str]:
        """Search the documentation."""
        return []

    return search


def _our_fn() -> Callable[..., list[str]]:
    def search(
        query: Annotated[str, Description("words to look for")],
        limit: int = 10,
        mode: Literal["fast", "exact"] = "fast",
    ) -> list[str]:
        """Search the documentation."""
        return []

    return search


def _our_dialect() -> str:
    try:
        ToolRegistry([tool(_our_fn())]).schemas("openai")
    except ValueError:
        return "jsonschema"
    return "openai"


def _runtime_builder() -> Callable[[], object]:
    dialect = _our_dialect()

    def build() -> object:
        t = tool(_our_fn())
        t.descriptor  # noqa: B018 - building it is the point
        return ToolRegistry([t]).schemas(dialect)

    return build


def _pydantic_ai_builder() -> Callable[[], object]:
    from pydantic_ai import Tool

    return lambda: Tool(_peer_fn()).tool_def  # the ToolDefinition: name, description, JSON schema


def _openai_agents_builder() -> Callable[[], object]:
    from agents import function_tool

    return lambda: function_tool(_peer_fn()).params_json_schema  # strict schema, the default


def _langchain_builder() -> Callable[[], object]:
    from langchain_core.tools import tool as lc_tool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return lambda: convert_to_openai_tool(lc_tool(_peer_fn()))  # args_schema -> OpenAI tool dict


def _fastmcp_builder() -> Callable[[], object]:
    from fastmcp.tools import Tool

    return lambda: Tool.from_function(_peer_fn()).parameters


W3_BUILDERS: dict[str, Callable[[], Callable[[], object]]] = {
    "pydantic-ai": _pydantic_ai_builder,
    "openai-agents": _openai_agents_builder,
    "langchain-core": _langchain_builder,
    "fastmcp": _fastmcp_builder,
}


# -- W1, W1s, W4 against the best peer (openai-agents) ------------------------------------------
# Sequential calls (one awaited after another) of an async and of a sync tool, and the bytes a
# parked call holds (10,000 calls waiting on one event), each through the peer's per-call path.


def add_sync(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _openai_agents_seq(n: int, sync: bool) -> float:
    from agents import function_tool
    from agents.tool_context import ToolContext

    fn_tool = function_tool(add_sync if sync else add)
    name = "add_sync" if sync else "add"

    def once() -> Awaitable[Any]:
        return fn_tool.on_invoke_tool(
            ToolContext(None, tool_name=name, tool_call_id="c1", tool_arguments=RAW), RAW
        )

    _check("openai-agents", await once())
    gc.collect()
    start = time.perf_counter()
    for _ in range(n):
        await once()
    return (time.perf_counter() - start) / n * 1e6


async def _openai_agents_parked(n: int) -> float:
    import tracemalloc

    from agents import function_tool
    from agents.tool_context import ToolContext

    release = asyncio.Event()

    async def hold(x: int) -> int:
        """Wait, then answer."""
        await release.wait()
        return x

    fn_tool = function_tool(hold)
    raw = '{"x": 1}'
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tasks = [
        asyncio.ensure_future(
            fn_tool.on_invoke_tool(
                ToolContext(None, tool_name="hold", tool_call_id=f"c{i}", tool_arguments=raw), raw
            )
        )
        for i in range(n)
    ]
    for _ in range(5):  # let every call reach its wait
        await asyncio.sleep(0)
    during = tracemalloc.get_traced_memory()[0]
    release.set()
    results = await asyncio.gather(*tasks)
    tracemalloc.stop()
    assert results == [1] * n
    return (during - before) / n


async def _runtime_parked_callers(n: int, in_caller: bool) -> float:
    """Issue 41's shape: `n` trio tasks, each `await rt.call(...)` of one `async def` tool that
    awaits a shared event; traced bytes (tracemalloc, one frame) once all are inside the tool,
    over `n`. `in_caller`: the tool says its code stops when cancelled, so each call runs in
    its caller's own task (no worker task)."""
    import tracemalloc

    import trio.testing

    from runtime import ToolCall, open_runtime, tool

    release = trio.Event()
    inside = 0

    async def hold(x: int) -> int:
        """Wait, then answer."""
        nonlocal inside
        inside += 1
        await release.wait()
        return x

    held = tool(in_caller=in_caller)(hold)
    async with open_runtime([held], tracing=False) as rt:
        gc.collect()
        tracemalloc.start(1)
        before = tracemalloc.get_traced_memory()[0]
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(rt.call, ToolCall(id=f"c{i}", name="hold", arguments='{"x": 1}'))
            while inside < n:
                await trio.sleep(0)
            await trio.testing.wait_all_tasks_blocked()
            during = tracemalloc.get_traced_memory()[0]
            release.set()
        tracemalloc.stop()
    return (during - before) / n


async def _openai_agents_gathered(n: int) -> float:
    """The same shape for openai-agents: the tool as a `FunctionTool`, `n` `on_invoke_tool`
    coroutines under `asyncio.gather`, traced bytes once all are inside the tool, over `n`."""
    import tracemalloc

    from agents import function_tool
    from agents.tool_context import ToolContext

    release = asyncio.Event()
    inside = 0

    async def hold(x: int) -> int:
        """Wait, then answer."""
        nonlocal inside
        inside += 1
        await release.wait()
        return x

    fn_tool = function_tool(hold)
    raw = '{"x": 1}'
    gc.collect()
    tracemalloc.start(1)
    before = tracemalloc.get_traced_memory()[0]
    gathered = asyncio.ensure_future(
        asyncio.gather(
            *(
                fn_tool.on_invoke_tool(
                    ToolContext(None, tool_name="hold", tool_call_id=f"c{i}", tool_arguments=raw), raw
                )
                for i in range(n)
            )
        )
    )
    while inside < n:
        await asyncio.sleep(0)
    during = tracemalloc.get_traced_memory()[0]
    release.set()
    assert await gathered == [1] * n
    tracemalloc.stop()
    return (during - before) / n


def best_peer_rows(report: Report, quick: bool) -> None:
    """W1, W1s, W2 (from the table above) and W4 as ratios to openai-agents, the best peer."""
    if importlib.util.find_spec("agents") is None:
        return
    n = 3_000 if quick else 20_000
    repeats = 3 if quick else 5
    pairs: list[tuple[str, Callable[[], float], Callable[[], float], float]] = [
        (
            "W1 sequential async call",
            lambda: trio.run(bench_runtime.runtime_seq, n),
            lambda: asyncio.run(_openai_agents_seq(n, False)),
            0.9,
        ),
        (
            "W1s sequential sync call",
            lambda: trio.run(bench_runtime.runtime_seq, n // 8, "add_thread"),
            lambda: asyncio.run(_openai_agents_seq(n // 8, True)),
            0.9,
        ),
    ]
    parked = 2_000 if quick else 10_000
    pairs.append(
        (
            f"W4 bytes per parked call ({parked:,})",
            lambda: trio.run(bench_runtime.parked_runtime, parked),
            lambda: asyncio.run(_openai_agents_parked(parked)),
            1.0,
        )
    )
    callers = 2_000 if quick else 10_000
    for label, in_caller in (("a worker task each", False), ("in_caller=True: the caller's own task", True)):
        pairs.append(
            (
                f"W4c bytes per parked call, {callers:,} trio callers of rt.call ({label})",
                lambda in_caller=in_caller: trio.run(_runtime_parked_callers, callers, in_caller),  # type: ignore[misc]
                lambda: asyncio.run(_openai_agents_gathered(callers)),
                1.0,
            )
        )
    for workload, ours, theirs, target in pairs:
        s, f = compare(ours, theirs, repeats)
        report.add(Row(f"{workload} vs peer", "runtime", "openai-agents", s, f, target=target))


# -- running -------------------------------------------------------------------------------------


def _interleaved(
    subjects: dict[str, Callable[[], float]], floor: Callable[[], float], repeats: int
) -> tuple[dict[str, float], float]:
    """Median per-op times; each repetition measures the floor and then every subject once."""
    times: dict[str, list[float]] = {name: [] for name in subjects}
    floors: list[float] = []
    for _ in range(repeats):
        floors.append(floor())
        for name, measure in subjects.items():
            times[name].append(measure())
    return {name: statistics.median(t) for name, t in times.items()}, statistics.median(floors)


def available_peers() -> list[str]:
    found = []
    for peer, (module, dist, *_) in PEERS.items():
        if importlib.util.find_spec(module) is None:
            print(f"skip {peer}: not installed (pip install -e '.[bench]')")
        else:
            found.append(peer)
            print(f"peer {peer}: {dist} {importlib.metadata.version(dist)}")
    return found


def _versus(ours: float, theirs: float, claimed: bool, several: float = 1.0) -> str:
    factor = theirs / ours
    text = f"runtime {factor:.1f}x faster" if factor >= 1 else f"runtime {1 / factor:.1f}x SLOWER"
    if not claimed:
        return f"{text} (no claim)"
    return f"{text}; claim {'holds' if factor > several else 'FAILS'}"


def main(quick: bool = False) -> Report:
    repeats = 3 if quick else 7
    rounds = 2 if quick else 10
    builds = 30 if quick else 200
    floor_n = 20_000 if quick else 100_000
    report = Report("peers")
    peers = available_peers()

    w2: dict[str, Callable[[], float]] = {
        "runtime": lambda: trio.run(bench_runtime.runtime_fanout, BATCH, rounds),
    }
    for peer in peers:
        w2[peer] = lambda peer=peer: asyncio.run(_asyncio_fanout(peer, W2_CALLERS[peer], rounds))
    times, floor = _interleaved(w2, lambda: per_op_sync(bench_runtime.floor_a_once, floor_n), repeats)
    ours = times["runtime"]
    for name, us in times.items():
        note = f"{us:.1f} us/call"
        if name != "runtime":
            note += "; " + _versus(ours, us, PEERS[name][2])
        report.add(Row(f"W2 1k concurrent: {name}", name, "floor_a", us, floor, note=note))
    if "openai-agents" in times:
        report.add(
            Row(
                "W2 1k concurrent vs peer",
                "runtime",
                "openai-agents",
                ours,
                times["openai-agents"],
                target=0.8,
            )
        )
    best_peer_rows(report, quick)

    w3: dict[str, Callable[[], float]] = {}
    for name, make in {"runtime": _runtime_builder, **{p: W3_BUILDERS[p] for p in peers}}.items():
        build = make()
        build()  # warm-up: imports, first-use caches
        w3[name] = lambda build=build: per_op_sync(build, builds)
    times, floor = _interleaved(w3, lambda: per_op_sync(bench_runtime.build_floor_once, builds), repeats)
    ours = times["runtime"]
    for name, us in times.items():
        note = f"{us:.0f} us/tool"
        if name == "runtime":
            note += f"; @tool + schemas({_our_dialect()!r})"
        else:
            note += "; " + _versus(ours, us, PEERS[name][3], SEVERAL)
        report.add(Row(f"W3 tool+schema build: {name}", name, "floor_a'", us, floor, note=note))
    return report


# -- curves for benchmarks/RESULTS.md: fan-out scaling and memory per in-flight call ---------


async def _openai_agents_fanout(batch: int, rounds: int) -> float:
    from agents import function_tool
    from agents.tool_context import ToolContext

    fn_tool = function_tool(add)
    contexts = [
        ToolContext(None, tool_name="add", tool_call_id=f"c{i}", tool_arguments=RAW) for i in range(batch)
    ]
    await asyncio.gather(*(fn_tool.on_invoke_tool(c, RAW) for c in contexts))
    gc.collect()
    start = time.perf_counter()
    for _ in range(rounds):
        contexts = [
            ToolContext(None, tool_name="add", tool_call_id=f"c{i}", tool_arguments=RAW) for i in range(batch)
        ]
        await asyncio.gather(*(fn_tool.on_invoke_tool(c, RAW) for c in contexts))
    return (time.perf_counter() - start) / (batch * rounds) * 1e6


def curves(quick: bool = False) -> dict[str, Any]:
    """Per-call time of a fan-out of 10..10,000 calls, and bytes per parked call at 1k and 10k."""
    import json as _json

    from ._harness import RESULTS

    sizes = [10, 100, 1000, 10_000]
    repeats = 1 if quick else 3
    has_peer = importlib.util.find_spec("agents") is not None
    fanout: dict[str, dict[int, float]] = {"runtime": {}, "openai-agents": {}}
    for size in sizes:
        rounds = max(1, 20_000 // size) if not quick else max(1, 2_000 // size)
        fanout["runtime"][size] = statistics.median(
            trio.run(bench_runtime.runtime_fanout, size, rounds) for _ in range(repeats)
        )
        if has_peer:
            fanout["openai-agents"][size] = statistics.median(
                asyncio.run(_openai_agents_fanout(size, rounds)) for _ in range(repeats)
            )
    memory: dict[str, dict[int, float]] = {"runtime": {}, "floor_b": {}, "openai-agents": {}}
    for n in [1000, 10_000]:
        memory["runtime"][n] = trio.run(bench_runtime.parked_runtime, n)
        memory["floor_b"][n] = trio.run(bench_runtime.parked_floor, n)
        if has_peer:
            memory["openai-agents"][n] = asyncio.run(_openai_agents_parked(n))
    data = {"fanout_us_per_call": fanout, "bytes_per_parked_call": memory}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "curves.json").write_text(_json.dumps(data, indent=2) + "\n")
    print("fan-out us/call:", {k: {s: round(v, 1) for s, v in d.items()} for k, d in fanout.items()})
    print("bytes per parked call:", {k: {s: round(v) for s, v in d.items()} for k, d in memory.items()})
    return data
