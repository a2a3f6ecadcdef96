"""Code mode (`runtime.code`): a program's tool calls are calls like any other.

The programs run in pydantic-monty's worker processes: real time passes there while a worker
runs a turn. `program_clock` is virtual time that stands still then and jumps to the next
deadline only when trio is idle and no sandbox turn is in flight, so sleeps and timeouts of the
tools are exact virtual seconds whatever the machine's load.
"""

from __future__ import annotations

import ast
import keyword
import re
from typing import Any, Protocol

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import (
    Budget,
    CallContext,
    Dedupe,
    FailureKind,
    Policy,
    ToolCall,
    ToolFailure,
    ToolRegistry,
    ToolSuccess,
    ToolUnavailable,
    fail,
    open_runtime,
    tool,
)
from runtime.code import RAISED, CodeTool, ProgramResult, code_mode
from runtime.mcp import JsonSchemaTool
from runtime.tracing import Tracing


class ProgramClock(Protocol):
    """What `program_clock` is: a trio MockClock that can watch code tools."""

    def watch(self, *tools: CodeTool) -> None: ...


@pytest.fixture
def program_clock() -> Any:
    """trio's autojump clock (virtual time that jumps to the next deadline once every task
    waits), except while a watched code tool waits on its sandbox: a worker runs a program's
    turn then, in real time, and the clock must not jump past it.

    MockClock is final: its `_autojump` (private; trio calls it once the run is idle, after
    waking `wait_all_tasks_blocked` waiters) is wrapped on the instance.
    """
    clock: Any = trio.testing.MockClock(autojump_threshold=0)
    tools: list[CodeTool] = []
    jump = clock._autojump

    def autojump() -> None:
        if not any(t.statistics().sandbox_waits for t in tools):
            jump()  # else a worker is running: time stands still until the next idle moment

    clock._autojump = autojump
    clock.watch = lambda *more: tools.extend(more)
    return clock


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def slow(x: int, seconds: float = 0.2) -> int:
    """Wait `seconds`, then give `x` back."""
    await trio.sleep(seconds)
    return x


@tool
async def whoami(ctx: CallContext) -> str:
    """Who the call runs for."""
    return str(ctx.principal)


def run(code: str, call_id: str = "prog") -> ToolCall:
    return ToolCall(id=call_id, name="run_code", arguments={"code": code})


def value(result: Any) -> Any:
    assert isinstance(result, ToolSuccess), result
    assert isinstance(result.value, ProgramResult)
    return result.value.result


# -- the contract --------------------------------------------------------------------------


async def test_a_program_calls_tools_with_keywords_and_its_last_expression_is_the_result() -> None:
    run_code = code_mode()
    async with open_runtime([add, run_code], tracing=False) as rt:
        result = await rt.call(
            run(
                "import asyncio\n"
                "async def main():\n"
                "    return await add(a=1, b=2)\n"
                "x = asyncio.run(main())\n"
                "print('x is', x)\n"
                "{'x': x, 'y': await add(a=x, b=10)}"
            )
        )
    assert value(result) == {"x": 3, "y": 13}
    assert result.value.output == "x is 3\n"
    assert result.content == 'x is 3\n\nValue: {"x":3,"y":13}'


async def test_the_description_carries_typed_stubs_of_the_views_tools_and_follows_the_view() -> None:
    run_code = code_mode()
    async with open_runtime([add, slow, run_code], tracing=False) as rt:
        whole = run_code.describe(rt).description
        assert "async def add(*, a: int, b: int) -> int:" in whole
        assert "async def slow(*, x: int, seconds: float = 0.2) -> int:" in whole
        assert "async def run_code" not in whole  # a program does not run programs
        with rt.scoped(principal="eve", exclude=["slow"], prepare=run_code.prepare) as view:
            (shown,) = [s for s in view.schemas("openai") if s["function"]["name"] == "run_code"]
            assert "async def add(" in shown["function"]["description"]
            assert "async def slow(" not in shown["function"]["description"]
        await rt.register(whoami)  # the view changes: the stubs are made again
        assert "async def whoami() -> str:" in run_code.describe(rt).description
        schemas = run_code.schemas(rt, "anthropic")
        assert [s["name"] for s in schemas] == ["add", "slow", "run_code", "whoami"]
        assert "async def whoami()" in schemas[2]["description"]


