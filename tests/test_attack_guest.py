"""Hostile tests of the asyncio guest call path (`open_asyncio_runtime` -> `AsyncioDriver`).

Every call gets exactly one ToolResult (or the caller's own cancellation / RuntimeClosed),
no tool's exception reaches the caller, the policies' after-halves and the call's span end are
heard once per call on every exit, in_flight returns to 0, and nothing is left running.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import random
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.lowlevel
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import FailureKind, Policy, ToolCall, tool
from runtime.embed import open_asyncio_runtime
from runtime.exceptions import RuntimeClosed
from runtime.messages import ToolFailure, ToolResult, ToolSuccess
from runtime.tracing import Tracing


class FakeCancelled(BaseException):
    """Looks like trio.Cancelled to nobody in particular: a bare BaseException."""


RAISABLE: dict[str, Callable[[], BaseException]] = {
    "value": lambda: ValueError("boom"),
    "keyboard": KeyboardInterrupt,
    "asyncio_cancelled": asyncio.CancelledError,
    "system_exit": lambda: SystemExit(3),
    "generator_exit": GeneratorExit,
    "base": FakeCancelled,
    "stop_iteration": StopIteration,
    "stop_async_iteration": StopAsyncIteration,
}

released = threading.Event()


@tool
async def trio_sleep(seconds: float) -> str:
    """Sleep on trio."""
    await trio.sleep(seconds)
    return "slept"


@tool(loop="asyncio")
async def aio_sleep(seconds: float) -> str:
    """Sleep on asyncio."""
    await asyncio.sleep(seconds)
    return "slept"


@tool
def thread_wait(seconds: float) -> str:
    """Wait in a thread (released early by the test)."""
    released.wait(seconds)
    return "waited"


@tool(inline=True)
def inline_echo(x: Any) -> str:
    """Inline echo."""
    return f"{x!r}"[:50]


@tool
async def trio_raise(kind: str) -> str:
    """Raise on trio."""
    await trio.lowlevel.checkpoint()
    raise RAISABLE[kind]()


@tool(loop="asyncio")
async def aio_raise(kind: str) -> str:
    """Raise on asyncio."""
    await asyncio.sleep(0)
    raise RAISABLE[kind]()


@tool
def thread_raise(kind: str) -> str:
    """Raise in a thread."""
    raise RAISABLE[kind]()


@tool(inline=True)
def inline_raise(kind: str) -> str:
    """Raise inline."""
    raise RAISABLE[kind]()


@tool(max_concurrency=1, mailbox_size=1, on_full="wait")
async def narrow(seconds: float) -> str:
    """One at a time, one waiting."""
    await trio.sleep(seconds)
    return "narrow"


@tool(timeout=0.05)
async def own_timeout(seconds: float) -> str:
    """Has its own timeout."""
    await trio.sleep(seconds)
    return "late"


@tool
async def secret(x: int) -> int:
    """Hidden from a scoped view."""
    return x


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __str__(self) -> str:
        raise RuntimeError("no str")


WEIRD: dict[str, Callable[[], Any]] = {
    "object": Unprintable,
    "generator": lambda: (i for i in range(3)),
    "cycle": lambda: (lambda d: (d.__setitem__("d", d), d)[1])({}),
    "huge": lambda: "x" * 20_000_000,
    "nan": lambda: float("nan"),
    "bytes": lambda: b"\xff\xfe",
    "surrogate": lambda: "\udc80",
}


@tool(inline=True)
def weird_inline(kind: str) -> Any:
    """Returns something hard to encode."""
    return WEIRD[kind]()


@tool(loop="asyncio")
async def weird_aio(kind: str) -> Any:
    """Returns something hard to encode, from asyncio."""
    return WEIRD[kind]()


TOOLS = [
    weird_inline,
    weird_aio,
    trio_sleep,
    aio_sleep,
    thread_wait,
    inline_echo,
    trio_raise,
    aio_raise,
    thread_raise,
    inline_raise,
    narrow,
    own_timeout,
    secret,
]


class Audit(Policy):
    """Counts each half per call id."""

    def __init__(self) -> None:
        self.before: collections.Counter[str] = collections.Counter()
        self.after: collections.Counter[str] = collections.Counter()

    def intercept(self, request: Any) -> Any:
        self.before[request.id] += 1
        try:
            result = yield request
        finally:
            self.after[request.id] += 1
        return result


class Redact(Policy):
    def intercept(self, request: Any) -> Any:
        result = yield request.redact("seconds", "x", "kind")
        return result


class Answers(Policy):
    """Answers calls of inline_echo whose x is 'answer-me' without running the tool."""

    def applies(self, tool: Any) -> bool:
        return getattr(tool, "name", None) == "inline_echo"

    def intercept(self, request: Any) -> Any:
        if request.args is not None and getattr(request.args, "x", None) == "answer-me":
            return request.answer("answered")
        result = yield request
        return result


class Env:
    """An open runtime with an audit policy and an in-memory span exporter."""

    def __init__(self, rt: Any, audit: Audit, exporter: InMemorySpanExporter | None) -> None:
        self.rt = rt
        self.audit = audit
        self.exporter = exporter

    def spans_by_call(self) -> collections.Counter[str]:
        assert self.exporter is not None
        counts: collections.Counter[str] = collections.Counter()
        for span in self.exporter.get_finished_spans():
            cid = (span.attributes or {}).get("gen_ai.tool.call.id")
            if cid is not None:
                counts[str(cid)] += 1
        return counts


def trio_tasks() -> collections.Counter[str]:
    """Tasks in the guest run's tree by name (called on the loop's thread while the run lasts)."""
    names: collections.Counter[str] = collections.Counter()

    def walk(task: trio.lowlevel.Task) -> None:
        names[task.name] += 1
        for n in task.child_nurseries:
            for t in n.child_tasks:
                walk(t)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    walk(root)
    return names


WARM_UP = [
    ToolCall(id="w1", name="trio_sleep", arguments={"seconds": 0}),
    ToolCall(id="w2", name="aio_sleep", arguments={"seconds": 0}),
    ToolCall(id="w3", name="thread_wait", arguments={"seconds": 0}),
    ToolCall(id="w4", name="inline_echo", arguments={"x": 0}),
    ToolCall(id="w5", name="trio_raise", arguments={"kind": "value"}),
    ToolCall(id="w6", name="aio_raise", arguments={"kind": "value"}),
    ToolCall(id="w7", name="thread_raise", arguments={"kind": "value"}),
    ToolCall(id="w8", name="inline_raise", arguments={"kind": "value"}),
    ToolCall(id="w9", name="narrow", arguments={"seconds": 0}),
    ToolCall(id="w10", name="own_timeout", arguments={"seconds": 0}),
    ToolCall(id="w11", name="secret", arguments={"x": 0}),
    ToolCall(id="w12", name="weird_inline", arguments={"kind": "nan"}),
    ToolCall(id="w13", name="weird_aio", arguments={"kind": "nan"}),
]


async def settle(env: Env, seconds: float = 3.0) -> None:
    """Let abandoned work end (a thread released, a cancelled task's unwinding)."""
    released.set()
    for _ in range(int(seconds / 0.01)):
        if env.rt.statistics().in_flight == 0:
            break
        await asyncio.sleep(0.01)
    for _ in range(20):
        await asyncio.sleep(0)


def run(
    body: Callable[[Env], Awaitable[None]],
    *,
    tracing: bool = True,
    policies: bool = True,
    extra_policies: tuple[Policy, ...] = (),
) -> None:
    """Open a guest runtime on a fresh loop, run `body`, then check the shared promises."""
    released.clear()

    async def main() -> None:
        base = asyncio.all_tasks()
        exporter = InMemorySpanExporter() if tracing else None
        provider = None
        if exporter is not None:
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        audit = Audit()
        chain: list[Policy] = [audit, *extra_policies] if policies else list(extra_policies)
        async with open_asyncio_runtime(
            TOOLS,
            policies=chain,
            tracing=Tracing(tracer_provider=provider) if provider is not None else False,
            shutdown_timeout=1.0,
        ) as rt:
            env = Env(rt, audit, exporter)
            await rt.call_many(WARM_UP)  # every tool's actor started: those tasks stay
            for _ in range(20):
                await asyncio.sleep(0)
            tasks_before = trio_tasks()
            await body(env)
            await settle(env)
            assert rt.statistics().in_flight == 0, f"in_flight stays: {rt.statistics()}"
            # policies' after-halves: once per before-half, every call
            if policies:
                diff = {
                    k: (audit.before[k], audit.after[k])
                    for k in audit.before | audit.after
                    if audit.before[k] != audit.after[k]
                }
                assert not diff, f"after-half not heard once per before-half (before, after): {diff}"
            if exporter is not None:
                spans = env.spans_by_call()
                if policies:
                    # a call the policies never began (a policy's KeyboardInterrupt stopped the
                    # batch's starting) still has its span ended, once
                    bad = {
                        k: (audit.before[k], spans[k])
                        for k in audit.before | spans
                        if audit.before[k] != spans[k] and not (audit.before[k] == 0 and spans[k] == 1)
                    }
                    assert not bad, f"span not ended once per call (calls, spans): {bad}"
                else:
                    assert all(v >= 1 for v in spans.values())
            left = [t for t in asyncio.all_tasks() if t not in base]
            assert not left, f"asyncio tasks left behind: {left}"
            # idle workers of a trio tool stay, by design (a pool): not counted
            extra = collections.Counter(
                {k: v for k, v in (trio_tasks() - tasks_before).items() if not k.endswith(" worker")}
            )
            assert not extra, f"trio tasks left behind: {extra}"
        # closed: a call now raises RuntimeClosed at once
        with pytest.raises(RuntimeClosed):
            await rt.call(ToolCall(id="after", name="inline_echo", arguments={"x": 1}))

    asyncio.run(asyncio.wait_for(main(), 30))


def call(name: str, args: Any, cid: str | None = None) -> ToolCall:
    return ToolCall(id=cid or f"{name}-{random.randrange(10**9)}", name=name, arguments=args)


def one_result(result: Any, c: ToolCall) -> ToolResult:
    assert isinstance(result, ToolSuccess | ToolFailure), f"not a ToolResult: {result!r}"
    if type(c.id) is str:
        assert result.call_id == c.id
    return result


# -- bad input -------------------------------------------------------------------------------


def deep(n: int) -> Any:
    v: Any = 1
    for _ in range(n):
        v = [v]
    return v


BAD_CALLS = [
    ToolCall(id="wrongtype", name="trio_sleep", arguments={"seconds": "soon"}),
    ToolCall(id="deep", name="inline_echo", arguments={"x": deep(1000)}),
    ToolCall(id="deeptext", name="inline_echo", arguments='{"x":' + "[" * 1000 + "]" * 1000 + "}"),
    ToolCall(id="surrogate", name="inline_echo", arguments={"x": "\ud800"}),
    ToolCall(id="surrogatetext", name="inline_echo", arguments='{"x": "\\ud800"}'),
    ToolCall(id="surrogatename", name="\udfff", arguments={}),
    ToolCall(id="hugename", name="n" * 1_000_000, arguments={}),
    ToolCall(id="unknown", name="no_such_tool", arguments={}),
    ToolCall(id="notjson", name="inline_echo", arguments="{not json"),
    ToolCall(id="list", name="inline_echo", arguments=[1, 2]),  # type: ignore[arg-type]
    ToolCall(id="extra", name="inline_echo", arguments={"x": 1, "y": 2}),
    ToolCall(id="missing", name="inline_echo", arguments={}),
    ToolCall(id=None, name="inline_echo", arguments={"x": 1}),  # type: ignore[arg-type]
    ToolCall(id="intname", name=42, arguments={}),  # type: ignore[arg-type]
    ToolCall(id="huge", name="inline_echo", arguments={"x": "a" * 5_000_000}),
    ToolCall(id="nan", name="trio_sleep", arguments={"seconds": float("nan")}),
    ToolCall(id="neg", name="trio_sleep", arguments={"seconds": -1e308}),
]


def test_bad_input_each_gets_one_result_by_call_call_many_and_as_completed() -> None:
    async def body(env: Env) -> None:
        rt = env.rt
        for c in BAD_CALLS:
            one_result(await rt.call(c), c)
        results = await rt.call_many(BAD_CALLS)
        assert len(results) == len(BAD_CALLS)
        for r, c in zip(results, BAD_CALLS, strict=True):
            if c.id is not None:
                one_result(r, c)
        seen = []
        async with contextlib.aclosing(rt.as_completed(BAD_CALLS)) as it:
            async for r in it:
                assert isinstance(r, ToolSuccess | ToolFailure)
                seen.append(r)
        assert len(seen) == len(BAD_CALLS)
        unknown = await rt.call(ToolCall(id="u", name="no_such_tool", arguments={}))
        assert isinstance(unknown, ToolFailure)
        assert unknown.kind is FailureKind.UNKNOWN_TOOL

    run(body)


def test_bad_arguments_through_invoke_and_stream() -> None:
    async def body(env: Env) -> None:
        rt = env.rt
        r = await rt.invoke("inline_echo", x="\ud800")
        assert isinstance(r, ToolSuccess | ToolFailure)
        r = await rt.invoke("trio_sleep", seconds="soon")
        assert isinstance(r, ToolFailure)
        assert r.kind is FailureKind.INVALID_ARGUMENTS
        r = await rt.invoke("inline_echo", x=object())
        assert isinstance(r, ToolFailure)
        assert r.kind is FailureKind.INVALID_ARGUMENTS
        r = await rt.invoke("inline_echo", x=deep(1000), _timeout=-1)
        assert isinstance(r, ToolSuccess | ToolFailure)
        items = []
        async with contextlib.aclosing(rt.stream(call("inline_echo", {"x": deep(1000)}))) as it:
            async for item in it:
                items.append(item)
        assert isinstance(items[-1], ToolSuccess | ToolFailure)

    run(body)


def test_scoped_view_hides_tool_as_unknown() -> None:
    async def body(env: Env) -> None:
        view = env.rt.scoped(only=["inline_echo"])
        c = call("secret", {"x": 1})
        r = one_result(await view.call(c), c)
        assert isinstance(r, ToolFailure)
        assert r.kind is FailureKind.UNKNOWN_TOOL
        rs = await view.call_many([c, call("inline_echo", {"x": 1})])
        assert isinstance(rs[0], ToolFailure)
        assert rs[0].kind is FailureKind.UNKNOWN_TOOL
        assert isinstance(rs[1], ToolSuccess)
        assert "secret" not in json.dumps([d.name for d in view.descriptors()])

    run(body)


# -- tools raising anything -----------------------------------------------------------------


IN_PROCESS_KINDS = sorted(RAISABLE)
LOOP_ENDING = {"keyboard", "system_exit"}  # asyncio's Task re-raises these out of the loop


@pytest.mark.parametrize("where", ["trio_raise", "aio_raise", "thread_raise", "inline_raise"])
@pytest.mark.parametrize("kind", IN_PROCESS_KINDS)
def test_tool_raising_anything_is_a_failure_not_the_callers(where: str, kind: str) -> None:
    if where == "aio_raise" and kind in LOOP_ENDING:
        pytest.skip("would end this process's loop: see test_asyncio_tool_keyboard_interrupt_*")

    async def body(env: Env) -> None:
        c = call(where, {"kind": kind})
        r = one_result(await env.rt.call(c), c)
        assert isinstance(r, ToolFailure), r
        cs = [call(where, {"kind": kind}) for _ in range(3)]
        rs = await env.rt.call_many(cs)
        for r, c in zip(rs, cs, strict=True):
            assert isinstance(one_result(r, c), ToolFailure)

    run(body)


# -- the caller cancelled ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["trio_sleep", "aio_sleep", "thread_wait", "narrow"])
@pytest.mark.parametrize("when", [0, 1, 3])  # loop turns before the cancel: before it runs, while
def test_caller_cancelled_gets_cancelled_error_only(name: str, when: int) -> None:
    async def body(env: Env) -> None:
        c = call(name, {"seconds": 5})
        task = asyncio.ensure_future(env.rt.call(c))
        for _ in range(when):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        batch = asyncio.ensure_future(env.rt.call_many([call(name, {"seconds": 5}) for _ in range(4)]))  # noqa: RUF006
        for _ in range(when):
            await asyncio.sleep(0)
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch

    run(body)


@pytest.mark.parametrize("name", ["trio_sleep", "aio_sleep", "thread_wait", "inline_echo"])
def test_asyncio_timeout_around_call(name: str) -> None:
    async def body(env: Env) -> None:
        args = {"x": 1} if name == "inline_echo" else {"seconds": 5}
        for _ in range(3):
            try:
                async with asyncio.timeout(0.02):
                    r = await env.rt.call(call(name, args))
                assert name == "inline_echo"
                assert isinstance(r, ToolSuccess)
            except TimeoutError:
                assert name != "inline_echo"
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.02):
                    await env.rt.call_many([call(name, args) for _ in range(5)])

    run(body)


