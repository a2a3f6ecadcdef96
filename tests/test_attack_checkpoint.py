"""Hostile tests of `ctx.checkpoint` and of a journal whose store fails partway through a verb
(issue 43, attack 5), from docs/how-to/detached-calls.md. Several runtimes on one `MemoryStore`
stand for several server processes on one shared store; virtual time (autojump_clock)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runtime import CallContext, Durable, ToolCall, ToolPending, ToolSuccess, open_runtime, tool
from runtime.stores import MemoryStore, StoreError


class Flaky:
    """A store in front of another: `cut()` makes every step fail (a process cut off from the
    store: its lease runs out); `lose_next_swap()` makes the next compare-and-set take effect and
    then raise, as a write whose answer is lost on the way back."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.down = False
        self.lose = False

    def cut(self) -> None:
        self.down = True

    def lose_next_swap(self) -> None:
        self.lose = True

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name == "aclose" or not callable(method):
            return method

        async def step(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise StoreError("the store is unreachable")
            result = await method(*args, **kwargs)
            if name == "swap" and self.lose:
                self.lose = False
                raise StoreError("the connection was lost before the answer came")
            return result

        return step


async def test_an_approval_whose_journal_write_loses_its_answer_runs_the_call_exactly_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    """detached-calls.md: "`handle.approve()` runs the call exactly once, whichever process
    approves it (a second approval ... is the status as it is)". The store takes the approval
    and the answer is lost (StoreError); the application approves again: the call still runs,
    once, and its result comes."""
    ran: list[int] = []

    # async: a sync tool's thread runs on real time, and the autojump clock ran past fail_after
    # while it worked (once, in the full suite)
    @tool(requires_approval=True)
    async def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        await trio.lowlevel.checkpoint()
        return f"paid {amount}"

    store = Flaky(MemoryStore())
    async with open_runtime([pay], store=store, tracing=False, durable=Durable(lease=6)) as rt:  # type: ignore[arg-type]
        pending = await rt.call(ToolCall(id="c1", name="pay", arguments={"amount": 5}), principal="p")
        assert isinstance(pending, ToolPending)
        handle = rt.detached(pending.detached_id, principal="p")
        store.lose_next_swap()
        with pytest.raises(StoreError):
            await handle.approve()
        await handle.approve()  # the retry: the status as it is
        with trio.fail_after(120):
            result = await handle.result()
        assert isinstance(result, ToolSuccess)
        assert result.content == "paid 5"
        await trio.sleep(60)
    assert ran == [5]


async def test_a_checkpointed_call_two_processes_recover_at_once_resumes_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    """detached-calls.md: a call that left a checkpoint "is run again even when its tool is not
    idempotent" by "the run that recovers the call". Its process is cut off from the store; two
    other processes sweep the journal at the same time: one of them resumes it, once."""
    shared = MemoryStore()
    resumed: list[tuple[str, Any]] = []

    def job_tool(node: str) -> Any:
        @tool
        async def job(ctx: CallContext) -> str:
            """Submit a job and wait for it."""
            where = ctx.resumed.get("job")
            if where is None:
                assert await ctx.checkpoint("job", {"id": "J-1"})
                await trio.sleep_forever()
            resumed.append((node, where))
            await trio.sleep(1)
            return f"{node} resumed {where['id']}"

        return job

    first = Flaky(shared)
    settings: dict[str, Any] = {"tracing": False}
    durable = Durable(lease=6, poll_interval=0.5)
    async with (
        open_runtime([job_tool("a")], store=first, durable=durable, **settings) as a,  # type: ignore[arg-type]
        open_runtime([job_tool("b")], store=shared, durable=durable, **settings) as b,
        open_runtime([job_tool("c")], store=shared, durable=durable, **settings) as c,
    ):
        handle = await a.detach(ToolCall(id="c1", name="job", arguments={}), principal="p")
        await trio.sleep(1)  # its tool has checkpointed and waits
        first.cut()  # a is gone for the others: its lease runs out
        # both look at it (then both sweep the journal, and both find its process gone)
        await b.detached(handle.id, principal="p").status()
        await c.detached(handle.id, principal="p").status()
        with trio.fail_after(120):
            result = await b.detached(handle.id, principal="p").result()
        await trio.sleep(30)
        assert isinstance(result, ToolSuccess), result
        assert len(resumed) == 1, resumed
        assert resumed[0][1] == {"id": "J-1"}