async def test_programs_see_the_principal_and_view_of_the_code_call() -> None:
    run_code = code_mode()
    async with open_runtime([add, whoami, run_code], tracing=False) as rt:
        mine = await rt.call(run("await whoami()"), principal="bob")
        with rt.scoped(principal="eve", exclude=["whoami"]) as view:
            hidden = await view.call(
                run("try:\n    r = await whoami()\nexcept NameError as e:\n    r = str(e)\nr")
            )
    assert value(mine) == "bob"
    assert value(hidden).startswith("Error: no tool named 'whoami'")  # hidden from the view: as if absent


async def test_the_stubs_are_made_from_what_the_views_prepare_shows() -> None:
    run_code = code_mode()

    def public(view: Any, descriptor: Any) -> Any:
        if descriptor.name == "whoami":
            return None  # hidden from this view
        if descriptor.name == "add":
            return msgspec.structs.replace(descriptor, description="Sum of two numbers (v2).")
        return descriptor

    async with open_runtime([add, whoami, run_code], tracing=False) as rt:
        with rt.scoped(principal="eve", prepare=public) as view:
            (shown,) = [s for s in run_code.schemas(view, "anthropic") if s["name"] == "run_code"]
            stubs = shown["description"]
            assert "Sum of two numbers (v2)." in stubs
            assert "Add two integers." not in stubs
            assert "whoami" not in stubs
            (add_schema,) = [s for s in run_code.schemas(view, "anthropic") if s["name"] == "add"]
            assert add_schema["description"] == "Sum of two numbers (v2)."
            result = await view.call(run("await add(a=2, b=3)"))
        assert value(result) == 5
        assert "Add two integers." in run_code.describe(rt).description  # the runtime's own view


MAIL_SCHEMA = {
    "type": "object",
    "properties": {
        "from": {"type": "string", "description": "The sender."},
        "to-addr": {"type": "string"},
        "to_addr": {"type": "string"},
        "type": {"type": "string"},
        "headers": {
            "type": "object",
            "properties": {"reply-to": {"type": "string"}, "class": {"type": "string"}},
            "required": ["reply-to"],
        },
    },
    "required": ["from", "to-addr"],
}


def _mail_tool(got: list[dict[str, Any]]) -> JsonSchemaTool:
    async def send(arguments: dict[str, Any], ctx: Any) -> str:
        got.append(arguments)
        return "sent"

    return JsonSchemaTool("send-mail", "Send a mail.", MAIL_SCHEMA, send)


def _stubs(description: str) -> str:
    return description.split("```python\n", 1)[1].split("```", 1)[0]


async def test_parameters_that_are_not_python_names_get_a_keyword_and_arrive_under_their_own() -> None:
    got: list[dict[str, Any]] = []
    run_code = code_mode()
    async with open_runtime([_mail_tool(got), run_code], tracing=False) as rt:
        stubs = _stubs(run_code.describe(rt).description)
        ast.parse(stubs)  # what the model reads is Python
        # `to_addr` is a parameter's own name: `to-addr` takes the next form; `type` (a soft
        # keyword) is a Python name as it is; an object's keys are the dict's, kept as they are.
        assert (
            "async def send_mail(*, from_: str, to_addr_: str, to_addr: str = ..., type: str = ...," in stubs
        )
        assert "from_: The sender. (the parameter 'from')" in stubs
        assert '"reply-to": str,' in stubs
        result = await rt.call(
            run(
                'await send_mail(from_="ann", to_addr_="bob", to_addr="cc", type="memo", '
                'headers={"reply-to": "ann", "class": "x"})'
            )
        )
        assert value(result) == "sent"
        assert got == [
            {
                "from": "ann",
                "to-addr": "bob",
                "to_addr": "cc",
                "type": "memo",
                "headers": {"reply-to": "ann", "class": "x"},
            }
        ]
        both = await rt.call(
            run(
                'try:\n    await send_mail(from_="a", to_addr_="b", **{"from": "c"})\nexcept TypeError as e:\n    r = str(e)\nr'
            )
        )
        assert value(both) == "send_mail() got multiple values for argument 'from'"
        own = await rt.call(run('await send_mail(**{"from": "a", "to-addr": "b"})'))  # its own names work too
        assert value(own) == "sent"
        assert got[-1] == {"from": "a", "to-addr": "b"}


