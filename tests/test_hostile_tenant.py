"""One shared runtime, several tenants, one of them hostile (issue 42): what one principal does
never costs another its breaker, its replay journal or its cached answers."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import trio

from runtime import (
    CircuitBreaker,
    FailureKind,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    open_runtime,
    tool,
)

ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


# -- item 7: a breaker opens only when the server is down -----------------------------------------


@tool(timeout=2.0)
async def healthy(x: int) -> int:
    """Answers in 50 ms, well within its own 2 s."""
    ran["healthy"] += 1
    await trio.sleep(0.05)
    return x


@tool
async def untimed(x: int) -> int:
    """No timeout of its own; answers in 50 ms."""
    await trio.sleep(0.05)
    return x


async def test_a_callers_own_short_deadline_never_opens_the_breaker_for_everyone(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Mallory's 5 calls with timeout=0.01 used to open the breaker (her deadline counted as a
    transport timeout), and Bob was refused UNAVAILABLE "circuit open" by a healthy tool."""
    async with open_runtime([healthy, untimed], breaker=CircuitBreaker(failures=5), tracing=False) as rt:
        for i in range(5):
            for name in ("healthy", "untimed"):
                mine = await rt.call(call(f"m{i}", name, x=i), timeout=0.01, principal="mallory")
                assert isinstance(mine, ToolFailure)
                assert mine.kind is FailureKind.TIMEOUT
        for name in ("healthy", "untimed"):
            bobs = await rt.call(call("b", name, x=7), principal="bob")
            assert isinstance(bobs, ToolSuccess), bobs
            assert rt.statistics().tools[name].breaker == "closed"


@tool(timeout=0.1)
async def hangs(x: int) -> int:
    """Never answers within its own timeout."""
    await trio.sleep(10)
    return x


async def test_the_tools_own_timeout_still_opens_the_breaker(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([hangs], breaker=CircuitBreaker(failures=3), tracing=False) as rt:
        for i in range(3):  # its own 0.1 s, inside the caller's longer deadline
            result = await rt.call(call(str(i), "hangs", x=i), timeout=5)
            assert isinstance(result, ToolFailure)
            assert result.kind is FailureKind.TIMEOUT
        refused = await rt.call(call("x", "hangs", x=0))
        assert isinstance(refused, ToolFailure)
        assert "circuit open" in refused.message
