"""Property test of containment (issue 10): random batches of hostile calls, tools and callers.

Each example draws up to 30 calls, each one of: a tool that returns, raises (Exception,
KeyboardInterrupt, SystemExit), hangs, ignores its cancellation (shielded) or re-raises a
stale `trio.Cancelled`; a caller that cancels its call mid-flight or sets a per-call
timeout; arguments that are bad JSON, nested 1,000 deep (text and parsed), huge, or hold
lone surrogates; unknown tools; `ToolCall`s whose fields have the wrong types. They run
together through `call_many`, `as_completed` (to the end, or left early) or concurrent
`rt.call`s, in virtual time. Whatever the mix:

- every call is answered exactly once, with its own call id (in order for `call_many`),
  and the answer is one its case allows;
- nothing but a result comes out of the runtime (no exception reaches the caller);
- the runtime serves a fresh call afterwards, every actor still up;
- the counters agree (one call counted per routed call, nothing in flight, work that
  outlived its answer counted as abandoned) and, once the runtime has closed, the live
  trio tasks are back to what they were before it opened.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import (
    CallContext,
    Feature,
    Runtime,
    ToolCall,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)

# -- tools --------------------------------------------------------------------------------------


@tool
async def ok(x: int = 0) -> int:
    """Returns after up to 2 (virtual) seconds."""
    await trio.sleep(x % 3)
    return x


@tool
def ok_sync(x: int = 0) -> int:
    """Returns, from a worker thread."""
    return x


@tool(inline=True)
def ok_inline(x: int = 0) -> int:
    """Returns, on the trio thread."""
    return x


RAISES: dict[str, type[BaseException]] = {
    "exception": ValueError,
    "keyboard_interrupt": KeyboardInterrupt,
    "system_exit": SystemExit,
}


@tool
async def crash(what: str = "exception") -> int:
    """Raises what it is told (after a checkpoint)."""
    await trio.lowlevel.checkpoint()
    raise RAISES[what](f"crash: {what}")


@tool
def crash_sync(what: str = "exception") -> int:
    """Raises what it is told, in a worker thread."""
    raise RAISES[what](f"crash_sync: {what}")


@tool
async def hang() -> None:
    """Never returns by itself."""
    await trio.sleep_forever()


@tool
async def slow(seconds: float = 10.0) -> str:
    """Outlives any per-call timeout or caller cancellation the test sets."""
    await trio.sleep(seconds)
    return "done"


@tool(timeout=0.5)
async def timed() -> str:
    """Sleeps past its own tool timeout."""
    await trio.sleep(10)
    return "late"


@tool(timeout=0.3)
async def shielded() -> str:
    """Ignores its cancellation for 5 seconds (bounded, so that it ends before shutdown does)."""
    with trio.CancelScope(shield=True):
        await trio.sleep(5)
    return "finished late"


STALE: list[BaseException] = []  # a trio.Cancelled caught in another scope, set per example


@tool
async def stale() -> str:
    """Re-raises a `trio.Cancelled` that is not its own call's cancellation."""
    raise STALE[0]


@tool
async def anything(value: Any = None) -> str:
    """Takes any JSON value; the target of hostile argument texts."""
    return "ok"


TOOLS = [ok, ok_sync, ok_inline, crash, crash_sync, hang, slow, timed, shielded, stale, anything]
TOOL_NAMES = {t.name for t in TOOLS}
THREAD_TOOLS = {"ok_sync", "crash_sync"}


# -- hostile arguments --------------------------------------------------------------------------

MAX_ARGUMENT_BYTES = 1 << 20  # the runtime's default


def _deep_dict(depth: int) -> dict[str, Any]:
    inner: list[Any] = []
    root = {"value": inner}
    for _ in range(depth - 1):
        nxt: list[Any] = []
        inner.append(nxt)
        inner = nxt
    return root


BAD_JSON = [
    "{",
    '{"value": }',
    "nul",
    "[1, 2]",
    '{"value": 1,}',
    "{'value': 1}",
    '{"value": 1} x',
    '"s"',
    "7",
]
DEEP_TEXT = '{"value": ' + "[" * 1000 + "]" * 1000 + "}"
DEEP_DICT = _deep_dict(1000)
HUGE_TEXT = '{"value": "' + "a" * MAX_ARGUMENT_BYTES + '"}'  # over max_argument_bytes
HUGE_DICT = {"value": "a" * MAX_ARGUMENT_BYTES}
HUGE_SURROGATE = '{"value": "' + "x" * 300_000 + '\ud800"}'  # > 262,144 characters, a lone surrogate
SURROGATES: list[Any] = ['{"value": "a\ud800b"}', '{"\udfff": 1}', {"value": "\udc80"}, {"v\ud800": 1}]
UNKNOWN_NAMES = ["", "nope", "OK", "ok ", "__terminate__", "x" * 10_000]
WRONG_NAMES: list[Any] = [None, 123, ["ok"]]