@settings(max_examples=200, deadline=None)
@given(names=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=6, unique=True))
@example(names=['"""'])  # its name, shown in the docstring, once ended it (found by a run)
def test_the_stubs_are_python_whatever_the_parameters_are_called(names: list[str]) -> None:
    schema = {"type": "object", "properties": {n: {"type": "string"} for n in names}, "required": names[:1]}
    inner = {"type": "object", "properties": {n: {"type": "integer"} for n in names}}
    schema["properties"]["a nested object"] = inner  # its keys: a TypedDict's, as they are
    run_code = code_mode()
    registry = ToolRegistry([JsonSchemaTool("f", "F.", schema, _ok), run_code])
    stubs = _stubs(run_code.describe(registry).description)
    module = ast.parse(stubs)
    (function,) = [n for n in module.body if isinstance(n, ast.AsyncFunctionDef)]
    keywords = [a.arg for a in function.args.kwonlyargs]
    assert len(set(keywords)) == len(names) + 1  # one keyword a parameter, none shared
    # A parameter called by a Python name keeps it (a soft keyword is one); the others get forms.
    assert {n for n in names if n.isascii() and n.isidentifier() and not keyword.iskeyword(n)} <= set(
        keywords
    )
    (typed,) = [n for n in module.body if isinstance(n, ast.Assign | ast.ClassDef)]
    if isinstance(typed, ast.Assign):  # the functional form: the keys as they are
        assert isinstance(typed.value, ast.Call)
        assert [ast.literal_eval(k) for k in typed.value.args[1].keys] == names  # type: ignore[attr-defined]
    else:
        assert [f.target.id for f in typed.body if isinstance(f, ast.AnnAssign)] == names  # type: ignore[attr-defined]


async def _ok(arguments: dict[str, Any], ctx: Any) -> str:
    return "ok"


# -- every call through the runtime ------------------------------------------------------


async def test_each_program_call_is_one_span_under_the_code_calls_span() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    run_code = code_mode()
    async with open_runtime([add, slow, run_code], tracing=Tracing(tracer_provider=provider)) as rt:
        result = await rt.call(
            run(
                "import asyncio\n"
                "a = await add(a=1, b=2)\n"
                "b, c = await asyncio.gather(slow(x=a, seconds=0), add(a=a, b=a))\n"
                "[a, b, c]"
            ),
            principal="ann",
        )
    assert value(result) == [3, 3, 6]
    finished = spans.get_finished_spans()
    (code_span,) = [s for s in finished if s.name == "execute_tool run_code"]
    inner = [s for s in finished if s is not code_span]
    assert sorted(s.name for s in inner) == ["execute_tool add", "execute_tool add", "execute_tool slow"]
    for span in inner:
        assert span.parent is not None
        assert span.parent.span_id == code_span.context.span_id
        assert span.context.trace_id == code_span.context.trace_id
        assert span.attributes is not None
        assert span.attributes["gen_ai.tool.call.id"].startswith("prog.")
        assert span.attributes["tool_runtime.principal"] == "ann"