@pytest.mark.parametrize("name", ["trio_sleep", "aio_sleep", "thread_wait", "narrow", "own_timeout"])
def test_timeout_setting_answers_timeout(name: str) -> None:
    async def body(env: Env) -> None:
        c = call(name, {"seconds": 5})
        r = one_result(await env.rt.call(c, timeout=0.05), c)
        assert isinstance(r, ToolFailure), r
        assert r.kind is FailureKind.TIMEOUT, r
        cs = [call(name, {"seconds": 5}) for _ in range(4)]
        rs = await env.rt.call_many(cs, timeout=0.05)
        for r, c in zip(rs, cs, strict=True):
            r = one_result(r, c)
            assert isinstance(r, ToolFailure), r
            assert r.kind is FailureKind.TIMEOUT, r

    run(body)


def test_zero_and_negative_timeout() -> None:
    async def body(env: Env) -> None:
        for t in (0, -1, 1e-9):
            for name, args in (("trio_sleep", {"seconds": 1}), ("inline_echo", {"x": 1})):
                c = call(name, args)
                one_result(await env.rt.call(c, timeout=t), c)
                cs = [call(name, args) for _ in range(3)]
                for r, c in zip(await env.rt.call_many(cs, timeout=t), cs, strict=True):
                    one_result(r, c)

    run(body)


