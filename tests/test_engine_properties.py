"""Property tests of the engine with fault injection: whatever mix of calls goes in (tools that
return, raise, refuse, hang, crash their actor or never start, unknown names, garbage
arguments) and however the caller collects or abandons them, every call gets exactly one
result with its own call id, and the runtime keeps answering."""

import contextlib
import json
from collections import Counter
from typing import Any

import msgspec
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import (
    CallContext,
    Feature,
    InvalidArguments,
    RestartPolicy,
    Tool,
    ToolBase,
    ToolCall,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    fail,
    open_runtime,
    tool,
)

# -- the tools: one per kind of behaviour --------------------------------------------------------


@tool
async def echo(ctx: CallContext, x: int = 0) -> int:
    """Returns (and takes an injected context, which the model cannot set)."""
    assert ctx.call_id
    await trio.sleep(x % 3)
    return x


@tool
def sync_echo(x: int = 0) -> int:
    """Returns, from a worker thread."""
    return x


@tool(inline=True)
def inline_echo(x: int = 0) -> int:
    """Returns, on the trio thread."""
    return x


@tool
async def boom(x: int = 0) -> int:
    """Raises."""
    await trio.sleep(x % 2)
    raise ValueError(f"boom {x}")


@tool
async def refuse(x: int = 0) -> int:
    """Refuses its input."""
    fail(f"no {x}")


@tool(timeout=3)
async def hang(x: int = 0) -> int:
    """Never returns by itself; its timeout ends it."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


class LinkLost(ConnectionError):
    pass


class FlakyArgs(msgspec.Struct, forbid_unknown_fields=True):
    x: int = 0


class Flaky(Tool[FlakyArgs, int]):
    """A negative x loses its link: the actor restarts (and may go down)."""

    name = "flaky"
    restart_on = (LinkLost,)

    async def execute(self, args: FlakyArgs) -> int:
        await trio.sleep(abs(args.x) % 2)
        if args.x < 0:
            raise LinkLost("link lost")
        return args.x


class NeverStarts(Tool[FlakyArgs, int]):
    """Its setup always fails: it goes down."""

    name = "never_starts"

    async def setup(self) -> None:
        raise OSError("cannot connect")

    async def execute(self, args: FlakyArgs) -> int:
        raise AssertionError("never runs")


KNOWN = ["echo", "sync_echo", "inline_echo", "boom", "refuse", "hang", "flaky", "never_starts"]
TOOLS: dict[str, ToolBase[Any, Any]] = {
    t.name: t for t in (echo, sync_echo, inline_echo, boom, refuse, hang, Flaky(), NeverStarts())
}
POLICY = RestartPolicy(max_restarts=2, within=10, backoff=0.5)


def expected_kinds(name: str, arguments: str | dict[str, Any]) -> set[str]:
    """The outcomes a call may have on its own (before the caller's deadline or cancellation)."""
    if name not in TOOLS:
        return {"unknown_tool"}
    try:
        args = TOOLS[name].decode_args(arguments)
    except InvalidArguments:
        valid = {"invalid_arguments"}
        if name == "never_starts":  # arguments are checked as the call arrives; once it is down, not
            valid |= {"unavailable"}
    else:
        if name == "never_starts":
            return {"unavailable"}
        valid = {
            "echo": {"ok"},
            "sync_echo": {"ok"},
            "inline_echo": {"ok"},
            "boom": {"error"},
            "refuse": {"rejected"},
            "hang": {"timeout"},
            "flaky": {"error"} if getattr(args, "x", 0) < 0 else {"ok"},
        }[name]
    if name == "flaky":
        valid = valid | {"unavailable"}  # a crash of another flaky call, or flaky is down
    return valid


def kind_of(result: ToolResult) -> str:
    return result.kind.value if isinstance(result, ToolFailure) else "ok"


# -- strategies ------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)

arguments = st.one_of(
    st.builds(lambda x: json.dumps({"x": x}), st.integers(-3, 5)),  # valid (mostly)
    st.just("{}"),
    st.just(""),
    st.builds(lambda x: {"x": x}, st.integers(-3, 5)),  # an already-parsed object
    st.text(max_size=20),  # random text
    st.binary(max_size=20).map(lambda b: b.decode("latin-1")),  # bytes seen as text
    json_values.map(json.dumps),  # JSON of any shape
    st.dictionaries(st.text(max_size=5), json_values, max_size=3),  # a parsed object of any shape
    st.builds(lambda x: json.dumps({"x": x, "ctx": {}}), st.integers(0, 3)),  # tries to set an injected name
)

names = st.one_of(
    st.sampled_from(KNOWN),
    st.sampled_from(KNOWN),  # known tools twice as often
    st.sampled_from(["ech", "nope", "Echo", "", "__terminate__"]),
    st.text(max_size=10),
)

calls_strategy = st.lists(st.tuples(names, arguments), max_size=25).map(
    lambda pairs: [ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(pairs)]
)

modes = st.one_of(
    st.just(("call_many", None)),
    st.tuples(st.just("call_many_timeout"), st.sampled_from([0.5, 1.0, 2.5, 4.0])),
    st.just(("as_completed", None)),
    st.tuples(st.just("as_completed_break"), st.integers(0, 5)),
    st.tuples(st.just("cancel_caller"), st.sampled_from([0.0, 0.5, 1.0, 3.5])),
    st.just(("concurrent_calls", None)),
)


# -- the harness -----------------------------------------------------------------------------------


class Ledger(Feature):
    """Counts every hook per call id."""

    def __init__(self) -> None:
        self.starting: Counter[str] = Counter()
        self.finished: dict[str, list[ToolResult]] = {}

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        self.starting[call.id] += 1

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess, ctx: CallContext) -> None:
        self.finished.setdefault(call.id, []).append(result)

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        self.finished.setdefault(call.id, []).append(failure)