async def test_a_code_call_with_a_remote_parent_still_parents_its_programs_spans() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    remote = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    run_code = code_mode()
    async with open_runtime([add, run_code], tracing=Tracing(tracer_provider=provider)) as rt:
        await rt.call(run("await add(a=1, b=1)"), metadata={"traceparent": remote})
    finished = {s.name: s for s in spans.get_finished_spans()}
    code_span, inner = finished["execute_tool run_code"], finished["execute_tool add"]
    assert code_span.parent is not None
    assert code_span.parent.span_id == 0xB7AD6B7169203331  # the caller's, from its traceparent
    assert inner.parent is not None
    assert inner.parent.span_id == code_span.context.span_id  # the code call's, not the caller's
    assert inner.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C


@tool
async def context_of(ctx: CallContext) -> dict[str, Any]:
    """What a call knows of its caller."""
    return {
        "tenant": ctx.metadata.get("tenant"),
        "key": ctx.metadata.get("idempotency_key"),
        "deadline": ctx.deadline,
    }


async def test_a_programs_calls_get_the_code_calls_deadline_and_metadata(program_clock: ProgramClock) -> None:
    run_code = code_mode(timeout=5.0)
    program_clock.watch(run_code)
    async with open_runtime([context_of, run_code], tracing=False) as rt:
        start = trio.current_time()
        result = await rt.call(
            run("await context_of()"), metadata={"tenant": "acme", "idempotency_key": "k1"}
        )
    seen = value(result)
    assert seen["tenant"] == "acme"
    assert seen["key"] is None  # the code call's own key: its calls would all share it
    assert seen["deadline"] == start + 5.0


@tool(dedupe=Dedupe())
async def record(item: str) -> str:
    """Record an item once."""
    await trio.sleep(0.1)
    return item


async def test_dedupe_joins_a_programs_identical_calls_and_keeps_different_ones_apart(
    program_clock: ProgramClock,
) -> None:
    run_code = code_mode()
    program_clock.watch(run_code)
    async with open_runtime([record, run_code], tracing=False) as rt:
        result = await rt.call(
            run("import asyncio\nawait asyncio.gather(record(item='a'), record(item='a'), record(item='b'))"),
            metadata={"idempotency_key": "the-code-call"},
        )
        stats = rt.statistics().tools["record"]
    assert value(result) == ["a", "a", "b"]
    assert stats.joined == 1  # the second 'a' shared the first's execution; 'b' ran on its own


class NoDeletes(Policy):
    """Refuses `delete` for everyone but the admin."""

    def intercept(self, request: Any) -> Any:
        if request.tool_name == "delete" and request.principal != "admin":
            return request.reject(f"{request.principal} may not delete")
        result = yield request
        return result


@tool
async def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


async def test_a_policy_that_refuses_a_tool_refuses_it_from_code_too() -> None:
    run_code = code_mode()
    async with open_runtime([delete, run_code], policies=[NoDeletes()], tracing=False) as rt:
        direct = await rt.call(ToolCall(id="d", name="delete", arguments={"path": "/x"}), principal="eve")
        from_code = await rt.call(
            run("try:\n    r = await delete(path='/x')\nexcept ValueError as e:\n    r = str(e)\nr"),
            principal="eve",
        )
        admin = await rt.call(run("await delete(path='/x')"), principal="admin")
    assert isinstance(direct, ToolFailure)
    assert direct.kind is FailureKind.REJECTED
    assert value(from_code) == direct.content
    assert value(admin) == "deleted /x"


async def test_a_budget_counts_the_calls_a_program_makes(program_clock: ProgramClock) -> None:
    run_code = code_mode()
    program_clock.watch(run_code)
    async with open_runtime([slow, run_code], budget=Budget(per_principal=3), tracing=False) as rt:
        result = await rt.call(
            run(
                "import asyncio\n"
                "async def one(i):\n"
                "    try:\n"
                "        return await slow(x=i, seconds=1)\n"
                "    except OSError as e:\n"
                "        return str(e)\n"
                "await asyncio.gather(*[one(i) for i in range(5)])"
            ),
            principal="alice",
        )
        stats = rt.statistics().tools["slow"]
    answers = value(result)
    # The code call itself is one of alice's 3: two of its calls run (any two), three are refused.
    ran = [a for a in answers if isinstance(a, int)]
    assert len(ran) == 2
    refused = [a for a in answers if isinstance(a, str)]
    assert len(refused) == 3
    assert all(a.startswith("Error: ") and "alice" in a for a in refused)
    assert stats.succeeded == 2
    assert stats.failures == {FailureKind.OVERLOADED.value: 3}