def test_full_mailbox_backpressure_with_deadline() -> None:
    async def body(env: Env) -> None:
        cs = [call("narrow", {"seconds": 0.3}) for _ in range(6)]
        rs = await env.rt.call_many(cs, timeout=0.1)
        kinds = [r.kind for r in rs if isinstance(r, ToolFailure)]
        for r, c in zip(rs, cs, strict=True):
            one_result(r, c)
        assert kinds, kinds
        assert all(k is FailureKind.TIMEOUT for k in kinds), kinds
        # many single callers against a full mailbox, with a deadline, some cancelled meanwhile
        tasks = [
            asyncio.ensure_future(env.rt.call(call("narrow", {"seconds": 0.05}), timeout=0.2))
            for _ in range(20)
        ]
        await asyncio.sleep(0.01)
        for t in tasks[::3]:
            t.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        for d in done:
            if isinstance(d, BaseException):
                assert isinstance(d, asyncio.CancelledError), d
            else:
                assert isinstance(d, ToolSuccess | ToolFailure)

    run(body)


def test_full_mailbox_waiting_caller_cancelled() -> None:
    async def body(env: Env) -> None:
        running = asyncio.ensure_future(env.rt.call(call("narrow", {"seconds": 0.3})))
        queued = asyncio.ensure_future(env.rt.call(call("narrow", {"seconds": 0.3})))
        await asyncio.sleep(0.02)
        waiting = asyncio.ensure_future(  # noqa: RUF006
            env.rt.call_many([call("narrow", {"seconds": 0.3}) for _ in range(3)])
        )
        await asyncio.sleep(0.02)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert isinstance(await running, ToolSuccess)
        assert isinstance(await queued, ToolSuccess)

    run(body)