async def exercise(calls: list[ToolCall], mode: str, param: Any, ledger: Ledger) -> list[ToolResult] | None:
    """Run `calls` the way `mode` says; the results the caller got, in input order, if it got all."""
    async with open_runtime(list(TOOLS.values()), tracing=False, restart=POLICY, features=[ledger]) as rt:
        returned: list[ToolResult] | None = None
        if mode == "call_many":
            returned = await rt.call_many(calls)
        elif mode == "call_many_timeout":
            returned = await rt.call_many(calls, timeout=param)
        elif mode == "as_completed":
            streamed = [r async for r in rt.as_completed(calls)]
            assert sorted(r.call_id for r in streamed) == sorted(c.id for c in calls)
            by_id = {r.call_id: r for r in streamed}
            returned = [by_id[c.id] for c in calls]
        elif mode == "as_completed_break":
            async with contextlib.aclosing(rt.as_completed(calls)) as stream:
                taken = 0
                async for _ in stream:
                    taken += 1
                    if taken >= param:
                        break
        elif mode == "cancel_caller":
            with trio.move_on_after(param):
                returned = await rt.call_many(calls)
        else:
            slots: list[ToolResult | None] = [None] * len(calls)

            async def one(i: int, c: ToolCall) -> None:
                slots[i] = await rt.call(c)

            async with trio.open_nursery() as nursery:
                for i, c in enumerate(calls):
                    nursery.start_soon(one, i, c)
            returned = [s for s in slots if s is not None]

        after = await rt.call(ToolCall(id="after", name="echo", arguments='{"x": 4}'))
        assert after == ToolSuccess(call_id="after", tool="echo", content="4", value=4)
    stats = rt.statistics()
    assert all(t.in_flight == 0 and t.queued == 0 for t in stats.tools.values()), stats
    assert all(t.state in ("stopped", "down") for t in stats.tools.values()), stats
    return returned


def run(calls: list[ToolCall], mode: str, param: Any) -> tuple[list[ToolResult] | None, Ledger]:
    ledger = Ledger()
    returned = trio.run(
        exercise, calls, mode, param, ledger, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    return returned, ledger


def allowed(call: ToolCall, mode: str) -> set[str]:
    kinds = expected_kinds(call.name, call.arguments)
    if call.name in TOOLS:  # a call waiting for its tool (even one that never starts) can run out of time
        if mode == "call_many_timeout":
            kinds |= {"timeout"}
        if mode in ("as_completed_break", "cancel_caller"):
            kinds |= {"cancelled"}
    return kinds


EXAMPLES = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@EXAMPLES
@given(calls=calls_strategy, mode=modes)
def test_every_call_gets_exactly_one_result_with_its_own_call_id(
    calls: list[ToolCall], mode: tuple[str, Any]
) -> None:
    name, param = mode
    returned, ledger = run(calls, name, param)
    ids = [c.id for c in calls]
    # every call was started and finished exactly once, whatever the caller did
    assert ledger.starting == Counter([*ids, "after"])
    assert sorted(ledger.finished) == sorted([*ids, "after"])
    for c in calls:
        (result,) = ledger.finished[c.id]
        assert result.call_id == c.id
        assert result.tool == c.name
        assert kind_of(result) in allowed(c, name), (c, result)
        if isinstance(result, ToolFailure):
            assert result.content.startswith("Error: ")
            assert "Traceback" not in result.content
    if name in ("call_many", "call_many_timeout", "as_completed", "concurrent_calls"):
        assert returned is not None
        assert [r.call_id for r in returned] == ids
        assert returned == [ledger.finished[i][0] for i in ids]


@settings(max_examples=40, deadline=None)
@given(
    payload=st.one_of(st.text(), st.binary().map(lambda b: b.decode("latin-1"))), name=st.sampled_from(KNOWN)
)
def test_any_text_as_arguments_gives_a_result_never_an_exception(payload: str, name: str) -> None:
    returned, _ = run([ToolCall(id="only", name=name, arguments=payload)], "call_many", None)
    assert returned is not None
    (result,) = returned
    assert result.call_id == "only"
    assert kind_of(result) in expected_kinds(name, payload)
    assert result.content.startswith("Error: ") or result.ok