async def test_a_programs_calls_are_one_batch_whose_calls_past_per_batch_wait_their_turn(
    program_clock: ProgramClock,
) -> None:
    run_code = code_mode(timeout=10.0)
    program_clock.watch(run_code)
    gather = "import asyncio\nawait asyncio.gather(*[slow(x=i, seconds=1) for i in range(5)])"
    async with open_runtime([slow, run_code], budget=Budget(per_batch=2), tracing=False) as rt:
        start = trio.current_time()
        waves = await rt.call(run(gather))
        took = trio.current_time() - start
        # Two turns (two code calls) are two batches: each has its own two places.
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(2):
                nursery.start_soon(rt.call, run(gather, f"turn-{i}"))
        both = trio.current_time() - start
        # Waiting for a place counts against the program's deadline: past it, the code call is TIMEOUT.
        late = await rt.call(run(gather), timeout=2.5)
        stats = rt.statistics().tools["slow"]
    assert value(waves) == [0, 1, 2, 3, 4]  # none refused: past per_batch they waited
    assert took == pytest.approx(3.0)  # two at once: 2 + 2 + 1
    assert both == pytest.approx(3.0)
    assert isinstance(late, ToolFailure)
    assert late.kind is FailureKind.TIMEOUT
    assert stats.failures.get(FailureKind.OVERLOADED.value, 0) == 0


async def test_a_gather_of_five_slow_calls_takes_one_calls_time(program_clock: ProgramClock) -> None:
    run_code = code_mode()
    program_clock.watch(run_code)
    async with open_runtime([slow, run_code], tracing=False) as rt:
        start = trio.current_time()
        result = await rt.call(
            run("import asyncio\nawait asyncio.gather(*[slow(x=i, seconds=0.2) for i in range(5)])")
        )
        took = trio.current_time() - start
        start = trio.current_time()
        one_by_one = await rt.call(run("[await slow(x=i, seconds=0.2) for i in range(5)]"))
        sequential = trio.current_time() - start
    assert value(result) == [0, 1, 2, 3, 4]
    assert took < 0.3
    assert took == pytest.approx(0.2)
    assert value(one_by_one) == [0, 1, 2, 3, 4]
    assert sequential == pytest.approx(1.0)


async def test_sleeps_in_a_program_run_on_the_runtimes_clock(program_clock: ProgramClock) -> None:
    run_code = code_mode()
    program_clock.watch(run_code)
    async with open_runtime([slow, run_code], tracing=False) as rt:
        start = trio.current_time()
        result = await rt.call(
            run(
                "import asyncio, time\n"
                "time.sleep(1)\n"
                "await asyncio.gather(asyncio.sleep(2), slow(x=1, seconds=2), asyncio.sleep(1))"
            )
        )
        took = trio.current_time() - start
    assert value(result) == [None, 1, None]
    assert took == pytest.approx(3.0)


# -- failures reach the program ------------------------------------------------------------


@tool
async def refuses(x: int) -> int:
    """Always refuses."""
    fail(f"{x} is not accepted")


@tool
async def breaks(x: int) -> int:
    """Always fails."""
    raise KeyError(x)


@tool(timeout=0.5)
async def hangs(x: int) -> int:
    """Never answers in time."""
    await trio.sleep(10)
    return x


@tool
async def gone(x: int) -> int:
    """Its backend is down."""
    raise ToolUnavailable("the backend is down")


@tool(max_concurrency=1, mailbox_size=1, on_full="reject")
async def narrow(x: int) -> int:
    """Serves one call at a time and queues one."""
    await trio.sleep(1)
    return x


@tool
async def cancelled_by_policy(x: int) -> int:
    """A policy answers its calls CANCELLED."""
    return x