# -- what a batch is made of ---------------------------------------------------------------------

PLAIN_KINDS = [
    "ok",
    "raise",
    "hang",
    "tool_timeout",
    "bad_json",
    "wrong_type",
    "deep_text",
    "deep_dict",
    "huge_text",
    "huge_dict",
    "huge_surrogate",
    "surrogate",
    "unknown_tool",
    "wrong_id",
    "wrong_name",
    "stale_cancelled",
    "shielded",
]
CALLER_KINDS = ["caller_timeout", "caller_cancel"]  # each runs in a task of its own
MODES = ["call_many", "as_completed", "as_completed_break", "concurrent"]


@dataclass
class Spec:
    """One call of a batch and what may become of it."""

    kind: str
    call: ToolCall
    expected_id: str  # the call id its result carries
    allowed: set[str]  # the result kinds its case allows ("ok" for a success)
    routed: bool  # it reaches its tool's actor (and is counted there)
    thread: bool = False  # its tool runs in a worker thread (real time under a virtual clock)
    param: float = 0.0  # caller_timeout: the timeout; caller_cancel: when to cancel
    variant: int = 0  # caller_cancel: 0, a sub-task cancelled from outside; 1, a deadline of the caller's


def make_spec(i: int, kind: str, p: int) -> Spec:
    """The `i`-th call of a batch, of case `kind`, variant `p`."""
    cid = f"c{i}"

    def to(name: str, arguments: Any, allowed: set[str], **extra: Any) -> Spec:
        return Spec(kind, ToolCall(id=cid, name=name, arguments=arguments), cid, allowed, True, **extra)

    def invalid(arguments: Any) -> Spec:
        return to("anything", arguments, {"invalid_arguments"})

    if kind == "ok":
        name = ["ok", "ok_sync", "ok_inline"][p % 3]
        return to(name, {"x": p} if p % 2 else f'{{"x": {p}}}', {"ok"}, thread=name == "ok_sync")
    if kind == "raise":
        name = ["crash", "crash_sync"][p % 2]
        what = list(RAISES)[(p // 2) % 3]
        return to(name, f'{{"what": "{what}"}}', {"error"}, thread=name == "crash_sync")
    if kind == "hang":
        return to("hang", "{}", {"timeout"})
    if kind == "tool_timeout":
        return to("timed", "{}", {"timeout"})
    if kind == "shielded":
        return to("shielded", "{}", {"timeout"})
    if kind == "stale_cancelled":
        return to("stale", "{}", {"error"})
    if kind == "bad_json":
        return invalid(BAD_JSON[p % len(BAD_JSON)])
    if kind == "wrong_type":
        return to(
            "ok", ['{"x": "1"}', '{"x": 1.5}', {"x": [1]}, '{"x": 1, "y": 2}'][p % 4], {"invalid_arguments"}
        )
    if kind == "deep_text":
        return invalid(DEEP_TEXT)
    if kind == "deep_dict":
        return invalid(DEEP_DICT)
    if kind == "huge_text":
        return invalid(HUGE_TEXT)
    if kind == "huge_dict":
        return invalid(HUGE_DICT)
    if kind == "huge_surrogate":
        return invalid(HUGE_SURROGATE)
    if kind == "surrogate":
        return invalid(SURROGATES[p % len(SURROGATES)])
    if kind == "unknown_tool":
        return Spec(
            kind, ToolCall(id=cid, name=UNKNOWN_NAMES[p % len(UNKNOWN_NAMES)]), cid, {"unknown_tool"}, False
        )
    if kind == "wrong_id":
        return Spec(kind, ToolCall(id=None, name="ok"), "", {"invalid_arguments"}, False)  # type: ignore[arg-type]
    if kind == "wrong_name":
        name = WRONG_NAMES[p % len(WRONG_NAMES)]
        return Spec(kind, ToolCall(id=cid, name=name), cid, {"unknown_tool"}, False)
    if kind == "caller_timeout":
        return to("slow", "{}", {"timeout"}, param=[0.1, 0.5, 1.0, 2.0][p % 4])
    if kind == "caller_cancel":
        return to("slow", "{}", {"cancelled"}, param=[0.0, 0.1, 1.0][p % 3], variant=(p // 3) % 2)
    raise AssertionError(kind)


batches = st.lists(
    st.tuples(st.sampled_from(PLAIN_KINDS + CALLER_KINDS), st.integers(0, 1000)), min_size=1, max_size=30
).map(lambda drawn: [make_spec(i, kind, p) for i, (kind, p) in enumerate(drawn)])


# -- the harness ---------------------------------------------------------------------------------


class Ledger(Feature):
    """Every call's hooks, by call id: the answer to every call, including the cancelled ones."""

    def __init__(self) -> None:
        self.starting: Counter[str] = Counter()
        self.finished: dict[str, list[ToolResult]] = {}

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        self.starting[call.id] += 1

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess, ctx: CallContext) -> None:
        self.finished.setdefault(call.id, []).append(result)

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        self.finished.setdefault(call.id, []).append(failure)


def count_tasks() -> int:
    """Live trio tasks, from the root task down (the runtime's system task included)."""

    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(walk(child) for nursery in task.child_nurseries for child in nursery.child_tasks)

    return walk(trio.lowlevel.current_root_task())


async def capture_cancelled() -> BaseException:
    """A `trio.Cancelled` caught in a scope that is gone by the time a tool raises it."""
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            caught = exc
            raise
    return caught


def kind_of(result: ToolResult) -> str:
    return result.kind.value if isinstance(result, ToolFailure) else "ok"


async def run_batch(
    rt: Runtime, specs: list[Spec], mode: str, timeout: float | None, stop_after: int
) -> dict[int, ToolResult]:
    """Run the batch as `mode` says; the results its callers got, by spec index."""
    got: dict[int, ToolResult] = {}
    plain = [i for i, s in enumerate(specs) if s.kind not in CALLER_KINDS]

    async def one(i: int, call_timeout: float | None) -> None:
        got[i] = await rt.call(specs[i].call, timeout=call_timeout)

    async def caller_side(i: int) -> None:
        spec = specs[i]
        if spec.kind == "caller_timeout":
            got[i] = await rt.call(spec.call, timeout=spec.param)
        elif spec.variant:  # cancelled by a deadline on the caller's own scope
            with trio.move_on_after(spec.param):
                got[i] = await rt.call(spec.call)
        else:  # a sub-task calling rt.call, cancelled from outside mid-flight

            async def sub(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
                with trio.CancelScope() as scope:
                    task_status.started(scope)
                    got[i] = await rt.call(spec.call)

            async with trio.open_nursery() as inner:
                scope = await inner.start(sub)
                await trio.sleep(spec.param)
                scope.cancel()

    async with trio.open_nursery() as nursery:
        for i, s in enumerate(specs):
            if s.kind in CALLER_KINDS:
                nursery.start_soon(caller_side, i)
        calls = [specs[i].call for i in plain]
        if mode == "call_many":
            results = await rt.call_many(calls, timeout=timeout)
            assert len(results) == len(plain)  # one result per call, in order
            got.update(zip(plain, results, strict=True))
        elif mode in ("as_completed", "as_completed_break"):
            by_id: dict[str, list[int]] = {}
            for i in plain:
                by_id.setdefault(specs[i].expected_id, []).append(i)
            async with contextlib.aclosing(rt.as_completed(calls, timeout=timeout)) as stream:
                async for result in stream:
                    got[by_id[result.call_id].pop(0)] = result
                    if mode == "as_completed_break" and len(got) >= stop_after:
                        break  # the calls still running are cancelled
            if mode == "as_completed":
                assert all(not left for left in by_id.values()), by_id
        else:
            for i in plain:
                nursery.start_soon(one, i, timeout)
    return got


async def exercise(
    specs: list[Spec],
    mode: str,
    batch_timeout: float | None,
    default_timeout: float | None,
    stop_after: int,
    ledger: Ledger | None,
) -> None:
    STALE[:] = [await capture_cancelled()]
    has_hang = any(s.kind == "hang" for s in specs)
    if has_hang and batch_timeout is None and default_timeout is None:
        batch_timeout = 8.0  # something must end a hang
    deadline = batch_timeout is not None or default_timeout is not None
    for s in specs:
        if s.thread and deadline:
            # A worker thread takes real time, in which the virtual clock may jump to a deadline.
            s.allowed.add("timeout")
        if s.routed and mode == "as_completed_break" and s.kind not in CALLER_KINDS:
            s.allowed.add("cancelled")

    routed = Counter(s.call.name for s in specs if s.routed)
    features = [ledger] if ledger is not None else []
    before = count_tasks()
    async with open_runtime(TOOLS, tracing=False, features=features, default_timeout=default_timeout) as rt:
        got = await run_batch(rt, specs, mode, batch_timeout, stop_after)

        # what the callers got: each result answers its own call, as its case allows
        for i, result in got.items():
            spec = specs[i]
            assert isinstance(result, ToolSuccess | ToolFailure), result
            assert result.call_id == spec.expected_id, (spec, result)
            assert kind_of(result) in spec.allowed, (spec, result)
            if isinstance(result, ToolFailure):
                assert "Traceback" not in result.message
                if spec.kind in ("unknown_tool", "wrong_name", "huge_text", "huge_surrogate", "huge_dict"):
                    assert len(result.message) < 1_000, (spec.kind, len(result.message))  # bounded echo
        waited_for = {i for i, s in enumerate(specs) if s.kind == "caller_timeout"}
        if mode != "as_completed_break":
            waited_for |= {i for i, s in enumerate(specs) if s.kind not in CALLER_KINDS}
        assert waited_for <= set(got), sorted(waited_for - set(got))
        assert not {i for i, s in enumerate(specs) if s.kind == "caller_cancel"} & set(got)

        # the runtime serves on
        after = await rt.call_many(
            [
                ToolCall(id="after-ok", name="ok", arguments='{"x": 4}'),
                ToolCall(id="after-inline", name="ok_inline", arguments='{"x": 5}'),
                ToolCall(id="after-stale", name="stale"),
            ]
        )
        assert after[0] == ToolSuccess(call_id="after-ok", tool="ok", content="4", value=4)
        assert after[1] == ToolSuccess(call_id="after-inline", tool="ok_inline", content="5", value=5)
        assert kind_of(after[2]) == "error"
        assert {t.state for t in rt.statistics().tools.values()} == {"up"}
        routed.update(["ok", "ok_inline", "stale"])

    stats = rt.statistics()
    assert count_tasks() == before  # nothing the runtime started outlives it
    for name in TOOL_NAMES:
        t = stats.tools[name]
        assert t.calls == routed[name], (name, t, routed[name])  # every routed call counted once
        assert (t.in_flight, t.queued) == (0, 0), (name, t)
        if name in THREAD_TOOLS:
            # A thread whose call timed out (the virtual clock jumps while it runs) is abandoned
            # and counted; it gives its slot back when it ends, in real time, maybe after this.
            assert t.abandoned_running <= t.abandoned <= t.calls - t.succeeded, (name, t)
        else:
            assert t.abandoned_running == 0, (name, t)
            if name != "shielded":
                assert t.abandoned == 0, (name, t)  # everything else stopped when cancelled
    assert stats.unknown_tool_calls == sum(1 for s in specs if s.kind == "unknown_tool")

    if ledger is not None:  # every call, the cancelled ones included, answered exactly once
        expected = Counter(s.expected_id for s in specs) + Counter(
            ["after-ok", "after-inline", "after-stale"]
        )
        assert ledger.starting == expected
        assert Counter({k: len(v) for k, v in ledger.finished.items()}) == expected
        for s in specs:
            assert {kind_of(r) for r in ledger.finished[s.expected_id]} <= s.allowed, (
                s,
                ledger.finished[s.expected_id],
            )
        for i, result in got.items():
            assert result in ledger.finished[specs[i].expected_id]

    # a shielded call answered TIMEOUT ran on past its answer: counted as abandoned work
    answers = (
        [r for s in specs for r in ledger.finished[s.expected_id] if s.kind == "shielded"]
        if ledger is not None
        else [r for i, r in got.items() if specs[i].kind == "shielded"]
    )
    timed_out = sum(1 for r in answers if kind_of(r) == "timeout")
    assert timed_out <= stats.tools["shielded"].abandoned <= routed["shielded"]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=batches,
    mode=st.sampled_from(MODES),
    batch_timeout=st.sampled_from([None, 8.0]),
    default_timeout=st.sampled_from([None, 6.0]),
    stop_after=st.integers(1, 30),
    with_ledger=st.booleans(),
)
async def test_hostile_batches_are_contained(
    autojump_clock: trio.abc.Clock,
    specs: list[Spec],
    mode: str,
    batch_timeout: float | None,
    default_timeout: float | None,
    stop_after: int,
    with_ledger: bool,
) -> None:
    ledger = Ledger() if with_ledger else None
    await exercise(specs, mode, batch_timeout, default_timeout, stop_after, ledger)


# -- found by the soak ------------------------------------------------------------------------------


class BusyHook(Feature):
    """A failure hook that keeps the event loop busy for 100 ms (a synchronous log sink, say)."""

    def __init__(self, clock: trio.testing.MockClock) -> None:
        self.clock = clock

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        self.clock.jump(0.1)  # as `time.sleep(0.1)` would, in virtual time


async def test_a_call_that_stops_when_cancelled_is_not_abandoned_on_a_busy_loop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime([slow], tracing=False, features=[BusyHook(autojump_clock)]) as rt:
        with trio.move_on_after(0.5):
            await rt.call(ToolCall(id="v", name="slow"))  # the caller gives up mid-call
        await trio.sleep(1)
        stats = rt.statistics().tools["slow"]
    assert stats.failures == {"cancelled": 1}
    assert stats.abandoned == 0  # `await trio.sleep(10)` stopped at once when cancelled
