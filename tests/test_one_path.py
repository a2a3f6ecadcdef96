"""One call, one path (issue 21): the same random batch of call kinds, through every executor and
every caller, gets exactly one result per call (in order for `call_many`), the same outcome for
a kind on every route, and leaves nothing behind.

The outcome of each kind, on every route where it applies (`EXPECTED`):

    kind       what the call does                                          outcome
    ok         the tool returns its `n`                                    success, value n
    raise      the tool raises ValueError                                  ERROR
    hang       the tool never returns; its own timeout is T                TIMEOUT
    cancel     the tool would take SLOW; its caller cancels it             CANCELLED
    timeout    the tool would take SLOW; its caller's timeout is T         TIMEOUT
    bad_json   arguments that are not JSON                                 INVALID_ARGUMENTS
    deep_json  arguments nested past the depth limit                       INVALID_ARGUMENTS
    unknown    a tool name the runtime does not have                       UNKNOWN_TOOL
    stale      the tool raises a trio.Cancelled that is not its own        ERROR
    shielded   the tool ignores its cancellation for SHIELD; timeout T     TIMEOUT
    blocking   a sync tool blocks its thread (process) for BLOCK; timeout T  TIMEOUT

Executors: `task` (a trio worker task: an async tool that suspends), `eager` (an async tool that
cannot suspend: run in the caller's task), `inline` (a sync tool with inline=True: in the
caller's task too), `thread` (a sync tool: its kept threads), `asyncio` (loop="asyncio": a task
of the host asyncio loop), `subprocess` (a Subprocess worker), `ray` (a Ray replica), `stream` (a
streaming tool, an async generator in a worker task: each kind happens after its first chunk,
mid-stream; its one-by-one calls are read with `stream`, chunk by chunk, where the caller has it,
and every generator started must be closed by the end). Which kind applies where (x: applies;
-: `NOT_APPLICABLE` says why; bug: `KNOWN_BUGS`, a strict xfail):

    kind       task eager inline thread asyncio subprocess ray stream
    ok          x     x     x      x      x        x        x    x
    raise       x     x     x      x      x        x        x    x
    hang        x     -     -      x      x        x        x    x
    cancel      x     -     -      x      x        x        x    x     (- for the `threads` caller)
    timeout     x     -     -      x      x        x        x    x
    bad_json    x     x     x      x      x        x        x    x
    deep_json   x     x     x      x      x        x        x    x
    unknown     (names no tool: one call per batch entry, on every route)
    stale       x     x     x      x      x        x        x    x
    shielded    x     -     -      -      x        x        x    x
    blocking    -     -     -      x      -        x        x    -

Callers: `trio` (`open_runtime`; on trio's virtual clock for the in-process executors),
`asyncio` and `uvloop` (`open_asyncio_runtime` on either loop), `threads` (a `RuntimeThread`
called from several threads at once), `thread_asyncio` (a `RuntimeThread` called from asyncio,
`acall` / `acall_many`). The asyncio executor needs a host asyncio loop: it is on the routes of
the asyncio and uvloop callers only (any other runtime refuses a loop="asyncio" tool).

Each route sends every call of the batch several times, all at once: in batches (`call_many` of
the calls without a caller's deadline, one `call_many(timeout=T)` of the `timeout` ones, one
`call_many` of the `cancel` ones that its caller cancels), one by one (`call`, each in its own
task or thread), and, for the callers that have it, through `as_completed`. A feature records
every call's start and end, so a cancelled caller's calls are seen too. Once every call has its
result the in-process tools that still wait are released, and the statistics must come back:
nothing in flight, queued, abandoned-and-running or holding a thread, each tool's counters
equal to its calls' outcomes, no restart, and no more calls counted abandoned than could be.
Then the runtime closes, and no task, thread, process or Ray actor may be left
(tests/leakcheck.py). Real time where threads or processes run (small: T is 0.2 s), trio's
virtual time where the route allows.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import leakcheck
import one_path_tools as opt
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from runtime import (
    Budget,
    Cache,
    CallContext,
    CallRequest,
    CircuitBreaker,
    Dedupe,
    FailureKind,
    Feature,
    Policy,
    ToolCall,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.placement import Subprocess

T = opt.T

# -- the table -------------------------------------------------------------------------------------

EXPECTED: dict[str, FailureKind | None] = {
    "ok": None,
    "raise": FailureKind.ERROR,
    "hang": FailureKind.TIMEOUT,
    "cancel": FailureKind.CANCELLED,
    "timeout": FailureKind.TIMEOUT,
    "bad_json": FailureKind.INVALID_ARGUMENTS,
    "deep_json": FailureKind.INVALID_ARGUMENTS,
    "unknown": FailureKind.UNKNOWN_TOOL,
    "stale": FailureKind.ERROR,
    "shielded": FailureKind.TIMEOUT,
    "blocking": FailureKind.TIMEOUT,
}
KINDS = tuple(EXPECTED)

_ONE_STEP = (
    "a call that cannot suspend runs to its end in one step, in its caller's task: it cannot "
    "hang, wait, be cancelled midway or time out (an inline tool refuses a timeout)"
)
_NO_THREAD = (
    "an async tool has no thread of its own to block (a blocking call in it blocks the event "
    "loop: a bug in the tool, not a kind of call)"
)
NOT_APPLICABLE: dict[tuple[str, str], str] = {
    **{("eager", k): _ONE_STEP for k in ("hang", "cancel", "timeout", "shielded", "blocking")},
    **{("inline", k): _ONE_STEP for k in ("hang", "cancel", "timeout", "shielded", "blocking")},
    ("thread", "shielded"): (
        "a thread cannot be cancelled, so it has nothing to shield itself from: `blocking` is its case"
    ),
    ("task", "blocking"): _NO_THREAD,
    ("asyncio", "blocking"): _NO_THREAD,
    ("stream", "blocking"): _NO_THREAD,
    # callers
    ("threads", "cancel"): "a thread blocked in RuntimeThread.call has no way to cancel it",
}
"""(executor or caller, kind) -> why that kind does not apply there."""

KNOWN_BUGS: dict[tuple[str, str], str] = {}
"""(executor, kind) -> the bug in the runtime that breaks that kind there. Left out of the random
batches (so that they test everything else) and shown failing, strictly, by
`test_a_known_bug_still_breaks_its_kind`: when the bug is fixed, that test says so."""

# The `unknown` kind names no tool: one call per batch entry, whatever the executors.

# -- the tools -------------------------------------------------------------------------------------

ASYNC_TOOLS = {
    "task": tool(opt.trio_kinds, name="task"),
    "task_timed": tool(opt.trio_kinds, name="task_timed", timeout=T),
    "eager": tool(opt.eager_kinds, name="eager"),
    "inline": tool(opt.sync_kinds, name="inline", inline=True),
    "thread": tool(opt.sync_kinds, name="thread"),
    "thread_timed": tool(opt.sync_kinds, name="thread_timed", timeout=T),
    "stream": tool(opt.stream_kinds, name="stream"),
    "stream_timed": tool(opt.stream_kinds, name="stream_timed", timeout=T),
}
ASYNCIO_TOOLS = {
    "asyncio": tool(opt.asyncio_kinds, name="asyncio", loop="asyncio"),
    "asyncio_timed": tool(opt.asyncio_kinds, name="asyncio_timed", loop="asyncio", timeout=T),
}
SUBPROCESS_TOOLS = {
    "subprocess": tool(opt.trio_kinds, name="subprocess", placement=Subprocess(workers=2)),
    "subprocess_timed": tool(
        opt.trio_kinds, name="subprocess_timed", timeout=T, placement=Subprocess(workers=2)
    ),
    "subprocess_blocking": tool(
        opt.sync_kinds, name="subprocess_blocking", timeout=T, placement=Subprocess(workers=1)
    ),
}
try:
    from runtime.placement.ray import Ray
except ImportError:  # pragma: no cover - the ray extra is absent
    RAY_TOOLS: dict[str, Any] = {}
else:
    RAY_TOOLS = {
        "ray": tool(opt.trio_kinds, name="ray", placement=Ray(replicas=1, num_cpus=0)),
        "ray_timed": tool(opt.trio_kinds, name="ray_timed", timeout=T, placement=Ray(replicas=1, num_cpus=0)),
        "ray_blocking": tool(
            opt.sync_kinds, name="ray_blocking", timeout=T, placement=Ray(replicas=1, num_cpus=0)
        ),
    }

opt.stale_cancelled()  # made here, once: the eager tool raises it without a thread of its own


def _target(kind: str, executor: str, block: float = opt.BLOCK) -> tuple[str, str]:
    """The tool a kind's call goes to on an executor, and the call's arguments."""
    if kind == "blocking":
        name = f"{executor}_timed" if executor == "thread" else f"{executor}_blocking"
        return name, f'{{"kind": "block", "seconds": {block}}}'
    if kind in ("hang", "shielded"):
        return f"{executor}_timed", f'{{"kind": "{kind}"}}'
    if kind == "timeout":
        return executor, '{"kind": "slow"}'
    if kind == "cancel":  # not a timed call's arguments: with Dedupe on, it would join that run,
        # whose deadline (T) could answer it before its caller's cancellation reaches the runtime
        return executor, '{"kind": "slow", "n": 1}'
    if kind == "bad_json":
        return executor, '{"kind": "ok", "n": '
    if kind == "deep_json":
        return executor, opt.deep_arguments()
    return executor, f'{{"kind": "{kind}"}}'


# -- a plan: the calls of one route ----------------------------------------------------------------


@dataclass
class Planned:
    call: ToolCall
    kind: str
    executor: str | None  # None: no such tool (the `unknown` kind)
    tool: str | None
    value: int  # what a success returns


@dataclass
class Plan:
    many: list[Planned] = field(default_factory=list)  # call_many, no caller deadline
    timed: list[Planned] = field(default_factory=list)  # call_many(timeout=T)
    cancelled: list[Planned] = field(default_factory=list)  # call_many, cancelled by its caller
    single: list[Planned] = field(default_factory=list)  # one call each, all at once
    streamed: list[Planned] = field(default_factory=list)  # as_completed, no caller deadline

    @property
    def calls(self) -> list[Planned]:
        return self.many + self.timed + self.cancelled + self.single + self.streamed


STREAMING = ("trio", "asyncio", "uvloop")  # the callers that have `as_completed`


def plan(
    batch: list[str],
    executors: Iterable[str],
    caller: str,
    known_bugs: Mapping[tuple[str, str], str],
    block: float = opt.BLOCK,
) -> Plan:
    out = Plan()
    executors = tuple(executors)
    for mode in ("batch", "single", "stream") if caller in STREAMING else ("batch", "single"):
        for i, kind in enumerate(batch):
            if (caller, kind) in NOT_APPLICABLE:
                continue
            targets: list[tuple[str | None, str]]
            if kind == "unknown":
                targets = [(None, "no_such_tool")]
            else:
                targets = [
                    (e, _target(kind, e)[0])
                    for e in executors
                    if (e, kind) not in NOT_APPLICABLE and (e, kind) not in known_bugs
                ]
            if mode == "stream" and kind in ("timeout", "cancel"):
                continue  # the other modes give them their caller's deadline, or cancel them
            for executor, name in targets:
                value = 1000 * i + len(out.calls)
                arguments = (
                    _target(kind, executor, block)[1]
                    if executor is not None
                    else f'{{"kind": "ok", "n": {value}}}'
                )
                if kind == "ok":
                    arguments = f'{{"kind": "ok", "n": {value}}}'
                call_id = f"{mode}-{i}-{kind}-{executor or 'none'}"
                call = ToolCall(id=call_id, name=name, arguments=arguments)
                p = Planned(call, kind, executor, executor and name, value)
                if mode == "single":
                    out.single.append(p)
                elif mode == "stream":
                    out.streamed.append(p)
                elif kind == "timeout":
                    out.timed.append(p)
                elif kind == "cancel":
                    out.cancelled.append(p)
                else:
                    out.many.append(p)
    return out


# -- what a route observed -------------------------------------------------------------------------


class Recorder(Feature):
    """Every call's start and end, as the features see them (hooks that cannot suspend: the
    runtime's direct paths stay open to the calls)."""

    def __init__(self) -> None:
        self.started: collections.Counter[str] = collections.Counter()
        self.ended: dict[str, list[str]] = collections.defaultdict(list)
        self.witness = Witness()

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        self.started[call.id] += 1

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess, ctx: CallContext) -> None:
        self.ended[call.id].append("ok")

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        self.ended[call.id].append(failure.kind.value)