class CancelsThem(Policy):
    """Answers `cancelled_by_policy` as if its caller had gone."""

    def applies(self, tool: Any) -> bool:
        return tool.name == "cancelled_by_policy"

    def intercept(self, request: Any) -> Any:
        yield request
        return ToolFailure(
            call_id=request.id,
            tool=request.tool_name,
            kind=FailureKind.CANCELLED,
            message="the call was cancelled",
        )


KIND_PROGRAMS = {
    FailureKind.UNKNOWN_TOOL: "await no_such_tool(x=1)",
    FailureKind.INVALID_ARGUMENTS: "await add(a='one', b=2)",
    FailureKind.REJECTED: "await refuses(x=1)",
    FailureKind.ERROR: "await breaks(x=1)",
    FailureKind.TIMEOUT: "await hangs(x=1)",
    FailureKind.CANCELLED: "await cancelled_by_policy(x=1)",
    FailureKind.UNAVAILABLE: "await gone(x=1)",
    FailureKind.OVERLOADED: "import asyncio\nawait asyncio.gather(narrow(x=1), narrow(x=2), narrow(x=3))",
}

DIRECT = {
    FailureKind.UNKNOWN_TOOL: [ToolCall(id="u", name="no_such_tool", arguments={"x": 1})],
    FailureKind.INVALID_ARGUMENTS: [ToolCall(id="i", name="add", arguments={"a": "one", "b": 2})],
    FailureKind.REJECTED: [ToolCall(id="r", name="refuses", arguments={"x": 1})],
    FailureKind.ERROR: [ToolCall(id="e", name="breaks", arguments={"x": 1})],
    FailureKind.TIMEOUT: [ToolCall(id="t", name="hangs", arguments={"x": 1})],
    FailureKind.CANCELLED: [ToolCall(id="c", name="cancelled_by_policy", arguments={"x": 1})],
    FailureKind.UNAVAILABLE: [ToolCall(id="g", name="gone", arguments={"x": 1})],
    FailureKind.OVERLOADED: [ToolCall(id=f"n{i}", name="narrow", arguments={"x": i}) for i in (1, 2, 3)],
}


@pytest.mark.parametrize("kind", list(FailureKind))
async def test_every_failure_kind_reaches_the_program_as_an_exception_with_the_models_text(
    kind: FailureKind, program_clock: ProgramClock
) -> None:
    run_code = code_mode()
    program_clock.watch(run_code)
    tools = [add, refuses, breaks, hangs, gone, narrow, cancelled_by_policy, run_code]
    async with open_runtime(tools, policies=[CancelsThem()], tracing=False) as rt:
        direct = [r for r in await rt.call_many(DIRECT[kind]) if isinstance(r, ToolFailure)]
        code = KIND_PROGRAMS[kind]
        program = (
            "caught = None\n"
            "try:\n"
            + "".join(f"    {line}\n" for line in code.splitlines())
            + f"except {RAISED[kind]} as e:\n"
            "    caught = [type(e).__name__, str(e)]\n"
            "caught"
        )
        result = await rt.call(run(program))
    (expected,) = {r.kind for r in direct}
    assert expected is kind
    caught = value(result)
    assert caught is not None, f"{kind}: nothing was raised in the program"
    assert caught[0] == RAISED[kind]
    # The model's text, word for word (the call ids in it differ: theirs and the program's).
    assert _without_ids(caught[1]) in {_without_ids(r.content) for r in direct}


def _without_ids(text: str) -> str:
    return re.sub(r"call \S+", "call ?", text)


# -- limits --------------------------------------------------------------------------------


async def test_a_program_past_its_deadline_is_stopped_and_its_worker_killed() -> None:
    run_code = code_mode(timeout=0.5)
    async with open_runtime([add, run_code], tracing=False) as rt:
        result = await rt.call(run("x = 0\nwhile True:\n    x += 1"))
        again = await rt.call(run("await add(a=1, b=1)"))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.TIMEOUT
    assert run_code.statistics().workers_killed == 1
    assert value(again) == 2  # the pool replaced the worker