# -- as_completed stopped early -------------------------------------------------------------


@pytest.mark.parametrize("name", ["trio_sleep", "aio_sleep", "thread_wait"])
def test_as_completed_closed_early(name: str) -> None:
    async def body(env: Env) -> None:
        cs = [call("inline_echo", {"x": 1}), *[call(name, {"seconds": 5}) for _ in range(5)]]
        got = []
        async with contextlib.aclosing(env.rt.as_completed(cs)) as it:
            async for r in it:
                got.append(r)
                break
        assert len(got) == 1
        assert isinstance(got[0], ToolSuccess)
        # closed before reading anything
        it2 = env.rt.as_completed([call(name, {"seconds": 5}) for _ in range(3)])
        await it2.aclose()
        # reading cancelled by asyncio.timeout mid-iteration
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                async with contextlib.aclosing(
                    env.rt.as_completed([call(name, {"seconds": 5}) for _ in range(3)])
                ) as it3:
                    async for _ in it3:
                        pass

    run(body)


def test_stream_closed_early_and_cancelled() -> None:
    async def body(env: Env) -> None:
        s = env.rt.stream(call("trio_sleep", {"seconds": 5}))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                async with contextlib.aclosing(s) as it:
                    async for _ in it:
                        pass
        s2 = env.rt.stream(call("trio_sleep", {"seconds": 5}))
        await s2.aclose()

    run(body)


# -- policies -------------------------------------------------------------------------------


def test_redaction_and_answering_policy() -> None:
    async def body(env: Env) -> None:
        c = call("inline_echo", {"x": "answer-me"})
        r = one_result(await env.rt.call(c), c)
        assert isinstance(r, ToolSuccess), r
        assert r.value == "answered", r
        cs = [
            call("inline_echo", {"x": "answer-me"}),
            call("trio_raise", {"kind": "keyboard"}),
            call("nope", {}),
        ]
        for r, c in zip(await env.rt.call_many(cs), cs, strict=True):
            one_result(r, c)
        task = asyncio.ensure_future(env.rt.call(call("trio_sleep", {"seconds": 5})))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(body, extra_policies=(Redact(), Answers()))