class Witness(Policy):
    """A policy on every route: each call it lets through comes back to it once, with the
    outcome its caller gets (a policy's before and after halves, on the one path)."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = collections.defaultdict(list)

    def intercept(self, request: CallRequest) -> Any:
        result: ToolResult = yield request
        self.seen[request.id].append(_outcome(result))
        return result


@dataclass
class Observed:
    batches: dict[str, list[ToolResult]] = field(default_factory=dict)  # "many" / "timed" -> results
    single: dict[str, ToolResult] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)  # the callers (call ids) that saw their cancellation
    stats: Any = None
    recorder: Any = None  # the run's Recorder (an asyncio caller waits for it to see cancellations)


def _outcome(result: ToolResult) -> str:
    return "ok" if isinstance(result, ToolSuccess) else result.kind.value  # type: ignore[union-attr]


def _expected(p: Planned) -> str:
    kind = EXPECTED[p.kind]
    return "ok" if kind is None else kind.value


def check(plan_: Plan, seen: Observed, recorder: Recorder) -> None:
    def result_of(p: Planned, result: ToolResult) -> None:
        assert result.call_id == p.call.id
        assert (p.call.id, _outcome(result)) == (p.call.id, _expected(p)), result
        if p.kind == "ok":  # a stream's value: its chunks (the digits of n) joined
            assert result.value == (str(p.value) if p.executor == "stream" else p.value)  # type: ignore[union-attr]

    for key, group in (("many", plan_.many), ("timed", plan_.timed)):
        if group:
            results = seen.batches[key]
            assert [r.call_id for r in results] == [p.call.id for p in group]  # one each, in order
            for p, r in zip(group, results, strict=True):
                result_of(p, r)
    for p in plan_.single:
        if p.kind == "cancel":
            assert p.call.id in seen.cancelled  # its caller saw its own cancellation, no result
            assert p.call.id not in seen.single
        else:
            result_of(p, seen.single[p.call.id])
    if plan_.streamed:
        streamed = {r.call_id: r for r in seen.batches["streamed"]}
        assert sorted(r.call_id for r in seen.batches["streamed"]) == sorted(
            p.call.id for p in plan_.streamed
        )
        for p in plan_.streamed:
            result_of(p, streamed[p.call.id])
    if plan_.cancelled:
        assert "cancelled" in seen.cancelled
        assert "cancelled" not in seen.batches
    every = plan_.calls
    assert recorder.started == collections.Counter(p.call.id for p in every)  # once each
    assert dict(recorder.ended) == {p.call.id: [_expected(p)] for p in every}  # once each
    assert dict(recorder.witness.seen) == {
        p.call.id: [_expected(p)] for p in every
    }  # the runtime-wide policy's after-half: once each, the caller's outcome (a call to no tool too)
    # statistics: each tool's counters are its calls' outcomes; nothing runs any more
    stats = seen.stats
    by_tool: dict[str, list[Planned]] = collections.defaultdict(list)
    for p in every:
        if p.tool is not None:
            by_tool[p.tool].append(p)
    assert stats.unknown_tool_calls == sum(p.tool is None for p in every)
    for name, t in stats.tools.items():
        outcomes = [_expected(p) for p in by_tool.get(name, [])]
        failures = collections.Counter(o for o in outcomes if o != "ok")
        assert (name, t.calls, t.succeeded, t.failures) == (
            name,
            len(outcomes),
            outcomes.count("ok"),
            failures,
        )
        assert (name, t.in_flight, t.queued, t.abandoned_running, t.threads) == (name, 0, 0, 0, 0)
        assert (name, t.restarts, t.state) == (name, 0, "up")
        may_be_abandoned = sum(p.kind in ABANDONABLE.get(p.executor or "", ()) for p in by_tool.get(name, []))
        assert t.abandoned <= may_be_abandoned, (name, t.abandoned)


ABANDONABLE: dict[str, tuple[str, ...]] = {
    "task": ("shielded",),
    "stream": ("shielded",),
    "asyncio": ("shielded",),
    "thread": ("hang", "cancel", "timeout", "blocking"),
}
"""The kinds whose work may run on after their answer (counted `abandoned`), by executor: work that
ignores its cancellation, and a thread, which cannot be stopped (a call still queued for a thread
when answered never runs, hence "may"). A worker process is killed: nothing runs on."""


def _settled(stats: Any) -> bool:
    return all(
        t.in_flight == 0 and t.queued == 0 and t.abandoned_running == 0 and t.threads == 0
        for t in stats.tools.values()
    )


_DRAIN = 30.0  # seconds (real) the abandoned work may take to end once released


# -- the callers -----------------------------------------------------------------------------------


def run_trio(
    plan_: Plan, tools: list[Any], *, virtual: bool, options: Mapping[str, Any] = {}
) -> tuple[Observed, Recorder]:
    recorder = Recorder()
    seen = Observed(recorder=recorder)

    async def main() -> None:
        async with open_runtime(
            tools, features=[recorder], policies=[recorder.witness], tracing=False, **options
        ) as rt:
            scopes: list[trio.CancelScope] = []
            async with trio.open_nursery() as nursery:

                async def batch(key: str, group: list[Planned], timeout: float | None = None) -> None:
                    seen.batches[key] = await rt.call_many([p.call for p in group], timeout=timeout)

                async def one(p: Planned) -> None:
                    timeout = T if p.kind == "timeout" else None
                    if p.executor == "stream":  # read chunk by chunk: the chunks, then one result
                        seen.single[p.call.id] = read_stream(
                            [i async for i in rt.stream(p.call, timeout=timeout)]
                        )
                    else:
                        seen.single[p.call.id] = await rt.call(p.call, timeout=timeout)

                async def cancelled(key: str, fn: Callable[[], Awaitable[None]]) -> None:
                    with trio.CancelScope() as scope:
                        scopes.append(scope)
                        await fn()
                    if scope.cancelled_caught:
                        seen.cancelled.add(key)

                async def stream(group: list[Planned]) -> None:
                    seen.batches["streamed"] = [r async for r in rt.as_completed([p.call for p in group])]

                if plan_.many:
                    nursery.start_soon(batch, "many", plan_.many)
                if plan_.timed:
                    nursery.start_soon(batch, "timed", plan_.timed, T)
                if plan_.streamed:
                    nursery.start_soon(stream, plan_.streamed)
                if plan_.cancelled:
                    nursery.start_soon(cancelled, "cancelled", lambda: batch("cancelled", plan_.cancelled))
                for p in plan_.single:
                    if p.kind == "cancel":
                        nursery.start_soon(cancelled, p.call.id, lambda p=p: one(p))
                    else:
                        nursery.start_soon(one, p)
                await trio.sleep(T / 2)  # any moment would do: a cancelled call is CANCELLED, run or not
                for scope in scopes:
                    scope.cancel()
            opt.RELEASE.set()
            deadline = time.monotonic() + _DRAIN  # real time: on a MockClock, a trio deadline comes at once
            while not _settled(rt.statistics()) and time.monotonic() < deadline:
                await trio.to_thread.run_sync(time.sleep, 0.005)  # threads and processes run in real time
            seen.stats = rt.statistics()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0) if virtual else None)
    return seen, recorder


def read_stream(items: list[Any]) -> ToolResult:
    """The one result of a streamed call: its last item; every item before it is a chunk."""
    assert items, "a stream yields its result at least"
    *chunks, result = items
    assert all(type(chunk) is str for chunk in chunks), chunks
    assert isinstance(result, ToolSuccess | ToolFailure), result
    if isinstance(result, ToolSuccess):
        assert "".join(chunks) == result.content  # the result: the chunks joined
    return result


class _AsyncCaller:
    """`call` / `call_many` / `as_completed` / `stream` of an AsyncioRuntime, or `acall` /
    `acall_many` of a RuntimeThread (which has no `as_completed` nor an asyncio `stream`)."""

    def __init__(
        self, call: Any, call_many: Any, statistics: Any, as_completed: Any = None, stream: Any = None
    ) -> None:
        self.call, self.call_many, self.statistics, self.as_completed, self.stream = (
            call,
            call_many,
            statistics,
            as_completed,
            stream,
        )


async def drive_asyncio(plan_: Plan, rt: _AsyncCaller, seen: Observed) -> None:
    async def batch(key: str, group: list[Planned], timeout: float | None = None) -> None:
        seen.batches[key] = await rt.call_many([p.call for p in group], timeout=timeout)

    async def one(p: Planned) -> None:
        timeout = T if p.kind == "timeout" else None
        if p.executor == "stream" and rt.stream is not None:  # chunk by chunk, then one result
            seen.single[p.call.id] = read_stream([i async for i in rt.stream(p.call, timeout=timeout)])
        else:
            seen.single[p.call.id] = await rt.call(p.call, timeout=timeout)

    async def stream(group: list[Planned]) -> None:
        seen.batches["streamed"] = [r async for r in rt.as_completed([p.call for p in group])]

    tasks: list[asyncio.Task[None]] = []
    to_cancel: dict[str, asyncio.Task[None]] = {}
    if plan_.streamed:
        tasks.append(asyncio.ensure_future(stream(plan_.streamed)))
    if plan_.many:
        tasks.append(asyncio.ensure_future(batch("many", plan_.many)))
    if plan_.timed:
        tasks.append(asyncio.ensure_future(batch("timed", plan_.timed, T)))
    if plan_.cancelled:
        to_cancel["cancelled"] = asyncio.ensure_future(batch("cancelled", plan_.cancelled))
    for p in plan_.single:
        if p.kind == "cancel":
            to_cancel[p.call.id] = asyncio.ensure_future(one(p))
        else:
            tasks.append(asyncio.ensure_future(one(p)))
    await asyncio.sleep(T / 2)  # any moment would do: a cancelled call is CANCELLED, run or not
    for task in to_cancel.values():
        task.cancel()
    async with asyncio.timeout(60):
        await asyncio.gather(*tasks)
        for key, task in to_cancel.items():
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if task.cancelled():
                seen.cancelled.add(key)
        # The asyncio side is done at once; the runtime settles the calls it cancelled a moment
        # later: released sooner, a thread's call could still finish first (and be "ok").
        cancelled = {p.call.id for p in plan_.cancelled + plan_.single if p.kind == "cancel"}
        while seen.recorder is not None and not cancelled <= set(seen.recorder.ended):  # noqa: ASYNC110 - set on another thread
            await asyncio.sleep(0.005)
    opt.RELEASE.set()
    async with asyncio.timeout(_DRAIN):
        while not _settled(rt.statistics()):  # noqa: ASYNC110 - threads and processes: no event to wait on
            await asyncio.sleep(0.005)
    seen.stats = rt.statistics()


def _loop_runner(loop: str) -> asyncio.Runner:
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    return asyncio.Runner()


def run_guest(
    plan_: Plan, tools: list[Any], *, loop: str, options: Mapping[str, Any] = {}
) -> tuple[Observed, Recorder]:
    recorder = Recorder()
    seen = Observed(recorder=recorder)

    async def main() -> None:
        async with open_asyncio_runtime(
            tools, features=[recorder], policies=[recorder.witness], tracing=False, **options
        ) as rt:
            await drive_asyncio(
                plan_, _AsyncCaller(rt.call, rt.call_many, rt.statistics, rt.as_completed, rt.stream), seen
            )

    with _loop_runner(loop) as runner:
        runner.run(main())
    return seen, recorder


def run_thread_asyncio(
    plan_: Plan, tools: list[Any], options: Mapping[str, Any] = {}
) -> tuple[Observed, Recorder]:
    recorder = Recorder()
    seen = Observed(recorder=recorder)
    with (
        RuntimeThread(
            tools, features=[recorder], policies=[recorder.witness], tracing=False, **options
        ) as rt,
        asyncio.Runner() as runner,
    ):
        runner.run(drive_asyncio(plan_, _AsyncCaller(rt.acall, rt.acall_many, rt.statistics), seen))
    return seen, recorder


def run_threads(plan_: Plan, tools: list[Any], options: Mapping[str, Any] = {}) -> tuple[Observed, Recorder]:
    recorder = Recorder()
    seen = Observed(recorder=recorder)
    with RuntimeThread(
        tools, features=[recorder], policies=[recorder.witness], tracing=False, **options
    ) as rt:
        errors: list[BaseException] = []

        def catching(fn: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                try:
                    fn()
                except BaseException as exc:
                    errors.append(exc)

            return run

        def batch(key: str, group: list[Planned], timeout: float | None = None) -> None:
            seen.batches[key] = rt.call_many([p.call for p in group], timeout=timeout)

        def one(p: Planned) -> None:
            timeout = T if p.kind == "timeout" else None
            if p.executor == "stream":  # chunk by chunk, then one result
                seen.single[p.call.id] = read_stream(list(rt.stream(p.call, timeout=timeout)))
            else:
                seen.single[p.call.id] = rt.call(p.call, timeout=timeout)

        jobs: list[Callable[[], None]] = []
        if plan_.many:
            jobs.append(lambda: batch("many", plan_.many))
        if plan_.timed:
            jobs.append(lambda: batch("timed", plan_.timed, T))
        jobs.extend((lambda p=p: one(p)) for p in plan_.single)
        threads = [threading.Thread(target=catching(job), name=f"caller {i}") for i, job in enumerate(jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        opt.RELEASE.set()
        deadline = time.monotonic() + _DRAIN
        while not _settled(rt.statistics()) and time.monotonic() < deadline:
            time.sleep(0.005)
        seen.stats = rt.statistics()
    return seen, recorder


CALLERS = ("trio", "asyncio", "uvloop", "threads", "thread_asyncio")


def run_route(
    caller: str,
    batch: list[str],
    executors: tuple[str, ...],
    tools: list[Any],
    known_bugs: Mapping[tuple[str, str], str] = KNOWN_BUGS,
    options: Mapping[str, Any] = {},
    asyncio_tools: Mapping[str, Any] = ASYNCIO_TOOLS,
) -> None:
    """Run `batch` on `executors` from `caller` (but the `known_bugs`): check every result, the
    statistics, and that nothing is left once the runtime has closed. `options` go to the
    runtime (`open_runtime` and the others)."""
    if caller in ("asyncio", "uvloop"):
        executors = (*executors, "asyncio") if "task" in executors else executors
        tools = [*tools, *asyncio_tools.values()] if "task" in executors else tools
    virtual = caller == "trio" and not any(e in executors for e in ("subprocess", "ray"))
    plan_ = plan(batch, executors, caller, known_bugs, opt.BLOCK_VIRTUAL if virtual else opt.BLOCK)
    opt.RELEASE.clear()
    opt.STREAMS.clear()
    with leakcheck.scope() as scope:
        if caller == "trio":
            seen, recorder = run_trio(plan_, tools, virtual=virtual, options=options)
        elif caller in ("asyncio", "uvloop"):
            seen, recorder = run_guest(plan_, tools, loop=caller, options=options)
        elif caller == "threads":
            seen, recorder = run_threads(plan_, tools, options)
        else:
            seen, recorder = run_thread_asyncio(plan_, tools, options)
    check(plan_, seen, recorder)
    assert scope.leaks() == []
    # every streaming tool's generator that started was closed, however its call ended
    assert opt.STREAMS["opened"] == opt.STREAMS["closed"], opt.STREAMS


def batches(kinds: Iterable[str] = KINDS, max_size: int = 8) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(tuple(kinds)), min_size=1, max_size=max_size)


def _settings(examples: int) -> settings:
    """`examples` random batches besides the explicit ones (0: the explicit ones alone)."""
    return settings(
        max_examples=max(1, examples),
        phases=tuple(Phase) if examples else (Phase.explicit,),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,  # a failing batch is printed; no example database to share between worktrees
    )


IN_PROCESS = ("task", "eager", "inline", "thread", "stream")
EXAMPLES = {"trio": 50, "asyncio": 6, "uvloop": 6, "threads": 6, "thread_asyncio": 6}

# -- the tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("caller", CALLERS)
def test_in_process_executors(caller: str) -> None:
    @_settings(EXAMPLES[caller])
    @given(batch=batches())
    @example(batch=list(KINDS))  # every kind, on every route, in every run
    def run(batch: list[str]) -> None:
        run_route(caller, batch, IN_PROCESS, list(ASYNC_TOOLS.values()))

    run()


# The same tools with every resilience policy that leaves a call's outcome as it was: identical
# calls join one run (`Dedupe`: the batches repeat arguments, such as every `raise` or `hang`),
# successes are cached (each `ok` has its own arguments, so none is served twice), a breaker
# that hears every attempt but never opens, and budgets that make calls wait their turn
# (per batch, per principal) in a fair queue. Each call must still get its one result, the same
# outcome, every hook once, and nothing may be left.
_RESILIENT = {"read_only": True, "cache": Cache(ttl=60), "dedupe": Dedupe(ttl=0)}
RESILIENT_TOOLS = {
    "task": tool(opt.trio_kinds, name="task", **_RESILIENT),
    "task_timed": tool(opt.trio_kinds, name="task_timed", timeout=T, **_RESILIENT),
    "eager": tool(opt.eager_kinds, name="eager", **_RESILIENT),
    "inline": tool(opt.sync_kinds, name="inline", inline=True, **_RESILIENT),
    "thread": tool(opt.sync_kinds, name="thread", **_RESILIENT),
    "thread_timed": tool(opt.sync_kinds, name="thread_timed", timeout=T, **_RESILIENT),
    "stream": tool(opt.stream_kinds, name="stream", **_RESILIENT),
    "stream_timed": tool(opt.stream_kinds, name="stream_timed", timeout=T, **_RESILIENT),
}
RESILIENT_ASYNCIO_TOOLS = {
    "asyncio": tool(opt.asyncio_kinds, name="asyncio", loop="asyncio", **_RESILIENT),
    "asyncio_timed": tool(opt.asyncio_kinds, name="asyncio_timed", loop="asyncio", timeout=T, **_RESILIENT),
}
RESILIENT_OPTIONS = {
    "breaker": CircuitBreaker(failures=1_000_000),
    "budget": Budget(per_batch=3, per_principal=5, wait=True),
    "fair": True,
}


@pytest.mark.parametrize("caller", CALLERS)
def test_in_process_executors_with_resilience(caller: str) -> None:
    @_settings(max(2, EXAMPLES[caller] // 3))
    @given(batch=batches())
    @example(batch=list(KINDS))
    def run(batch: list[str]) -> None:
        run_route(
            caller,
            batch,
            IN_PROCESS,
            list(RESILIENT_TOOLS.values()),
            options=RESILIENT_OPTIONS,
            asyncio_tools=RESILIENT_ASYNCIO_TOOLS,
        )

    run()


SUBPROCESS_EXAMPLES = {"trio": 1, "asyncio": 0, "uvloop": 0, "threads": 0, "thread_asyncio": 0}
"""Random batches through worker processes in `make test`, besides every kind's batch (seconds
each); `test_subprocess_workers_more_batches` (`make test-slow`) runs ten more from each caller."""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Subprocess placement: Linux")
@pytest.mark.parametrize("caller", CALLERS)
def test_subprocess_workers(caller: str) -> None:
    @_settings(SUBPROCESS_EXAMPLES[caller])
    @given(batch=batches(max_size=6))
    @example(batch=list(KINDS))
    def run(batch: list[str]) -> None:
        run_route(caller, batch, ("subprocess",), list(SUBPROCESS_TOOLS.values()))

    run()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Subprocess placement: Linux")
@pytest.mark.parametrize("caller", CALLERS)
def test_subprocess_workers_more_batches(caller: str) -> None:
    @_settings(10)
    @given(batch=batches())
    def run(batch: list[str]) -> None:
        run_route(caller, batch, ("subprocess",), list(SUBPROCESS_TOOLS.values()))

    run()


_RAY_QUICK = ("ok", "raise", "bad_json", "deep_json", "unknown", "stale")  # no replica is killed


@pytest.mark.skipif(not RAY_TOOLS, reason="the ray extra is absent")
@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("caller", ["trio", "threads"])
def test_ray_replicas_quick_kinds(caller: str) -> None:
    @_settings(0)  # the batch of every quick kind; random ones in test_ray_replicas (make test-slow)
    @given(batch=batches(_RAY_QUICK, max_size=6))
    @example(batch=list(_RAY_QUICK))
    def run(batch: list[str]) -> None:
        run_route(caller, batch, ("ray",), list(RAY_TOOLS.values()))

    run()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not RAY_TOOLS, reason="the ray extra is absent")
@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("caller", CALLERS)
def test_ray_replicas(caller: str) -> None:
    @_settings(3)
    @given(batch=batches(max_size=6))
    @example(batch=list(KINDS))
    def run(batch: list[str]) -> None:
        run_route(caller, batch, ("ray",), list(RAY_TOOLS.values()))

    run()


TOOLS_OF = {"subprocess": SUBPROCESS_TOOLS, "ray": RAY_TOOLS}


@pytest.mark.parametrize(
    ("executor", "kind"),
    [
        pytest.param(e, k, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=why))
        for (e, k), why in KNOWN_BUGS.items()
    ],
)
def test_a_known_bug_still_breaks_its_kind(executor: str, kind: str) -> None:
    run_route("trio", [kind, "ok"], (executor,), list(TOOLS_OF[executor].values()), known_bugs={})


def test_the_table_in_this_docstring_is_the_one_the_tests_use() -> None:
    assert __doc__ is not None
    columns = ("task", "eager", "inline", "thread", "asyncio", "subprocess", "ray", "stream")
    header = "    kind       " + " ".join(columns)
    lines = __doc__.split(header + "\n", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines if not line.split()[1].startswith("(")}
    assert set(rows) == set(KINDS) - {"unknown"}
    for kind, marks in rows.items():
        expected = [
            "bug" if (e, kind) in KNOWN_BUGS else "-" if (e, kind) in NOT_APPLICABLE else "x" for e in columns
        ]
        assert marks[: len(columns)] == expected, kind
    for where, kind in [*NOT_APPLICABLE, *KNOWN_BUGS]:
        assert where in columns or where in CALLERS, where
        assert kind in KINDS, kind