async def test_a_cancelled_program_answers_every_pending_call(program_clock: ProgramClock) -> None:
    run_code = code_mode()
    program_clock.watch(run_code)
    async with open_runtime([slow, run_code], tracing=False) as rt:
        with trio.move_on_after(1):
            await rt.call(
                run("import asyncio\nawait asyncio.gather(*[slow(x=i, seconds=50) for i in range(4)])")
            )
        assert trio.current_time() == 1.0
        await trio.testing.wait_all_tasks_blocked()
        stats = rt.statistics().tools["slow"]
        assert stats.in_flight == 0
        assert stats.calls == 4
        assert stats.failures == {FailureKind.CANCELLED.value: 4}
    assert run_code.statistics().running == 0


async def test_a_program_makes_at_most_max_calls() -> None:
    run_code = code_mode(max_calls=3)
    async with open_runtime([add, run_code], tracing=False) as rt:
        result = await rt.call(
            run(
                "done = []\n"
                "try:\n"
                "    for i in range(10):\n"
                "        done.append(await add(a=i, b=0))\n"
                "except RuntimeError as e:\n"
                "    done.append(str(e))\n"
                "done"
            )
        )
        stats = rt.statistics().tools["add"]
    done = value(result)
    assert done[:3] == [0, 1, 2]
    assert "3 tool calls" in done[3]
    assert stats.calls == 3


async def test_a_programs_result_is_cut_like_any_result() -> None:
    run_code = code_mode()
    async with open_runtime([add, run_code], tracing=False, max_result_chars=1000) as rt:
        result = await rt.call(run("print('x' * 5000)\n'y' * 5000"))
    assert isinstance(result, ToolSuccess)
    assert len(result.content) < 1200
    assert "truncated" in result.content


async def test_a_program_without_the_clock_cannot_read_it() -> None:
    run_code = code_mode(clock=False)
    async with open_runtime([add, run_code], tracing=False) as rt:
        result = await rt.call(
            run(
                "import time, datetime\n"
                "out = []\n"
                "try:\n"
                "    out.append(time.time())\n"
                "except PermissionError as e:\n"
                "    out.append(str(e))\n"
                "try:\n"
                "    out.append(datetime.datetime.now())\n"
                "except PermissionError as e:\n"
                "    out.append(str(e))\n"
                "out"
            )
        )
    assert value(result) == ["the clock is not available to programs here"] * 2


async def test_one_programs_state_is_not_the_next_ones() -> None:
    run_code = code_mode(workers=1)  # one worker: the second program runs where the first did
    async with open_runtime([add, run_code], tracing=False) as rt:
        first = await rt.call(run("secret = 'alice'\nsecret"), principal="alice")
        second = await rt.call(run("secret"), principal="bob")
    assert value(first) == "alice"
    assert isinstance(second, ToolFailure)
    assert "NameError: name 'secret' is not defined" in second.message


async def test_bad_limits_are_refused_when_the_tool_is_made() -> None:
    with pytest.raises(ValueError, match="max_calls"):
        code_mode(max_calls=0)
    with pytest.raises(ValueError, match="nope"):
        code_mode(nope=1)  # type: ignore[call-arg]


async def test_a_program_that_fails_is_rejected_with_its_traceback_and_output() -> None:
    run_code = code_mode()
    async with open_runtime([add, run_code], tracing=False) as rt:
        result = await rt.call(run("print('before')\nx = {}\nx['missing']"))
        syntax = await rt.call(run("def f(:\n  pass"))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.REJECTED
    assert "KeyError" in result.message
    assert "line 3" in result.message
    assert "before" in result.message
    assert isinstance(syntax, ToolFailure)
    assert "SyntaxError" in syntax.message


async def test_run_code_outside_a_runtime_is_unavailable() -> None:
    run_code = code_mode()
    ctx = CallContext("x", "run_code")
    with pytest.raises(ToolUnavailable):
        await run_code.execute(run_code.decode_args({"code": "1"}), ctx)