# -- closed runtime, other loop, other thread ------------------------------------------------


def test_closed_runtime_and_foreign_loop_and_thread() -> None:
    holder: dict[str, Any] = {}

    async def main() -> None:
        base = asyncio.all_tasks()
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            holder["rt"] = rt
            # from another thread: raises at once, never a ToolResult or hang
            errors: list[BaseException] = []

            def other() -> None:
                try:
                    asyncio.run(rt.call(call("inline_echo", {"x": 1})))
                except BaseException as exc:
                    errors.append(exc)

            th = threading.Thread(target=other)
            th.start()
            await asyncio.to_thread(th.join)
            assert len(errors) == 1, errors
            assert isinstance(errors[0], RuntimeError), errors

            # call_many / as_completed / stream from another thread's loop: RuntimeError too
            def other_many() -> None:
                try:
                    asyncio.run(rt.call_many([call("inline_echo", {"x": 1})]))
                except BaseException as exc:
                    errors.append(exc)
                try:
                    rt.stream(call("inline_echo", {"x": 1}))
                except BaseException as exc:
                    errors.append(exc)

            th = threading.Thread(target=other_many)
            th.start()
            await asyncio.to_thread(th.join)
            assert len(errors) == 3, errors
            assert all(isinstance(e, RuntimeError) for e in errors), errors
            # a call in flight while the runtime closes: its result, or RuntimeClosed
            pending = asyncio.ensure_future(rt.call(call("trio_sleep", {"seconds": 30})))
            pending_many = asyncio.ensure_future(rt.call_many([call("trio_sleep", {"seconds": 30})] * 3))
            pending_aio = asyncio.ensure_future(rt.call(call("aio_sleep", {"seconds": 30})))
            holder["pending"] = (pending, pending_many, pending_aio)
            await asyncio.sleep(0.01)
        for p in holder["pending"]:
            try:
                r = await p
            except RuntimeClosed:
                continue
            rs = r if isinstance(r, list) else [r]
            for one in rs:
                assert isinstance(one, ToolFailure), one
        with pytest.raises(RuntimeClosed):
            await rt.call(call("inline_echo", {"x": 1}))
        with pytest.raises(RuntimeClosed):
            await rt.call_many([call("inline_echo", {"x": 1})])
        with pytest.raises(RuntimeClosed):
            rt.stream(call("inline_echo", {"x": 1}))
        with pytest.raises(RuntimeClosed):
            async for _ in rt.as_completed([call("inline_echo", {"x": 1})]):
                pass
        left = [t for t in asyncio.all_tasks() if t not in base]
        assert not left, left

    asyncio.run(asyncio.wait_for(main(), 30))


def test_call_from_a_second_loop_in_the_same_thread_raises() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            coro_holder: list[Any] = []

            def in_new_loop() -> Any:
                loop = asyncio.new_event_loop()
                try:
                    return loop.run_until_complete(rt.call(call("inline_echo", {"x": 1})))
                except BaseException as exc:
                    coro_holder.append(exc)
                    return None
                finally:
                    loop.close()

            await asyncio.to_thread(in_new_loop)
            assert coro_holder, coro_holder
            assert isinstance(coro_holder[0], RuntimeError), coro_holder

    asyncio.run(asyncio.wait_for(main(), 30))


# -- many callers cancelled at random ------------------------------------------------------------


def test_thousand_callers_cancelled_at_random() -> None:
    names = ["trio_sleep", "aio_sleep", "inline_echo", "own_timeout", "trio_raise", "thread_wait"]

    async def body(env: Env) -> None:
        rng = random.Random(7)
        released.set()  # threads do not hold the test up
        tasks = []
        for i in range(1000):
            name = rng.choice(names)
            args: Any = {"x": i} if name == "inline_echo" else {"seconds": rng.choice([0, 0.001, 0.05])}
            if name == "trio_raise":
                args = {"kind": rng.choice(sorted(RAISABLE))}
            c = call(name, args, cid=f"c{i}")
            how = rng.random()
            if how < 0.6:
                coro = env.rt.call(c, timeout=rng.choice([None, 0.01, 0.2]))
            elif how < 0.9:
                coro = env.rt.call_many([c, call("inline_echo", {"x": 0}, cid=f"e{i}")])
            else:
                coro = env.rt.call(c)
            tasks.append((c, asyncio.ensure_future(coro)))
        for _ in range(50):
            await asyncio.sleep(rng.choice([0, 0, 0.001]))
            for _c, t in rng.sample(tasks, 15):
                t.cancel()
        outs = await asyncio.gather(*(t for _, t in tasks), return_exceptions=True)
        for (c, _t), out in zip(tasks, outs, strict=True):
            if isinstance(out, BaseException):
                assert isinstance(out, asyncio.CancelledError), (c, out)
            elif isinstance(out, list):
                one_result(out[0], c)
            else:
                one_result(out, c)

    run(body)


def test_thousand_callers_no_policies_no_tracing() -> None:
    """The plain path (no flow to drive)."""

    async def body(env: Env) -> None:
        rng = random.Random(11)
        released.set()
        tasks = [
            asyncio.ensure_future(
                env.rt.call(
                    call(rng.choice(["trio_sleep", "aio_sleep", "inline_echo"]), {"seconds": 0.01, "x": 1})
                )
            )
            for _ in range(1000)
        ]
        await asyncio.sleep(0)
        for t in rng.sample(tasks, 400):
            t.cancel()
        outs = await asyncio.gather(*tasks, return_exceptions=True)
        for out in outs:
            assert isinstance(out, ToolSuccess | ToolFailure | asyncio.CancelledError), out

    run(body, tracing=False, policies=False)


PROBE = """
import asyncio, sys
from runtime import ToolCall, tool
from runtime.embed import open_asyncio_runtime
from runtime.messages import ToolFailure

@tool(loop=sys.argv[2])
async def aio_raise(kind: str) -> str:
    await asyncio.sleep(0) if sys.argv[2] == "asyncio" else None
    raise {"keyboard": KeyboardInterrupt, "system_exit": SystemExit}[kind]()

async def main():
    async with open_asyncio_runtime([aio_raise], tracing=False, shutdown_timeout=1.0) as rt:
        try:
            result = await rt.call(ToolCall(id="k", name="aio_raise", arguments={"kind": sys.argv[1]}))
        except BaseException as exc:
            print("CALLER GOT", type(exc).__name__, flush=True)
            raise
        print("RESULT", type(result).__name__, getattr(result, "kind", None), flush=True)

try:
    asyncio.run(asyncio.wait_for(main(), 20))
except BaseException as exc:
    print("LOOP ENDED BY", type(exc).__name__, flush=True)
    sys.exit(7)
"""


@pytest.mark.parametrize("loop", ["asyncio", "any"])
@pytest.mark.parametrize("kind", sorted(LOOP_ENDING))
def test_asyncio_tool_keyboard_interrupt_is_a_failure_not_the_loops(kind: str, loop: str) -> None:
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", PROBE, kind, loop],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    out = done.stdout
    why = (
        f"no exception from a tool reaches the caller: the tool's {kind} ended the asyncio loop "
        f"(rc={done.returncode}) stdout={out!r} stderr tail={done.stderr[-600:]!r}"
    )
    assert "RESULT ToolFailure" in out, why
    assert done.returncode == 0, why


def test_room_waiter_cancelled_after_its_wake_up_passes_the_room_on() -> None:
    async def body(env: Env) -> None:
        rt = env.rt
        running = asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0.02})))
        queued = asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0})))
        await asyncio.sleep(0.005)
        waiting = [asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0}))) for _ in range(3)]
        await asyncio.sleep(0.001)
        assert rt.statistics().tools["narrow"].queued == 1
        # the running call ends: the queued one starts and the first waiter is woken for the
        # room; it is cancelled in the same turn, before its task runs
        while rt.statistics().tools["narrow"].queued != 0:  # noqa: ASYNC110 - polls the runtime's statistics
            await asyncio.sleep(0)
        waiting[0].cancel()
        others = [running, queued, *waiting[1:]]
        _done, pending = await asyncio.wait(others, timeout=5)  # a hang detector, not a timing
        hung = len(pending)
        for p in pending:
            p.cancel()
        await asyncio.wait(others)
        assert hung == 0, (
            f"every call gets exactly one ToolResult: {hung} waiting caller(s) never answered, "
            f"the tool idle: {rt.statistics().tools['narrow']}"
        )

    run(body)


class Raises(Policy):
    """Raises in its before-half or its after-half, as the call's arguments say."""

    def applies(self, tool: Any) -> bool:
        return getattr(tool, "name", None) in {"trio_sleep", "aio_sleep", "inline_echo"}

    def intercept(self, request: Any) -> Any:
        where = str(request.arguments)
        if "before-kb" in where:
            raise KeyboardInterrupt
        if "before" in where:
            raise ValueError("before")
        result = yield request
        if "after-kb" in where:
            raise KeyboardInterrupt
        if "after" in where:
            raise RuntimeError("after")
        return result


@pytest.mark.parametrize("where", ["before", "after"])
def test_policy_raising_is_the_calls_error(where: str) -> None:
    async def body(env: Env) -> None:
        c = call("inline_echo", {"x": where})
        r = one_result(await env.rt.call(c), c)
        assert isinstance(r, ToolFailure), r
        assert r.kind is FailureKind.ERROR, r
        cs = [call("inline_echo", {"x": where}), call("inline_echo", {"x": "fine"})]
        rs = await env.rt.call_many(cs)
        assert isinstance(rs[0], ToolFailure), rs
        assert isinstance(rs[1], ToolSuccess), rs
        got = [r async for r in env.rt.as_completed(cs)]
        assert len(got) == 2

    run(body, extra_policies=(Raises(),))


@pytest.mark.parametrize("name", ["inline_echo", "trio_sleep", "aio_sleep"])
@pytest.mark.parametrize("where", ["before-kb", "after-kb"])
def test_policy_keyboard_interrupt_is_the_callers_and_every_call_still_ends_once(
    where: str, name: str
) -> None:
    """A KeyboardInterrupt in a policy's code is not a tool's: it reaches the caller (policies
    catch Exception); the batch's other calls still end, each heard once."""

    async def body(env: Env) -> None:
        args = {"x": where} if name == "inline_echo" else {"seconds": 0, "x": where}
        bad = (
            call(name, args)
            if name == "inline_echo"
            else ToolCall(id=f"kb-{name}", name=name, arguments={"seconds": 0.0})
        )
        if (
            name != "inline_echo"
        ):  # the policy reads the arguments' text: carry the marker in a metadata-free way
            bad = call("inline_echo", {"x": where})
        for make in (
            lambda: env.rt.call(bad),
            lambda: env.rt.call_many(
                [
                    call("inline_echo", {"x": "fine"}),
                    bad,
                    call(name, {"seconds": 0.01, "x": 1} if name != "inline_echo" else {"x": 2}),
                ]
            ),
        ):
            with contextlib.suppress(KeyboardInterrupt):
                await make()

    run(body, extra_policies=(Raises(),))


def test_policy_answers_and_caller_cancelled_meanwhile() -> None:
    async def body(env: Env) -> None:
        for turns in range(4):
            t = asyncio.ensure_future(
                env.rt.call_many(
                    [call("inline_echo", {"x": "answer-me"}), call("trio_sleep", {"seconds": 5})]
                )
            )
            for _ in range(turns):
                await asyncio.sleep(0)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t

    run(body, extra_policies=(Answers(), Redact()))


@pytest.mark.parametrize("name", ["weird_inline", "weird_aio"])
def test_unencodable_results_are_one_result(name: str) -> None:
    async def body(env: Env) -> None:
        cs = [call(name, {"kind": k}) for k in sorted(WEIRD)]
        for c in cs:
            one_result(await env.rt.call(c), c)
        for r, c in zip(await env.rt.call_many(cs), cs, strict=True):
            one_result(r, c)

    run(body)


def test_empty_and_large_batches() -> None:
    async def body(env: Env) -> None:
        assert await env.rt.call_many([]) == []
        assert [r async for r in env.rt.as_completed([])] == []
        cs = [call("inline_echo", {"x": i}) for i in range(5000)]
        rs = await env.rt.call_many(cs)
        assert all(isinstance(r, ToolSuccess) for r in rs)
        # a large batch cancelled part way through its admission
        t = asyncio.ensure_future(env.rt.call_many([call("trio_sleep", {"seconds": 5}) for _ in range(3000)]))  # noqa: RUF006
        for _ in range(3):
            await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    run(body)


def test_close_while_callers_wait_for_room() -> None:
    async def main() -> None:
        base = asyncio.all_tasks()
        async with open_asyncio_runtime(TOOLS, tracing=False, shutdown_timeout=0.5) as rt:
            tasks = [asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0.2}))) for _ in range(6)]
            batch = asyncio.ensure_future(rt.call_many([call("narrow", {"seconds": 0.2}) for _ in range(4)]))  # noqa: RUF006
            it = rt.as_completed([call("narrow", {"seconds": 0.2}) for _ in range(3)])
            reader = asyncio.ensure_future(_drain(it))
            await asyncio.sleep(0.05)
        outs = await asyncio.gather(*tasks, batch, reader, return_exceptions=True)
        for out in outs:
            if isinstance(out, BaseException):
                assert isinstance(out, RuntimeClosed), out
            else:
                for r in out if isinstance(out, list) else [out]:
                    assert isinstance(r, ToolSuccess | ToolFailure), r
        left = [t for t in asyncio.all_tasks() if t not in base]
        assert not left, left

    asyncio.run(asyncio.wait_for(main(), 30))


async def _drain(it: Any) -> list[Any]:
    async with contextlib.aclosing(it) as results:
        return [r async for r in results]


def test_room_waiting_batch_cancelled_after_its_wake_up_passes_the_room_on() -> None:
    async def body(env: Env) -> None:
        rt = env.rt
        running = asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0.02})))
        queued = asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0})))
        await asyncio.sleep(0.005)
        first = asyncio.ensure_future(rt.call_many([call("narrow", {"seconds": 0})]))
        await asyncio.sleep(0)
        others = [asyncio.ensure_future(rt.call_many([call("narrow", {"seconds": 0})])) for _ in range(2)]
        await asyncio.sleep(0.001)
        while rt.statistics().tools["narrow"].queued != 0:  # noqa: ASYNC110 - polls the runtime's statistics
            await asyncio.sleep(0)
        first.cancel()
        _done, pending = await asyncio.wait([running, queued, *others], timeout=5)  # a hang detector
        hung = len(pending)
        for p in pending:
            p.cancel()
        await asyncio.wait([running, queued, *others])
        assert hung == 0, f"every call gets exactly one ToolResult: {hung} waiting batch(es) never answered"

    run(body)


class Suspends(Policy):
    """A policy whose flow awaits (its calls go through trio tasks: `_pumped`)."""

    suspends = True

    def intercept(self, request: Any) -> Any:
        yield trio.sleep(0.001)  # noqa: ASYNC105 - the engine awaits what a policy yields
        result = yield request
        yield trio.lowlevel.checkpoint()  # noqa: ASYNC105 - the engine awaits it
        return result


@pytest.mark.parametrize("seed", [1, 2])
def test_suspending_policy_path_callers_cancelled_at_random(seed: int) -> None:
    names = [
        "trio_sleep",
        "aio_sleep",
        "inline_echo",
        "trio_raise",
        "thread_wait",
        "own_timeout",
    ]  # no narrow: see below

    async def body(env: Env) -> None:
        rng = random.Random(seed)
        released.set()
        tasks = []
        for i in range(300):
            name = rng.choice(names)
            args: Any = {"x": i} if name == "inline_echo" else {"seconds": rng.choice([0, 0.001, 0.03])}
            if name == "trio_raise":
                args = {"kind": rng.choice(sorted(RAISABLE))}
            c = call(name, args, cid=f"s{i}")
            how = rng.random()
            if how < 0.4:
                coro: Any = env.rt.call(c, timeout=rng.choice([None, 0.01, 0.2]))
            elif how < 0.7:
                coro = env.rt.call_many([c, call("inline_echo", {"x": 0}, cid=f"se{i}")])
            elif how < 0.85:
                coro = _drain(env.rt.as_completed([c, call("trio_sleep", {"seconds": 0.01}, cid=f"sa{i}")]))
            else:
                coro = _drain(env.rt.stream(c))
            tasks.append((c, asyncio.ensure_future(coro)))
        for _ in range(20):
            await asyncio.sleep(rng.choice([0, 0.001]))
            for _c, t in rng.sample(tasks, 10):
                t.cancel()
        _done, pending = await asyncio.wait([t for _, t in tasks], timeout=20)  # a hang detector
        assert not pending, f"every call gets exactly one ToolResult: {len(pending)} callers never answered"
        for c, t in tasks:
            if t.cancelled():
                continue
            exc = t.exception()
            assert exc is None, (c, exc)
            out = t.result()
            if isinstance(out, list):
                assert all(isinstance(r, ToolSuccess | ToolFailure | str) for r in out), out
            else:
                one_result(out, c)

    run(body, extra_policies=(Suspends(),))


# -- a full mailbox: the room is passed on ---------------------------------------------------


@pytest.mark.parametrize("policy", [False, True])
def test_backpressure_every_waiter_answered_when_calls_end_fast(policy: bool) -> None:
    async def body(env: Env) -> None:
        rt = env.rt
        for _ in range(5):  # the order of the loop's and trio's turns varies: a few rounds
            running = asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0.05})))
            queued = asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0})))
            await asyncio.sleep(0.02)
            waiting = [asyncio.ensure_future(rt.call(call("narrow", {"seconds": 0}))) for _ in range(4)]
            everyone = [running, queued, *waiting]
            _done, pending = await asyncio.wait(everyone, timeout=3)  # a hang detector, not a timing
            hung = len(pending)
            for p in pending:
                p.cancel()
            await asyncio.wait(everyone)
            assert hung == 0, (
                f"every call gets exactly one ToolResult: {hung} of 6 callers never answered, the "
                f"tool idle: {rt.statistics().tools['narrow']}"
            )

    run(body, extra_policies=(Suspends(),) if policy else ())


def test_backpressure_every_waiter_answered_on_trio_too() -> None:
    from runtime import open_runtime

    async def main() -> int:
        stranded = 0

        async def one(seconds: float, answered: list[int]) -> None:
            await rt.call(call("narrow", {"seconds": seconds}))
            answered.append(1)

        async with open_runtime([narrow], tracing=False) as rt:
            for _ in range(10):  # trio's scheduling order is random: a few rounds
                answered: list[int] = []
                with trio.move_on_after(2):  # a hang detector
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(one, 0.05, answered)
                        nursery.start_soon(one, 0, answered)
                        await trio.sleep(0.02)
                        nursery.start_soon(one, 0, answered)
                        await trio.sleep(0.005)
                        for _ in range(3):
                            nursery.start_soon(one, 0, answered)
                stranded = 6 - len(answered)
                if stranded:
                    break
        return stranded

    stranded = trio.run(main)
    assert stranded == 0, f"every call gets exactly one ToolResult: {stranded} of 6 callers never answered"


SPIN = """
import asyncio, faulthandler, sys
sys.path.insert(0, "tests")
faulthandler.dump_traceback_later(8, exit=True)
from runtime import ToolCall
from runtime.embed import open_asyncio_runtime
import test_attack_guest as T

async def main():
    async with open_asyncio_runtime(T.TOOLS, tracing=False, shutdown_timeout=1.0) as rt:
        a = asyncio.ensure_future(rt.call(ToolCall(id="a", name="narrow", arguments={"seconds": 0.2})))
        b = asyncio.ensure_future(rt.call(ToolCall(id="b", name="narrow", arguments={"seconds": 0.2})))
        await asyncio.sleep(0.02)
        first = ToolCall(id="bad", name=sys.argv[1], arguments={"x": 1})
        rs = await rt.call_many([first, ToolCall(id="n", name="narrow", arguments={"seconds": 0})])
        print("RESULTS", [type(r).__name__ for r in rs], flush=True)
        await a
        await b

asyncio.run(main())
"""


@pytest.mark.parametrize("first", ["inline_echo", "no_such_tool"])
def test_batch_waiting_for_room_after_a_settled_call_does_not_freeze_the_loop(first: str) -> None:
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", SPIN, first],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert "RESULTS" in done.stdout, (
        "every call gets exactly one ToolResult: call_many([settles at once, a call to a full "
        f"mailbox]) froze the event loop (rc={done.returncode}): {done.stderr[-900:]}"
    )


def test_mixed_batch_timeout_after_an_eager_call_settled() -> None:
    async def body(env: Env) -> None:
        cs = [
            call("inline_echo", {"x": 1}),
            call("no_such_tool", {}),
            call("trio_sleep", {"seconds": 5}),
            call("aio_sleep", {"seconds": 5}),
            call("thread_wait", {"seconds": 5}),
        ]
        rs = await env.rt.call_many(cs, timeout=0.05)
        kinds = [getattr(r, "kind", None) for r in rs]
        assert isinstance(rs[0], ToolSuccess), rs[0]
        assert kinds[1] is FailureKind.UNKNOWN_TOOL
        assert kinds[2:] == [FailureKind.TIMEOUT] * 3, kinds
        got = [r async for r in env.rt.as_completed(cs, timeout=0.05)]
        assert len(got) == len(cs)

    run(body)


def test_as_completed_left_by_break_ends_when_collected() -> None:
    import gc

    async def body(env: Env) -> None:
        it = env.rt.as_completed(
            [call("inline_echo", {"x": 1}), *[call("trio_sleep", {"seconds": 5}) for _ in range(3)]]
        )
        async for _ in it:
            break
        del it
        gc.collect()
        for _ in range(50):
            await asyncio.sleep(0.01)

    run(body)
